"""Lightning wraps the plain model: where batches come from, what a step does, and the
callbacks that make a run resumable and measured."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, Sampler

from headstudy.data import load_tokens, stream_batches, training_batch
from headstudy.model import Decoder, next_token_loss


class TrainingBatches(Dataset):
    """Item k is the whole batch of training step k."""

    def __init__(self, tokens: np.ndarray, batch_size: int, context: int, seed: int):
        self.tokens, self.batch_size, self.context, self.seed = tokens, batch_size, context, seed

    def __getitem__(self, step: int):
        return training_batch(self.tokens, self.batch_size, self.context, self.seed, step)


class StepSampler(Sampler[int]):
    """The step numbers of one epoch, counted on from the trainer's global step when the epoch
    starts. After a resume that is the checkpoint's step, so the batches continue exactly where
    the interrupted run stopped, whatever Lightning's epoch counter says."""

    def __init__(self, steps_per_epoch: int, current_step: Callable[[], int]):
        self.steps_per_epoch = steps_per_epoch
        self.current_step = current_step

    def __iter__(self):
        first = self.current_step()
        return iter(range(first, first + self.steps_per_epoch))

    def __len__(self) -> int:
        return self.steps_per_epoch


class TokenDataModule(L.LightningDataModule):
    def __init__(self, prepared: Path, batch_size: int, context: int, seed: int, steps_per_epoch: int):
        super().__init__()
        self.prepared, self.batch_size, self.context = Path(prepared), batch_size, context
        self.seed, self.steps_per_epoch = seed, steps_per_epoch

    def setup(self, stage: str) -> None:
        self.train_tokens = load_tokens(self.prepared, "train")
        self.valid_tokens = load_tokens(self.prepared, "valid")

    def train_dataloader(self) -> DataLoader:
        batches = TrainingBatches(self.train_tokens, self.batch_size, self.context, self.seed)
        sampler = StepSampler(self.steps_per_epoch, lambda: self.trainer.global_step)
        return DataLoader(batches, batch_size=None, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        batches = list(stream_batches(self.valid_tokens, self.context, self.batch_size))
        return DataLoader(batches, batch_size=None)


class LanguageModelModule(L.LightningModule):
    def __init__(self, model: Decoder, optimizer: DictConfig, max_steps: int):
        super().__init__()
        self.model = model
        self.optimizer_config = optimizer
        self.max_steps = max_steps

    def training_step(self, batch, batch_index):
        inputs, targets = batch
        loss = next_token_loss(self.model(inputs), targets)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.valid_nll, self.valid_targets = 0.0, 0

    def validation_step(self, batch, batch_index):
        inputs, targets = batch
        self.valid_nll += next_token_loss(self.model(inputs), targets, reduction="sum").item()
        self.valid_targets += targets.numel()

    def on_validation_epoch_end(self) -> None:
        ppl = math.exp(self.valid_nll / self.valid_targets)
        self.log("val/ppl", ppl, prog_bar=True, logger=False)
        if self.logger is not None:  # at the number of steps trained, which self.log does not use
            self.logger.log_metrics({"val/ppl": ppl}, step=self.global_step)

    def configure_optimizers(self):
        settings = self.optimizer_config
        optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
        )
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=settings.lr,
            total_steps=self.max_steps,
            pct_start=settings.warmup_fraction,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ResumeCheckpoint(L.Callback):
    """The full training state at every epoch end, replaced atomically: a kill at any moment
    leaves either the previous checkpoint or the new one, never half of one."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        trainer.save_checkpoint(partial, weights_only=False)
        os.replace(partial, self.path)


class Throughput(L.Callback):
    """Training tokens per second, validation time left out."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.tokens_per_sec = float("nan")

    def on_train_start(self, trainer, pl_module) -> None:
        self.first_step, self.started, self.paused = trainer.global_step, time.perf_counter(), 0.0

    def on_validation_start(self, trainer, pl_module) -> None:
        self.validation_started = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        self.paused += time.perf_counter() - self.validation_started

    def on_train_end(self, trainer, pl_module) -> None:
        elapsed = time.perf_counter() - self.started - self.paused
        steps = trainer.global_step - self.first_step
        self.tokens_per_sec = steps * self.tokens_per_step / elapsed if elapsed > 0 else float("nan")
