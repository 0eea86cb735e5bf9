"""Lightning wraps the plain model: where batches come from, what a step does, the checkpoint
that makes a run resumable, and the Trainer that runs it on one process or many. Progress bars,
speed and logging come in as callbacks and a logger from bookkeeping/, which shape nothing."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from headstudy.common.errors import ConfigError
from headstudy.common.files import staging_path, write_failed
from headstudy.weights.batches import stream_batches, training_batch
from headstudy.weights.model import Decoder, next_token_loss
from headstudy.weights.settings import OptimizerSettings, TrainerSettings


class TrainingBatches(Dataset):
    """Item k is this process's slice of the global batch of training step k. The global batch
    is a pure function of (seed, k), so the result does not depend on how many processes share
    it, up to the order in which gradients are summed."""

    def __init__(
        self, tokens: np.ndarray, batch_size: int, context: int, seed: int, rank: int = 0, world_size: int = 1
    ):
        self.tokens, self.batch_size, self.context, self.seed = tokens, batch_size, context, seed
        per_rank = batch_size // world_size
        self.rows = slice(rank * per_rank, (rank + 1) * per_rank)

    def __getitem__(self, step: int):
        inputs, targets = training_batch(self.tokens, self.batch_size, self.context, self.seed, step)
        return inputs[self.rows], targets[self.rows]


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
    """The train and validation token streams, read by the caller: what is on disk and how it is
    checked belongs to formats/, not here."""

    def __init__(
        self,
        train_tokens: np.ndarray,
        valid_tokens: np.ndarray,
        batch_size: int,
        context: int,
        seed: int,
        steps_per_epoch: int,
    ):
        super().__init__()
        self.train_tokens, self.valid_tokens = train_tokens, valid_tokens
        self.batch_size, self.context = batch_size, context
        self.seed, self.steps_per_epoch = seed, steps_per_epoch

    def train_dataloader(self) -> DataLoader:
        batches = TrainingBatches(
            self.train_tokens,
            self.batch_size,
            self.context,
            self.seed,
            self.trainer.global_rank,
            self.trainer.world_size,
        )
        sampler = StepSampler(self.steps_per_epoch, lambda: self.trainer.global_step)
        return DataLoader(batches, batch_size=None, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        """Every process scores its own share of the validation windows; the module adds up the
        shares (on one process, all of them)."""
        batches = list(stream_batches(self.valid_tokens, self.context, self.batch_size))
        share = batches[self.trainer.global_rank :: self.trainer.world_size]
        # DDP's first forward after training is collective, so no process may sit this out.
        # With fewer batches than processes each scores all of them: the ratio of the sums
        # stays the same.
        return DataLoader(share if len(batches) >= self.trainer.world_size else batches, batch_size=None)


class TrainingDiverged(Exception):
    """A non-finite loss: the weights are lost, so training stops instead of saving them."""

    def __init__(self, quantity: str, value: float, step: int, max_steps: int, lr: float):
        super().__init__(f"{quantity} is {value} at step {step} of {max_steps} at learning rate {lr}")
        self.quantity, self.value, self.step, self.max_steps, self.lr = quantity, value, step, max_steps, lr


class LanguageModelModule(L.LightningModule):
    """The training step written out, as in a plain PyTorch loop. Lightning's automatic
    optimisation wraps it in a closure and per-step bookkeeping that cost 3.0 ms a step here
    against 1.8 ms written out (measured on the tiny model, where a step is little else), for
    nothing this study uses. Lightning still runs it on every device and in every precision:
    `manual_backward` and the optimiser's `step` go through its strategy and precision plugin."""

    def __init__(self, model: Decoder, optimizer: OptimizerSettings, max_steps: int, compile: bool = False):
        super().__init__()
        self.model = model
        self.optimizer_config = optimizer
        self.max_steps = max_steps
        self.compile_model = compile
        self.automatic_optimization = False
        self.latest_loss: torch.Tensor | None = None
        # (step, validation perplexity) of every validation so far, kept in the resume checkpoint:
        # the training's own curve, whole after a resume too.
        self.validation_curve: list[tuple[int, float]] = []

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["validation_curve"] = list(self.validation_curve)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.validation_curve = [tuple(point) for point in checkpoint.get("validation_curve", [])]

    def configure_model(self) -> None:
        if self.compile_model:  # in place: the weights keep their names in checkpoints and model.pt
            self.model.compile()

    def training_step(self, batch, batch_index):
        step = self.global_step  # steps done before this one: the index of this step
        optimizer, schedule = self.optimizers(), self.lr_schedulers()
        inputs, targets = batch
        loss = next_token_loss(self.model(inputs), targets)
        if not torch.isfinite(loss):
            self.diverged("train/loss", loss.item(), step=step + 1)
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        optimizer.step()
        schedule.step()
        self.latest_loss = loss.detach()
        if (step + 1) % self.trainer.log_every_n_steps == 0:
            self.log_training_loss(self.latest_loss, step)

    def log_training_loss(self, loss: torch.Tensor, step: int) -> None:
        """The loss of the whole batch (on several processes, the mean of their slices), written
        straight to the logger: `self.log` would keep books on every step, and under DDP
        all-reduce on every step, for a value the logger takes every `log_every_n_steps`."""
        loss = self.trainer.strategy.reduce(loss, reduce_op="mean")
        if self.logger is not None and self.trainer.is_global_zero:
            self.logger.log_metrics({"train/loss": loss.item()}, step=step)

    def on_validation_epoch_start(self) -> None:
        self.valid_nll, self.valid_targets = 0.0, 0

    def validation_step(self, batch, batch_index):
        inputs, targets = batch
        self.valid_nll += next_token_loss(self.model(inputs), targets, reduction="sum").item()
        self.valid_targets += targets.numel()

    def on_validation_epoch_end(self) -> None:
        shares = torch.tensor([self.valid_nll, self.valid_targets], dtype=torch.float64, device=self.device)
        valid_nll, valid_targets = self.trainer.strategy.reduce(shares, reduce_op="sum").tolist()
        try:
            ppl = math.exp(valid_nll / valid_targets)
        except OverflowError:
            ppl = math.inf
        if not math.isfinite(ppl):
            self.diverged("val/ppl", ppl, step=self.global_step)
        self.validation_curve.append((self.global_step, ppl))
        self.log("val/ppl", ppl, prog_bar=True, logger=False, sync_dist=True)  # equal on every process
        # At the number of steps trained, which self.log does not use; only rank 0 talks to MLflow.
        if self.logger is not None and self.trainer.is_global_zero:
            self.logger.log_metrics({"val/ppl": ppl}, step=self.global_step)

    def diverged(self, quantity: str, value: float, step: int) -> None:
        raise TrainingDiverged(quantity, value, step, self.max_steps, self.optimizer_config.lr)

    def configure_optimizers(self):
        settings = self.optimizer_config
        optimizer = torch.optim.AdamW(
            decay_groups(self.model, settings.weight_decay),
            lr=settings.lr,
            betas=tuple(settings.betas),
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: one_cycle(
                step, self.max_steps, settings.warmup_fraction, settings.start_factor, settings.final_factor
            ),
        )
        return {"optimizer": optimizer, "lr_scheduler": schedule}  # stepped by training_step


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on the matrices of linear layers only: as in nanoGPT, norms and biases are
    left alone, and so are the embeddings (the token embedding is also the output layer)."""
    matrices = [module.weight for module in model.modules() if isinstance(module, nn.Linear)]
    decayed = {id(parameter) for parameter in matrices}
    rest = [parameter for parameter in model.parameters() if id(parameter) not in decayed]
    return [{"params": matrices, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def one_cycle(step: int, total: int, warmup_fraction: float, start_factor: float, final_factor: float) -> float:
    """The learning-rate multiplier at `step`: linear warm-up from start_factor to 1 over the
    first warmup_fraction of the steps, then cosine decay to final_factor at `total`. Defined
    for any total >= 1 and warm-up fraction, zero included."""
    warmup = round(warmup_fraction * total)
    if step < warmup:
        return start_factor + (1 - start_factor) * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return final_factor + (1 - final_factor) * 0.5 * (1 + math.cos(math.pi * progress))


class ResumeCheckpoint(L.Callback):
    """The full training state at every epoch end, replaced atomically: a kill at any moment
    leaves either the previous checkpoint or the new one, never half of one, and so does a disk
    that fills while it is written. Under DDP every process takes part in saving and process 0
    writes; every process resumes from the file."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        partial = staging_path(self.path)
        try:
            trainer.save_checkpoint(partial, weights_only=False)  # returns once it is written
        except (OSError, RuntimeError) as error:
            partial.unlink(missing_ok=True)
            raise write_failed(
                f"the resume checkpoint {self.path}",
                self.path.parent,
                error,
                "give paths.checkpoints room for it, and the same command resumes from the last checkpoint written",
            ) from None
        if trainer.is_global_zero:
            os.replace(partial, self.path)


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


class TrainerRefused(Exception):
    """Lightning cannot run these settings (an unknown accelerator, precision or strategy, or a
    device that is not there): its own message."""


def build_trainer(settings: TrainerSettings, callbacks: list[L.Callback]) -> L.Trainer:
    """The Trainer that the settings describe: where it runs (accelerator, devices, num_nodes,
    strategy) and in which precision. Under DDP Lightning starts the other processes when `fit`
    begins, each running the same command; `trainer.global_rank` tells them apart from here on.
    No logger yet: only process 0 gets one."""
    try:
        return L.Trainer(
            accelerator=settings.accelerator,
            devices=settings.devices,
            num_nodes=settings.num_nodes,
            strategy=settings.strategy,
            precision=settings.precision,
            max_steps=settings.max_steps,
            max_epochs=-1,
            logger=False,
            callbacks=callbacks,
            deterministic=settings.deterministic,
            log_every_n_steps=loss_logging_interval(settings),
            num_sanity_val_steps=0,
            enable_checkpointing=False,
            enable_model_summary=False,
            # TrainingBatches already hands each process its own slice of every batch.
            use_distributed_sampler=False,
        )
    except (MisconfigurationException, ValueError, ImportError) as error:  # what Lightning says of a bad choice
        raise TrainerRefused(str(error)) from None


def loss_logging_interval(settings: TrainerSettings) -> int:
    """Steps between two `train/loss` points: loss_points over the run, and never more than a
    validation interval (Lightning's epoch here: it warns about an epoch that logs nothing)."""
    return max(1, min(settings.max_steps // settings.loss_points, settings.val_every_steps))
