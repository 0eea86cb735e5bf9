"""How many torch threads one job gets when several share this machine's cores.

On 2 cores, two trainings of 2 threads each slow each other down far more than in
proportion. `dvc queue start -j N` runs N experiments at once and tells them nothing of N,
so a queued job counts the queue's live workers itself: DVC keeps a pid file per worker,
<repo>/.dvc/tmp/exps/celery/dvc-exp-worker-K.pid, and names the user's repository (not the
temporary copy the job runs in) in DVC_ROOT.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

QUEUE_WORKERS = Path(".dvc") / "tmp" / "exps" / "celery"


def cores() -> int:
    """The cores this process may run on (its affinity), not all the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def queue_workers(repository: Path) -> int:
    """DVC experiment-queue workers of `repository` that are running now."""
    running = 0
    for pid_file in (repository / QUEUE_WORKERS).glob("dvc-exp-worker-*.pid"):
        info_file = pid_file.with_suffix(".json")
        try:
            pid = int(pid_file.read_text().strip())
            finished = info_file.is_file() and json.loads(info_file.read_text()).get("returncode") is not None
        except (OSError, ValueError):
            continue
        running += not finished and alive(pid)
    return running


def in_queued_experiment() -> bool:
    """A DVC experiment running in a temporary copy of the repository, as the queue runs them."""
    repository = os.environ.get("DVC_ROOT")
    if not repository or "DVC_EXP_NAME" not in os.environ:
        return False
    return Path.cwd().resolve().is_relative_to((Path(repository) / QUEUE_WORKERS.parent).resolve())


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
    among the queue's running jobs, so that they never ask for more threads than there are cores."""
    if not in_queued_experiment():
        return requested
    jobs = max(1, queue_workers(Path(os.environ["DVC_ROOT"])))
    return max(1, min(requested, cores() // jobs))


def stage_workers(threads: int, tasks: int) -> int:
    """How many processes of `threads` threads a stage may run its independent tasks in (inspect:
    one model each): as many as fit in this job's share of the cores (all this process may use,
    or a queued experiment's part of them), at most one per task. Each task runs on the thread
    count it would get alone, so the count changes no result."""
    return max(1, min(tasks, torch_threads(cores()) // max(1, threads)))
