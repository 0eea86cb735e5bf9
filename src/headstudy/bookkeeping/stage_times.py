"""How long each kind of stage of a pipeline took on this machine, kept between runs in DVC's own
scratch folder (.dvc/tmp/, never committed): a training under plain `dvc repro` then counts the
stages after its study's trainings (their evaluations, inspect, the report) in the time it says
the study has left. Bookkeeping: nothing computed depends on it, and a times file that cannot be
read or written only leaves those stages untimed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from headstudy.common.errors import ConfigError
from headstudy.common.files import write_atomically
from headstudy.execution import locks
from headstudy.execution.jobs import in_users_repository, repository_root

FILE = Path(".dvc") / "tmp" / "headstudy-stage-seconds.json"
# The latest durations of each kind only: the machine, or the study's settings, may have changed.
KEPT = 5


def where() -> tuple[Path, str] | None:
    """The times file of the repository a DVC stage runs in (the user's own for a queued
    experiment, whose copy DVC deletes), and the stage's pipeline folder within it (`.`,
    `studies/budget`); None outside DVC or a repository."""
    if "DVC_STAGE" not in os.environ:
        return None
    here = Path.cwd().absolute()
    root = repository_root(here)
    if root is None:
        return None
    return in_users_repository(root / FILE), here.relative_to(root).as_posix()


def read(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def record(kind: str, seconds: float) -> None:
    """A stage of this kind just took `seconds` in this pipeline (under DVC only)."""
    located = where()
    if located is None:
        return
    path, pipeline = located
    try:
        with locks.exclusive(path.with_suffix(".lock"), 10, unsaid, unsaid):  # stages in lanes end together
            times = read(path)
            kinds = times.setdefault(pipeline, {})
            kinds[kind] = [*kinds.get(kind, []), round(seconds, 1)][-KEPT:]
            write_atomically(path, json.dumps(times, indent=1, sort_keys=True) + "\n")
    except (OSError, ConfigError):
        pass  # a read-only or full .dvc/tmp, or another stage holding it for 10 s: untimed


def unsaid(*_: object) -> str:
    """The lock's refusal, never shown: no stage fails for its time not being kept."""
    return ""


def durations(kinds: object) -> dict[str, list[float]]:
    """A pipeline's entry of the times file, each kind's list of seconds (a malformed one left out)."""
    if not isinstance(kinds, dict):
        return {}
    return {
        kind: times
        for kind, times in kinds.items()
        if isinstance(times, list) and times and all(isinstance(t, (int, float)) for t in times)
    }


def mean_seconds() -> dict[str, float]:
    """Each kind of stage's mean duration in this pipeline, for the kinds that ran here before."""
    located = where()
    if located is None:
        return {}
    path, pipeline = located
    return {kind: sum(times) / len(times) for kind, times in durations(read(path).get(pipeline)).items()}


def recorded(root: Path) -> dict[str, dict[str, list[float]]]:
    """The durations kept in the repository at root: {pipeline folder: {kind: [seconds, ...]}}."""
    return {pipeline: durations(kinds) for pipeline, kinds in read(root / FILE).items()}
