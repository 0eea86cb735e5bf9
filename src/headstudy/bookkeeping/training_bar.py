"""The callbacks that watch a training without changing it: its speed, and one progress bar with
which of the study's trainings it is and how long the study has left. Apart from progress.py so
that the stages that train nothing do not import Lightning."""

from __future__ import annotations

import math
import sys
import time

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from headstudy.bookkeeping.progress import (
    StudyPosition,
    duration,
    lane_count,
    mlflow_ui_hint,
    on_terminal,
    study_position,
    time_left_text,
)


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


class StepProgressBar(TQDMProgressBar):
    """One bar for the whole run: the global step out of trainer.max_steps (a resumed run starts
    where it stopped), the latest loss and validation perplexity, and tokens/s. Lightning's
    default counts epochs, which here are only validation intervals. On a terminal a second bar
    shows each validation as it runs; elsewhere each validation is one line when it ends."""

    def __init__(self, throughput: Throughput, refresh_rate: int = 10, position: StudyPosition | None = None):
        super().__init__(refresh_rate=refresh_rate)
        self.throughput = throughput
        self.validation_started = 0.0
        self.position = position
        self.lanes = lane_count()  # read once, not at every redraw of the bar

    def on_train_start(self, trainer, pl_module) -> None:
        if self.position is not None and trainer.is_global_zero:
            print(self.position.header(), flush=True)  # before the bar, on a line of its own
        super().on_train_start(trainer, pl_module)

    def study_time_left(self, trainer) -> float:
        """Seconds until the study ends: at this training's speed so far, the rest of this one and
        every model not yet trained shared among the lanes; then the stages after the trainings,
        as long as they took here before (those never timed here count as none)."""
        return self.trainings_time_left(trainer) + self.position.later_seconds if self.position else float("nan")

    def trainings_time_left(self, trainer) -> float:
        if self.position is None:
            return float("nan")
        steps = trainer.max_steps - trainer.global_step + self.position.steps_after / self.lanes
        rate = self.throughput.rate(trainer)
        if not rate > 0:  # no step timed yet, as right after a resume
            return float("nan")
        return steps * self.throughput.tokens_per_step / rate

    def study_left_text(self, trainer) -> str | None:
        left = self.study_time_left(trainer)
        return time_left_text(left, self.position.untimed) if math.isfinite(left) else None

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        if not trainer.is_global_zero:
            return
        if self.position is None:  # by hand; in a study the report stage says it once, at the end
            hint = mlflow_ui_hint()
            if hint and trainer.logger is not None:
                print(hint, flush=True)
            return
        left = self.position.total - self.position.trained - 1
        rate = self.throughput.rate(trainer)
        if left and math.isfinite(rate):
            lanes = "one at a time" if self.lanes == 1 else f"in {self.lanes} lanes"
            print(
                f"train: study: {left} of {self.position.total} trainings left, "
                f"{duration(self.trainings_time_left(trainer))} {lanes} at this training's {rate:,.0f} tokens/s",
                flush=True,
            )
        elif not left and self.position.later:  # the last training: what the trainings feed is still to run
            print(f"train: study: every model trained; {later_stages_text(self.position)}", flush=True)

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
        left = self.study_left_text(trainer)
        study = f"; study left: {left}" if left else ""
        # On a line of its own: the training bar's redraws so far share one line, unended.
        step = f"{trainer.global_step}/{trainer.max_steps}"
        sys.stdout.write(f"\nValidation at step {step}: {results or 'done'} ({took:.1f} s){study}\n")
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
        left = self.study_left_text(trainer)
        if left:
            metrics["study left"] = left.removeprefix("about ")
        return metrics


def later_stages_text(position: StudyPosition) -> str:
    """`then 10 evaluations, inspect and report: about 6 min, as long as they took here before`."""
    named = [
        f"{count} evaluation{'s' * (count > 1)}" if kind == "evaluate" else kind
        for kind, count in position.later.items()
    ]
    stages = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    if not position.untimed:
        known = f"{duration(position.later_seconds)}, as long as they took here before"
    elif position.later_seconds:
        never = " and ".join(position.untimed)
        known = f"{duration(position.later_seconds)} for those timed here before, {never} never timed here"
    else:
        known = "not timed here yet"
    return f"then {stages}: {known}"


def watchers(throughput: Throughput) -> list[L.Callback]:
    """The callbacks that watch a training without changing it: its speed and its progress."""
    return [throughput, StepProgressBar(throughput, position=study_position())]
