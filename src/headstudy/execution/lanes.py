"""`dvc repro` in N lanes: every stale stage of a pipeline runs as soon as the stages it depends on
are done, at most N at a time, each as `dvc repro --single-item STAGE`, so that DVC itself decides
whether the stage runs, runs it, and writes its lock entry. Nothing here changes what a stage
computes: a training still uses the study's `threads`, whatever the lane count.

How DVC allows it. `dvc repro` holds the repository's lock (`.dvc/tmp/lock`) while it plans and
while it writes the lock file, and releases it while the stage's command runs (DVC's
`unlocked_repo` around the command), so several `dvc repro -s` processes on stages with disjoint
outputs run side by side; each writes its own entry into dvc.lock by reading and updating the
file under the repository's lock. `--wait-for-lock` makes a process wait for that lock instead of
giving up after 3 seconds. This is what docs/pipeline.md's "Two trainings at a time" relies on.

Why neither `paraffin` nor `dask4dvc`: dask4dvc 0.2.3 requires dvc<3 (this project pins 3.67.1).
paraffin 0.3.7 installs beside DVC 3.67.1, but runs stages from a queue in a database file through
workers and a web service (fastapi, sqlmodel, uvicorn: none of them in requirements.lock), retries
lock errors by `dvc commit --force` of the stage (which this project uses for nothing but
tools/commit_refactor.py) and, for a stage it finds in its own cache, writes the stage's entry
into dvc.lock with PyYAML itself. This module uses DVC's public API and command line only.

The order of dvc.lock. DVC appends a stage's entry the first time it writes it and keeps each
entry's place afterwards. A plain `dvc repro` runs stages in a depth-first order of its graph that
depends on Python's hash seed (PYTHONHASHSEED): two plain runs of a new study write their lock
entries in different orders. Lanes finish in any order, so at the end the entries that are not in
the last commit's lock file are put in the order in which `PYTHONHASHSEED=0 dvc repro` runs them
(after those of the last commit, in that commit's order, as a plain `dvc repro` keeps them). The
entries themselves are DVC's, unchanged; the file is rewritten with DVC's own YAML writer, beside
it and renamed over it, under DVC's repository lock. So 1 lane, 2 lanes, or lanes killed and run
again write the same bytes, those of a plain `PYTHONHASHSEED=0 dvc repro`.

A stage that fails stops the lanes from starting others; those running finish and are recorded,
and the command ends with one line naming the stage. Ctrl-C or SIGTERM is passed on to the stages'
commands (a training exits with its checkpoint kept), never to DVC itself, which writes its entry
or nothing: a rerun continues where the lanes stopped."""

from __future__ import annotations

import functools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headstudy.common.errors import ConfigError

# The hash seed of the plain `dvc repro` whose lock-file order the lanes reproduce.
PLAN_HASH_SEED = "0"
# How long the lanes wait for DVC's repository lock to put dvc.lock in order.
LOCK_WAIT_S = 120
# The lines of a stage's output kept for its error message.
KEPT_LINES = 40
# Set for the stages the lanes start: how many of the study's trainings share the machine.
LANES_VARIABLE = "HEADSTUDY_LANES"


@dataclass
class Plan:
    """What `dvc repro TARGETS` would do. order: every stage of the targets and of the stages they
    depend on, in the order a plain `PYTHONHASHSEED=0 dvc repro` visits them (DVC's addressing:
    `train@1-0`, `studies/NAME/dvc.yaml:train@1-0`); upstream: the stages each one depends on;
    stale: the stages that may run (changed now, or downstream of one that is): the others are
    up to date and stay so; lock: each stage's lock file (relative to the folder the lanes run in) and
    its name there."""

    order: list[str]
    upstream: dict[str, list[str]]
    stale: list[str]
    lock: dict[str, tuple[str, str]]


def describe_here(targets: list[str]) -> dict:
    """The plan, by DVC's own API, from the repository in the working directory. Run in a process
    of its own with PYTHONHASHSEED=0 (`describe`): the order depends on the hash seed."""
    import networkx as nx
    from dvc.repo import Repo
    from dvc.repo.reproduce import get_active_graph, plan_repro

    with Repo() as repo:
        stages = []
        for target in targets:
            stages.extend(stage for stage in repo.stage.collect(target) if stage not in stages)
        graph = get_active_graph(repo.index.graph)
        order = plan_repro(graph, stages)
        changed = set(repo.status(targets=targets, with_deps=True))
        in_plan = set(order)
        stale = {stage for stage in order if stage.addressing in changed}
        for stage in list(stale):
            # graph edges go from a stage to the stages it depends on
            stale |= {above for above in nx.ancestors(graph, stage) if above in in_plan}
        return {
            "order": [stage.addressing for stage in order],
            "upstream": {
                stage.addressing: [up.addressing for up in graph.successors(stage) if up in in_plan] for stage in order
            },
            "stale": [stage.addressing for stage in order if stage in stale],
            "lock": {
                stage.addressing: [
                    os.path.splitext(os.path.relpath(stage.dvcfile.path))[0] + ".lock",
                    stage.name,
                ]
                for stage in order
            },
        }


def dvc_environment(lanes: int = 1) -> dict[str, str]:
    """The stages' commands find `headstudy` beside this interpreter, also when the lanes were
    started as .venv/bin/headstudy without activating the environment."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1", LANES_VARIABLE: str(lanes)}


def describe(root: Path, targets: list[str]) -> Plan:
    """The plan of `targets` in the repository at root (see describe_here)."""
    command = [sys.executable, "-m", "headstudy.execution.lanes", "--describe", *targets]
    environment = {**dvc_environment(), "PYTHONHASHSEED": PLAN_HASH_SEED}
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        result = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True)
        if result.returncode == 0:
            data = json.loads(result.stdout.strip().splitlines()[-1])
            lock = {stage: (path, name) for stage, (path, name) in data["lock"].items()}
            return Plan(data["order"], data["upstream"], data["stale"], lock)
        busy = "Unable to acquire lock" in result.stderr
        if not busy or time.monotonic() > deadline:
            lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
            raise ConfigError(f"DVC could not plan {' '.join(targets)}: {lines[-1] if lines else 'no message'}")
        time.sleep(1)


def stage_command(stage: str) -> list[str]:
    """One stage, by DVC, waiting for the repository's lock while another lane holds it."""
    return [sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", stage]


def descendants(pid: int) -> list:
    """The processes below pid: a stage's command (and its shell, where one stays)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


# What every stage prints and the lanes' own line already says: DVC's lines around a stage's
# command, and a training bar's redraw (its validation line that follows has the same numbers).
ROUTINE_PREFIXES = (
    "Running stage ",
    "> ",
    "Updating lock file ",
    "Generating lock file ",
    "Use `dvc push` to send your updates",
    "Training: ",
)


def routine(line: str) -> bool:
    return line.startswith(ROUTINE_PREFIXES) or (line.startswith("Stage '") and "didn't change, skipping" in line)


class Lane:
    """One `dvc repro --single-item STAGE` in a session of its own: a Ctrl-C at the terminal reaches
    the lanes, which pass it on to the stage's command only, never to DVC while it writes."""

    def __init__(
        self,
        stage: str,
        root: Path,
        say: Callable[[str], None],
        finished: queue.Queue,
        lanes: int = 1,
        names: dict[str, str] | None = None,
    ):
        self.stage, self.say, self.finished = stage, say, finished
        self.name = shown_name(stage, names)
        self.tail: list[str] = []
        self.signalled: list = []
        self.ran_command = False  # DVC ran the stage's command, rather than finding it up to date
        self.process = subprocess.Popen(
            stage_command(stage),
            cwd=root,
            env=dvc_environment(lanes),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        for raw in iter(self.process.stdout.readline, b""):
            # A progress bar off a terminal redraws with carriage returns on one line: its latest.
            text = raw.decode(errors="replace").rstrip("\n")
            line = next((part for part in reversed(text.split("\r")) if part.strip()), "")
            if line:
                self.tail = [*self.tail[-KEPT_LINES + 1 :], line]  # all of it, for the error message
                self.ran_command |= line.startswith("Running stage ")
                if not routine(line):
                    self.say(f"[{self.name}] {line}")
        self.process.stdout.close()
        self.finished.put((self, self.process.wait()))

    def interrupt(self, number: int) -> None:
        """Pass the signal to the stage's command, not to DVC."""
        for child in descendants(self.process.pid):
            try:
                child.send_signal(number)
                self.signalled.append(child)
            except Exception:  # noqa: BLE001 - gone already
                pass

    def wait_for_commands(self) -> None:
        """A command signalled may outlive DVC for a moment (its shell ended first): wait for it."""
        import psutil

        psutil.wait_procs(self.signalled, timeout=None)

    def error_line(self) -> str:
        """The stage's own one-line error, where it printed one, else DVC's."""
        mine = [line for line in self.tail if "error:" in line.lower() and not line.startswith("ERROR:")]
        dvc = [line for line in self.tail if line.startswith("ERROR:")]
        return (mine or dvc or ["no error message"])[-1].strip()


def lock_keys(text: str) -> list[str]:
    import yaml

    data = yaml.safe_load(text) or {}
    return list((data.get("stages") or {}).keys())


def canonical_order(current: list[str], committed: list[str], planned: list[str]) -> list[str]:
    """The lock file's stage order that a plain `dvc repro` in the planned order writes: the last
    commit's entries where they were, then the others in the planned order (entries of stages
    outside the plan, where there are any, before those, in their current order)."""
    present = set(current)
    kept = [key for key in committed if key in present]
    rest = [key for key in current if key not in set(kept)]
    index = {key: place for place, key in enumerate(planned)}
    return (
        kept + [key for key in rest if key not in index] + sorted((key for key in rest if key in index), key=index.get)
    )


def committed_text(root: Path, path: str) -> str:
    """The lock file as the last commit has it ("" where there is none)."""
    result = subprocess.run(["git", "show", f"HEAD:./{path}"], cwd=root, capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


def put_locks_in_order(root: Path, plan: Plan) -> list[str]:
    """Each lock file of the plan in canonical_order, its entries untouched, written by DVC's YAML
    writer under DVC's repository lock (and staged where DVC's autostage is on). Returns the files
    rewritten."""
    import yaml
    from dvc.lock import LockError
    from dvc.repo import Repo
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

    from headstudy.common.files import write_atomically

    rewritten = []
    with Repo(os.fspath(root)) as repo:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                repo.lock.lock()
                break
            except LockError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        "another DVC command holds the repository's lock: the lock files are complete but "
                        "not in DVC's order; `headstudy lanes` again puts them in order"
                    ) from None
                time.sleep(1)
        try:
            with repo.scm_context(quiet=True):
                for path in sorted({path for path, _ in plan.lock.values()}):
                    file = root / path
                    if not file.is_file():
                        continue
                    text = file.read_text()
                    planned = [plan.lock[stage][1] for stage in plan.order if plan.lock[stage][0] == path]
                    current = lock_keys(text)
                    order = canonical_order(current, lock_keys(committed_text(root, path)), planned)
                    if order == current:
                        continue
                    data = parse_yaml_for_update(text, str(file))
                    stages = data["stages"]
                    for key in order:  # each moved to the end in turn: the mapping ends in `order`
                        stages.move_to_end(key)
                    new = dumps_yaml(data)
                    if yaml.safe_load(new) != yaml.safe_load(text) or lock_keys(new) != order:
                        raise AssertionError(f"{path}: reordering changed an entry")
                    write_atomically(file, new)
                    repo.scm_context.track_file(str(file))
                    rewritten.append(path)
        finally:
            repo.lock.unlock()
    return rewritten


def stage_kind(stage: str) -> str:
    """`train` of `studies/NAME/dvc.yaml:train@1-0`: the stages of one kind take about as long."""
    return short_name(stage).split("@", 1)[0]


def earlier_times(root: Path, stages: list[str]) -> dict[str, list[float]]:
    """Each kind's durations that earlier runs of these stages' pipelines kept on this machine
    (bookkeeping/stage_times.py): the time left counts a kind from the first line on, not only once
    a stage of it has run here."""
    from headstudy.bookkeeping import stage_times

    kept = stage_times.recorded(root)
    took: dict[str, list[float]] = {}
    for pipeline in dict.fromkeys(map(pipeline_folder, stages)):
        for kind, seconds in kept.get(pipeline, {}).items():
            took.setdefault(kind, []).extend(seconds)
    return took


def short_name(stage: str) -> str:
    """`train@1-0` of `studies/NAME/dvc.yaml:train@1-0`."""
    return stage.rsplit(":", 1)[-1]


def pipeline_folder(stage: str) -> str:
    """`studies/NAME` of `studies/NAME/dvc.yaml:train@1-0`; `.` for a stage of the project's dvc.yaml."""
    return Path(stage.rsplit(":", 1)[0]).parent.as_posix() if ":" in stage else "."


def display_names(stages: list[str]) -> dict[str, str]:
    """Each stage's name in the lanes' lines: its short name, with its pipeline's folder in front
    (`quick-look:configure`) where a stage of another pipeline has the same short name (the quick
    look runs the project's configure and its own)."""
    counts = Counter(short_name(stage) for stage in stages)
    return {
        stage: short_name(stage)
        if counts[short_name(stage)] == 1 or ":" not in stage
        else f"{Path(pipeline_folder(stage)).name}:{short_name(stage)}"
        for stage in stages
    }


def shown_name(stage: str, names: dict[str, str] | None) -> str:
    """The stage's name in the lanes' lines: its display_names entry where given, else its short name."""
    return (names or {}).get(stage) or short_name(stage)


def time_left(
    plan: Plan, waiting: list[str], started: dict[str, float], took: dict[str, list[float]], lanes: int, now: float
) -> tuple[float, list[str]]:
    """Seconds until the last stage ends, and the kinds of stage still to run that none has timed
    yet (counted as taking no time). Each stage is taken to last the mean of the stages of its
    kind that ran so far (a running one, what is left of that), and the stages waiting are given
    to the lanes as the lanes give them: in order, each to the first lane free, once the stages
    above it are done."""
    mean = {kind: sum(times) / len(times) for kind, times in took.items()}
    untimed: list[str] = []

    def expected(stage: str) -> float:
        kind = stage_kind(stage)
        if kind not in mean and kind not in untimed:
            untimed.append(kind)
        return mean.get(kind, 0.0)

    ends = {stage: max(expected(stage) - (now - since), 0.0) for stage, since in started.items()}
    free = sorted(ends.values()) + [0.0] * max(lanes - len(ends), 0)
    for stage in waiting:
        ready = max((ends.get(above, 0.0) for above in plan.upstream.get(stage, [])), default=0.0)
        lane = min(range(len(free)), key=free.__getitem__)
        ends[stage] = free[lane] = max(free[lane], ready) + expected(stage)
    return max(ends.values(), default=0.0), untimed


def progress(
    finished: str | None,
    started: list[str],
    done: int,
    total: int,
    running: list[str],
    left,
    width: int = 0,
    names: dict[str, str] | None = None,
) -> str:
    """One line per change of the lanes: `lanes: done train@1-0, start train@4-0 (3 of 10 done,
    about 41 min left; running: train@1-mix-0, train@4-0)`, the time left from the stages timed so
    far (`left`, from time_left). Within `width` columns (default: the terminal's), so that a
    terminal never wraps it: the longest of these that fits, the count and the time left in each:
    without the running stages, then with the untimed kinds counted instead of named, then the
    count and the time left alone."""
    from headstudy.bookkeeping.progress import duration

    seconds, untimed = left

    def estimate(named: bool) -> str:
        if not seconds:
            return ""  # nothing still to run has been timed: no estimate yet
        if not untimed:
            return f", {duration(seconds)} left"
        kinds = f"{', '.join(untimed)} (not timed yet)" if named else f"{len(untimed)} kinds not timed yet"
        return f", {duration(seconds)} left + {kinds}"

    name = functools.partial(shown_name, names=names)
    events = ", ".join(
        ([f"done {name(finished)}"] if finished else [])
        + ([f"start {', '.join(map(name, started))}"] if started else [])
    )
    now = f"; running: {', '.join(map(name, running))}" if running else ""
    count = f"{done} of {total} done"
    forms = [
        f"lanes: {events} ({count}{estimate(True)}{now})",
        f"lanes: {events} ({count}{estimate(True)})",
        f"lanes: {events} ({count}{estimate(False)})",
        f"lanes: {count}{estimate(False)}",
    ]
    width = width or shutil.get_terminal_size().columns
    return next((form for form in forms if len(form) <= width), forms[-1])


def run(
    root: Path,
    targets: list[str],
    lanes: int,
    say: Callable[[str], None] | None = None,
    start: Callable | None = None,
    plan: Plan | None = None,
    order_locks: bool = True,
) -> int:
    """Reproduce targets in `lanes` lanes. Returns 0, or 128 + the signal that stopped the lanes;
    raises ConfigError naming the stage that failed. `start` and `plan` are for tests."""
    printing = threading.Lock()

    def say_default(line: str) -> None:
        with printing:
            print(line, flush=True)

    say = say or say_default
    plan = plan or describe(root, targets)
    finished: queue.Queue = queue.Queue()
    names = display_names(plan.order)
    start = start or functools.partial(Lane, lanes=lanes, names=names)
    stale = set(plan.stale)
    waiting = [stage for stage in plan.order if stage in stale]
    done = {stage for stage in plan.order if stage not in stale}
    total, ran = len(waiting), 0
    running: dict[str, Lane] = {}
    started: dict[str, float] = {}
    took = earlier_times(root, waiting)
    failed: Lane | None = None
    stopped: list[int] = []

    if not waiting:
        if order_locks:  # a lock file that lanes killed outright (SIGKILL) left out of order
            put_locks_in_order(root, plan)
        say(f"lanes: all {len(plan.order)} stages are up to date")
        return 0
    say(f"lanes: {total} of {len(plan.order)} stages to check or run, in {lanes} lane{'s' * (lanes != 1)}")

    def on_signal(number, _frame) -> None:
        if not stopped:
            say(
                f"lanes: {signal.Signals(number).name}: starting no more stages; "
                f"stopping {', '.join(running) or 'none'}"
            )
        stopped.append(number)
        for lane in running.values():
            lane.interrupt(number)

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    just_done: str | None = None
    try:
        while waiting or running:
            now_started = []
            if not failed and not stopped:
                for stage in list(waiting):
                    if len(running) >= lanes:
                        break
                    if all(above in done for above in plan.upstream.get(stage, [])):
                        waiting.remove(stage)
                        running[stage] = start(stage, root, say, finished)
                        started[stage] = time.monotonic()
                        now_started.append(stage)
            if just_done or now_started:
                left = time_left(plan, waiting, started, took, lanes, time.monotonic())
                say(progress(just_done, now_started, ran, total, list(running), left, names=names))
                just_done = None
            if not running:
                break
            try:
                lane, code = finished.get(timeout=0.5)
            except queue.Empty:
                continue
            lane.wait_for_commands()
            del running[lane.stage]
            seconds = time.monotonic() - started.pop(lane.stage)
            if code == 0:
                done.add(lane.stage)
                ran += 1
                if lane.ran_command:  # a stage DVC found up to date says nothing of the time
                    took.setdefault(stage_kind(lane.stage), []).append(seconds)
                just_done = lane.stage
            elif not stopped and failed is None:
                failed = lane
                say(f"lanes: {lane.stage} failed (exit {code}); starting no more stages, letting {len(running)} finish")
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if order_locks:
            put_locks_in_order(root, plan)
    if failed is not None:
        raise ConfigError(
            f"stage {failed.stage} failed: {failed.error_line()} ({ran} of {total} stages done and recorded; "
            "`headstudy lanes` again continues from there)"
        )
    if stopped:
        say(f"lanes: stopped by {signal.Signals(stopped[0]).name}: {ran} of {total} stages done and recorded")
        return 128 + stopped[0]
    say(f"lanes: all {total} stages done")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--describe"]:
    print(json.dumps(describe_here(sys.argv[2:])))
