"""A check that the processes of a DDP training agree before they train together."""

from __future__ import annotations

import lightning as L
import torch

from headstudy.common.errors import ConfigError


class ResumeStepsAgree(L.Callback):
    """Under DDP every process must start from the same step. Processes that found different
    resume checkpoints (machines with separate paths.checkpoints folders) would otherwise train
    out of step and wait for each other at some later collective until the 30-minute timeout.
    Checked after Lightning has restored the checkpoints and before the first step; every process
    sees the same gathered steps, so all of them stop together."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size == 1:
            return
        steps = trainer.strategy.all_gather(torch.tensor(trainer.global_step)).tolist()
        if len(set(steps)) > 1:
            by_process = ", ".join(f"process {rank}: step {step}" for rank, step in enumerate(steps))
            raise ConfigError(
                f"the {len(steps)} processes resume from different steps ({by_process}): "
                "give every machine the same paths.checkpoints folder (a shared file "
                "system), or delete the resume folders under it to start afresh"
            )
