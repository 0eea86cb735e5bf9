"""How many torch threads one job gets when several share this machine's cores.

On 2 cores, two trainings of 2 threads each slow each other down far more than in
proportion. `dvc queue start -j N` runs N experiments at once and tells them nothing of N,
so a queued job asks the queue itself: `dvc queue status`, in the user's repository (which DVC
names in DVC_ROOT; the job runs in a temporary copy), says how many workers it has.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

# Where DVC runs queued experiments, in temporary copies of the repository.
QUEUED_COPIES = Path(".dvc") / "tmp" / "exps"
# A DVC command's start and the workers' answers to its broadcast (it waits 1 s for them): 1.7 s on
# quiet cores of an Intel Xeon; the limit only stops a queue that hangs.
QUEUE_STATUS_SECONDS = 60
# `dvc queue status` ends with this line; a worker is active while it runs an experiment.
WORKER_STATUS = re.compile(r"^Worker status: (\d+) active, (\d+) idle$", re.MULTILINE)


def cores() -> int:
    """The cores this process may run on (its affinity), not all the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@functools.cache
def queue_workers(repository: Path) -> int | None:
    """The DVC experiment queue's workers in `repository`, as `dvc queue status` counts them, or
    None where it could not say. Asked once per process: a stage that splits its threads among
    workers (inspect) asks again, and must get the same answer without another DVC command."""
    try:
        status = subprocess.run(
            [sys.executable, "-m", "dvc", "queue", "status"],
            cwd=repository,
            capture_output=True,
            text=True,
            timeout=QUEUE_STATUS_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = WORKER_STATUS.search(status.stdout)
    return int(found[1]) + int(found[2]) if status.returncode == 0 and found else None


def in_queued_experiment() -> bool:
    """A DVC experiment running in a temporary copy of the repository, as the queue runs them."""
    repository = os.environ.get("DVC_ROOT")
    if not repository or "DVC_EXP_NAME" not in os.environ:
        return False
    return Path.cwd().resolve().is_relative_to((Path(repository) / QUEUED_COPIES).resolve())


def repository_root(folder: Path) -> Path | None:
    """The DVC repository `folder` is in (the nearest folder up holding .dvc/), or None."""
    folder = Path(folder).absolute()
    return next((above for above in (folder, *folder.parents) if (above / ".dvc").is_dir()), None)


def in_users_repository(folder: Path) -> Path:
    """`folder` where the user's repository has it. A DVC experiment from the queue, or one run
    with --temp, runs in a copy of the repository that DVC deletes afterwards, and names the
    user's own repository in DVC_ROOT: what must outlive the experiment (its runs' store) goes
    to the same place in the user's repository."""
    folder = Path(folder).absolute()
    user_repository = os.environ.get("DVC_ROOT")
    copy = repository_root(folder)
    if not user_repository or copy is None:
        return folder
    return Path(user_repository).resolve() / folder.relative_to(copy)


def outliving_checkpoints(config) -> Path:
    """Where a training keeps its resume state: paths.checkpoints, except in a queued experiment.
    DVC deletes the copy a queued experiment ran in, so its trainings keep their resume state in
    the user's repository, one folder per training settings (queued-DIGEST): a killed experiment,
    queued again, resumes there, and experiments running side by side that train the same model
    with other settings never touch each other's (a training discards its model's resume states
    under other settings in its folder)."""
    folder = Path(config.paths.checkpoints)
    if not in_queued_experiment():
        return folder
    from headstudy.formats.runconfig import config_digest

    return in_users_repository(folder) / f"queued-{config_digest(config)}"


def torch_threads(requested: int) -> int:
    """`requested` (the config's `threads`), or fewer in a queued experiment: the cores divided
    among the queue's workers, so that they never ask for more threads than there are cores
    (one thread where the queue could not say)."""
    if not in_queued_experiment():
        return requested
    workers = queue_workers(Path(os.environ["DVC_ROOT"]))
    if workers is None:
        print("headstudy: `dvc queue status` did not say how many workers the queue has: 1 thread", file=sys.stderr)
        return 1
    return max(1, min(requested, cores() // max(1, workers)))


def stage_workers(threads: int, tasks: int) -> int:
    """How many processes of `threads` threads a stage may run its independent tasks in (inspect:
    one model each): as many as fit in this job's share of the cores (all this process may use,
    or a queued experiment's part of them), at most one per task. Each task runs on the thread
    count it would get alone, so the count changes no result."""
    return max(1, min(tasks, torch_threads(cores()) // max(1, threads)))
