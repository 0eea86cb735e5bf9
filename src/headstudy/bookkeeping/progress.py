"""What the terminal shows: which of the study's trainings one is and how long the study has
left, no routine noise, and the tables a stage prints at its end, at most 120 columns wide. The
training's own callbacks (speed, progress bar) are in training_bar.py, so that this imports no
Lightning. Nothing here changes what is trained."""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from headstudy.bookkeeping import stage_times
from headstudy.common.errors import ConfigError
from headstudy.execution.lanes import LANES_VARIABLE
from headstudy.formats.runconfig import read_config

# The widest a stage's closing table or sentence is printed, whatever the terminal: wider lines
# wrap in a 120-column terminal and in most log viewers.
MAX_COLUMNS = 120


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
    # The stages DVC runs after the trainings, by kind and count, and the seconds they took here
    # before (stage_times.py; their evaluations shared among the lanes); kinds never timed here.
    later: dict[str, int] = field(default_factory=dict)
    later_seconds: float = 0.0
    untimed: tuple[str, ...] = ()

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


def trained_model(config_file: Path) -> tuple[Path, Path] | None:
    """The model file of a training config, if its folder holds one trained with that config,
    and the file its evaluation writes (metrics/NAME.json); None when it is still to train."""
    # Imported here: it imports torch, which the stages that only print tables do not need.
    from headstudy.formats.trained import MODEL_FILE, check_saved_config, model_dir

    try:
        config = read_config(config_file)
        directory = model_dir(config)
        check_saved_config(directory, config)
        evaluation = Path(config.paths.metrics) / f"{config.name}.json"
    except (ConfigError, OSError, yaml.YAMLError, AttributeError, KeyError):
        return None
    return (directory / MODEL_FILE, evaluation) if (directory / MODEL_FILE).is_file() else None


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
    trained, steps_after = [], 0
    for other in names:
        if other == name:
            continue
        other_file = config_file.parent / f"{other}.yaml"
        files = trained_model(other_file)
        if files:
            trained.append(files)
        else:
            try:
                steps_after += int(read_config(other_file).trainer.max_steps)
            except (ConfigError, OSError, AttributeError, ValueError, TypeError):
                pass  # its stage will refuse it; its time is unknown
    later = stages_after_trainings(config_file.parent.parent.parent, len(names) - len(trained), trained)
    took = stage_times.mean_seconds()
    seconds = sum(
        took[kind] * count / (lane_count() if kind == "evaluate" else 1)
        for kind, count in later.items()
        if kind in took
    )
    untimed = tuple(kind for kind in later if kind not in took)
    return StudyPosition(name, len(trained) + 1, len(names), len(trained), steps_after, later, seconds, untimed)


# The stages of a perplexity study after its trainings, in the order DVC reaches them.
LATER_KINDS = ("evaluate", "inspect", "report")


def stages_after_trainings(pipeline: Path, untrained: int, trained: list[tuple[Path, Path]]) -> dict[str, int]:
    """What DVC runs after the study's trainings, of the kinds the pipeline's dvc.yaml has: an
    evaluation of each of the `untrained` models (the one training now included) and of each
    trained one (model file, evaluation file) evaluated before it was last trained, then inspect
    and the report."""
    try:
        stages = yaml.safe_load((pipeline / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    except (OSError, ValueError, yaml.YAMLError, TypeError, KeyError):
        return {}
    evaluations = untrained
    for model, evaluation in trained:
        try:
            evaluations += evaluation.stat().st_mtime < model.stat().st_mtime
        except OSError:  # not evaluated yet
            evaluations += 1
    counts = {"evaluate": evaluations, "inspect": 1, "report": 1}
    return {kind: counts[kind] for kind in LATER_KINDS if kind in stages and counts[kind]}


def time_left_text(seconds: float, untimed: tuple[str, ...] = ()) -> str:
    """`about 12 min`; where stages still to run were never timed here, what is known is a lower
    bound: `over 12 min` (`not known yet` under a minute)."""
    if not untimed:
        return duration(seconds)
    return "not known yet" if seconds < 60 else f"over {duration(seconds).removeprefix('about ')}"


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
