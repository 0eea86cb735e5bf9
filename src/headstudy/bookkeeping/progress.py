"""What a training shows while it runs: its speed, one progress bar, and no routine noise.
Nothing here changes what is trained."""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from headstudy.bookkeeping.ranks import ResumeStepsAgree


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
        self.tokens_per_sec = self.rate(trainer)

    def rate(self, trainer) -> float:
        """Tokens per second from the start of training to now, validation left out."""
        elapsed = time.perf_counter() - self.started - self.paused
        steps = trainer.global_step - self.first_step
        return steps * self.tokens_per_step / elapsed if elapsed > 0 else float("nan")


def on_terminal() -> bool:
    """Standard output is a terminal, which redraws a bar in place; a log file or a pipe (a
    `dvc repro` whose output is kept, a scheduler's log) keeps every redraw as a line."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class StepProgressBar(TQDMProgressBar):
    """One bar for the whole run: the global step out of trainer.max_steps (a resumed run starts
    where it stopped), the latest loss and validation perplexity, and tokens/s. Lightning's
    default counts epochs, which here are only validation intervals. On a terminal a second bar
    shows each validation as it runs; elsewhere each validation is one line when it ends."""

    def __init__(self, throughput: Throughput, refresh_rate: int = 10):
        super().__init__(refresh_rate=refresh_rate)
        self.throughput = throughput
        self.validation_started = 0.0

    def init_train_tqdm(self) -> Tqdm:
        return Tqdm(
            desc="Training",
            unit="step",
            total=self.trainer.max_steps,
            initial=self.trainer.global_step,
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            bar_format=self.BAR_FORMAT,
        )

    def on_train_epoch_start(self, trainer, *_) -> None:
        pass  # one bar for the run: nothing restarts at an epoch

    def init_validation_tqdm(self) -> Tqdm:
        if on_terminal():
            return super().init_validation_tqdm()
        # Off a terminal a bar's every redraw, and its cursor moves, would stay in the output.
        return Tqdm(disable=True)

    def on_validation_start(self, trainer, pl_module) -> None:
        super().on_validation_start(trainer, pl_module)
        self.validation_started = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if on_terminal() or trainer.sanity_checking or self.is_disabled or trainer.state.fn != "fit":
            return
        # Numbers as the bars show them.
        results = ", ".join(
            f"{key}={Tqdm.format_num(value) if isinstance(value, (int, float)) else value}"
            for key, value in trainer.progress_bar_metrics.items()
            if key.startswith("val")
        )
        took = time.perf_counter() - self.validation_started
        # On a line of its own: the training bar's redraws so far share one line, unended.
        sys.stdout.write(f"\nValidation at step {trainer.global_step}: {results or 'done'} ({took:.1f} s)\n")
        sys.stdout.flush()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        super().on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        self.val_progress_bar.set_description("Validation", refresh=False)  # not "Validation DataLoader 0"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._should_update(step, trainer.max_steps) and not self.train_progress_bar.disable:
            self.train_progress_bar.n = step
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = dict(trainer.progress_bar_metrics)
        if pl_module.latest_loss is not None and trainer.training:  # this process's slice of the batch
            metrics["train/loss"] = f"{pl_module.latest_loss.item():.3f}"
        tokens_per_sec = self.throughput.rate(trainer)
        if math.isfinite(tokens_per_sec):
            metrics["tokens/s"] = f"{tokens_per_sec:,.0f}"
        return metrics


class DropMessages(logging.Filter):
    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_routine_warnings() -> None:
    """Silence what every training would print and nothing in it concerns a user of this study:
    Lightning's advert for its cloud logger, and a deprecation inside Lightning's own use of torch.
    Warnings about our settings or data stay."""
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(existing, DropMessages) for existing in rank_zero.filters):
        rank_zero.addFilter(DropMessages("💡 Tip: For seamless cloud logging"))
    # lightning/pytorch/utilities/_pytree.py on torch >= 2.10: Lightning's code, not ours.
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )


def watchers(throughput: Throughput) -> list[L.Callback]:
    """The callbacks that watch a training without changing it: its speed, its progress, and
    that all its processes start from the same step."""
    return [throughput, StepProgressBar(throughput), ResumeStepsAgree()]
