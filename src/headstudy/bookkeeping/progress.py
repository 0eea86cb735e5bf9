"""What a training shows while it runs: its speed, one progress bar, which of the study's
trainings it is and how long the study has left, and no routine noise; and the tables a stage
prints at its end, at most 120 columns wide. Nothing here changes what is trained."""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import yaml
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from headstudy.bookkeeping.lanes import LANES_VARIABLE
from headstudy.bookkeeping.ranks import ResumeStepsAgree
from headstudy.common.errors import ConfigError
from headstudy.formats.runconfig import read_config
from headstudy.formats.trained import MODEL_FILE, check_saved_config, model_dir

# The widest a stage's closing table or sentence is printed, whatever the terminal: wider lines
# wrap in a 120-column terminal and in most log viewers.
MAX_COLUMNS = 120


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


@dataclass
class StudyPosition:
    """Where one training stands in its study: the index-th of total, after `trained` models of
    the study that are already trained with their current config, and before `steps_after` steps
    of the study's other models that are not."""

    name: str
    index: int
    total: int
    trained: int
    steps_after: int

    def header(self) -> str:
        left = self.total - self.trained - 1
        return (
            f"train: {self.name}: training {self.index} of {self.total} in the study "
            f"({self.trained} trained, {left} to train after this one)"
        )


def config_argument(argv: list[str]) -> Path | None:
    """The file after `--config` in a stage's command line (`headstudy train --config FILE`)."""
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--config":
            return Path(value)
    return None


def is_trained(config_file: Path) -> bool:
    """The model of a training config is in its folder, trained with that config."""
    try:
        config = read_config(config_file)
        directory = model_dir(config)
        check_saved_config(directory, config)
    except (ConfigError, OSError, yaml.YAMLError, AttributeError, KeyError):
        return False
    return (directory / MODEL_FILE).is_file()


def study_position(argv: list[str] | None = None) -> StudyPosition | None:
    """Under DVC (DVC_STAGE set), for `--config configs/train/NAME.yaml`: the study's models are
    those of configs/report.yaml, in that order, and a model counts as trained when its folder
    holds a model trained with its current config (DVC deletes a stale stage's outputs only when
    it runs that stage). None for a run by hand, or when the study's files cannot be read."""
    if "DVC_STAGE" not in os.environ:
        return None
    config_file = config_argument(sys.argv if argv is None else argv)
    if config_file is None:
        return None
    report_file = config_file.parent.parent / "report.yaml"
    try:
        names = [str(model["name"]) for model in yaml.safe_load(report_file.read_text())["models"]]
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None
    name = config_file.stem
    if name not in names:
        return None
    trained, steps_after = 0, 0
    for other in names:
        if other == name:
            continue
        other_file = config_file.parent / f"{other}.yaml"
        if is_trained(other_file):
            trained += 1
        else:
            try:
                steps_after += int(read_config(other_file).trainer.max_steps)
            except (ConfigError, OSError, AttributeError, ValueError, TypeError):
                pass  # its stage will refuse it; its time is unknown
    return StudyPosition(name, trained + 1, len(names), trained, steps_after)


def duration(seconds: float) -> str:
    """`about 41 min`, `about 1 h 05 min`, `under a minute`."""
    if not math.isfinite(seconds):
        return "unknown"
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    return f"about {hours} h {minutes:02d} min" if hours else f"about {minutes} min"


def mlflow_ui_hint() -> str | None:
    """The training's last line gives its MLflow run's address (store.ui_address), which nothing
    serves until `mlflow ui` runs: how to start it, unless runs go to a server, which serves it."""
    from headstudy.bookkeeping import store

    command = store.ui_command()
    if command is None:
        return None
    where = "" if "MLFLOW_TRACKING_URI" in os.environ else " in the project's folder"
    return f"train: MLflow: the address below opens once `{command}` runs{where}"


def on_terminal() -> bool:
    """Standard output is a terminal, which redraws a bar in place; a log file or a pipe (a
    `dvc repro` whose output is kept, a scheduler's log) keeps every redraw as a line."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def lane_count() -> int:
    """How many trainings of the study run side by side: `headstudy lanes` says so in LANES_VARIABLE."""
    try:
        return max(1, int(os.environ.get(LANES_VARIABLE, "1")))
    except ValueError:
        return 1


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
        """Seconds until the study's last model is trained, at this training's speed so far: the
        rest of this one, and every model not yet trained shared among the lanes."""
        if self.position is None:
            return float("nan")
        steps = trainer.max_steps - trainer.global_step + self.position.steps_after / self.lanes
        rate = self.throughput.rate(trainer)
        if not rate > 0:  # no step timed yet, as right after a resume
            return float("nan")
        return steps * self.throughput.tokens_per_step / rate

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        if not trainer.is_global_zero:
            return
        hint = mlflow_ui_hint()
        if hint and trainer.logger is not None:
            print(hint, flush=True)
        if self.position is None:
            return
        left = self.position.total - self.position.trained - 1
        rate = self.throughput.rate(trainer)
        if left and math.isfinite(rate):
            lanes = "one at a time" if self.lanes == 1 else f"in {self.lanes} lanes"
            print(
                f"train: study: {left} of {self.position.total} trainings left, "
                f"{duration(self.study_time_left(trainer))} {lanes} at this training's {rate:,.0f} tokens/s",
                flush=True,
            )

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
        left = self.study_time_left(trainer)
        study = f"; study left: {duration(left)}" if math.isfinite(left) else ""
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
        left = self.study_time_left(trainer)
        if math.isfinite(left):
            metrics["study left"] = duration(left).removeprefix("about ")
        return metrics


class DropMessages(logging.Filter):
    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


# Lightning's informational lines, which every training repeats and none of which concerns a
# user of this study: `Seed set to 0`, `GPU available: False, used: False`, `TPU available: ...`,
# `Trainer.fit stopped: max_steps=3000 reached.` (written to stderr onto the end of the bar,
# which then drew a second copy of itself), the cloud logger's advert. Lightning's documented
# way to quiet its console output is the level of its loggers; warnings stay.
ROUTINE_INFO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed")


def quiet_routine_warnings() -> None:
    """Silence what every training would print and nothing in it concerns a user of this study:
    Lightning's informational lines (ROUTINE_INFO_LOGGERS) and a deprecation inside Lightning's
    own use of torch. Warnings about our settings or data stay."""
    for name in ROUTINE_INFO_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(existing, DropMessages) for existing in rank_zero.filters):
        rank_zero.addFilter(DropMessages("💡 Tip: For seamless cloud logging"))
    # On a machine with SLURM installed (CI installs it for tests/test_slurm.py), every training
    # outside an allocation would say that `srun` exists: it concerns no training of this study.
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # lightning/pytorch/utilities/_pytree.py on torch >= 2.10: Lightning's code, not ours.
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )


def terminal_width() -> int:
    """The terminal's width (COLUMNS where set; 120 off a terminal), at most MAX_COLUMNS."""
    return max(40, min(MAX_COLUMNS, shutil.get_terminal_size((MAX_COLUMNS, 24)).columns))


def closing_console():
    """A rich console for what a stage prints at its end: no markup (`[18.59, 18.78]` is a
    number, not a style), no guessing of colours in numbers, the width of terminal_width()."""
    from rich.console import Console  # installed with DVC

    return Console(file=sys.stdout, width=terminal_width(), markup=False, highlight=False, emoji=False)


def print_table(frame) -> None:
    """A pandas table as a rich table that fits terminal_width(): a header wraps at its words to
    the width of its column's widest cell, text cells wrap at words within their column, and a
    number is broken only on a terminal too narrow for every number whole; numbers right-aligned.
    Every row stays one row instead of wrapping across the terminal."""
    from rich import box
    from rich.table import Table

    columns = []
    for column in frame.columns:
        values = [str(value) for value in frame[column]]
        widest = max((len(value) for value in values), default=1)
        header = textwrap.fill(str(column), width=max(widest, 1), break_long_words=False)
        numeric = all(value == "" or value[:1] in "0123456789+-[" for value in values)
        longest_word = max((len(word) for value in [header, *values] for word in value.split()), default=1)
        narrowest = max(widest, longest_word) if numeric else min(longest_word, 12)
        columns.append((header, numeric, narrowest))
    # Two columns of padding between columns and one at either edge.
    numbers_whole = sum(narrowest for _, _, narrowest in columns) + 2 * len(columns) <= terminal_width()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for header, numeric, narrowest in columns:
        if numeric and numbers_whole:
            table.add_column(header, justify="right", no_wrap=True, min_width=narrowest)
        else:
            table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(str(value) for value in row))
    closing_console().print(table)


def print_wrapped(text: str) -> None:
    """A sentence wrapped at terminal_width()."""
    closing_console().print(text)


def watchers(throughput: Throughput) -> list[L.Callback]:
    """The callbacks that watch a training without changing it: its speed, its progress, and
    that all its processes start from the same step."""
    return [throughput, StepProgressBar(throughput, position=study_position()), ResumeStepsAgree()]
