"""The one training recipe: what `train` and `diagnose` both run, in this order, from typed
settings and token streams. The order is part of the result: the seed is set before the model
draws its initial weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch

from headstudy.weights.model import Decoder
from headstudy.weights.settings import TrainingSettings
from headstudy.weights.training import LanguageModelModule, ResumeStepsAgree, TokenDataModule, build_trainer


@dataclass
class Training:
    trainer: L.Trainer
    module: LanguageModelModule
    datamodule: TokenDataModule

    def fit(self, resume_from: Path | None = None) -> None:
        self.trainer.fit(self.module, datamodule=self.datamodule, ckpt_path=resume_from)


def prepare_training(
    settings: TrainingSettings,
    train_tokens: np.ndarray,
    valid_tokens: np.ndarray,
    callbacks: list[L.Callback],
    threads: int,
) -> Training:
    """Threads, seed, Trainer, model, batches and the Lightning module, ready to fit. `threads`
    can change the weights' last bits (CPU kernels split their sums by thread), as the CPU can."""
    torch.set_num_threads(threads)
    L.seed_everything(settings.seed, workers=True)
    trainer = build_trainer(settings.trainer, [*callbacks, ResumeStepsAgree()])
    model = Decoder(settings.model)
    datamodule = TokenDataModule(
        train_tokens,
        valid_tokens,
        settings.batch_size,
        settings.model.context,
        settings.seed,
        settings.trainer.val_every_steps,
    )
    module = LanguageModelModule(model, settings.optimizer, settings.trainer.max_steps, settings.trainer.compile)
    return Training(trainer, module, datamodule)
