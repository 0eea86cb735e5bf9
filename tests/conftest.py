from __future__ import annotations

import compileall
import gc
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_project(monkeypatch):
    """Run in the project root, where conf/ is, as the DVC stages do."""
    monkeypatch.chdir(ROOT)
    return ROOT


@pytest.fixture(autouse=True, scope="session")
def installed_commands_on_path():
    """Subprocesses find `headstudy` and `dvc` beside this Python, venv activated or not. And they
    train without logging each model as an MLflow model (HEADSTUDY_MLFLOW_MODEL=0): its torch.export
    is about 4 of a tiny training's 9 CPU-seconds, in some 100 trainings; the tests that look at
    the logged model (test_tracking.py) set it to 1."""
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    os.environ["HEADSTUDY_MLFLOW_MODEL"] = "0"


def default_signals() -> None:
    """preexec_fn for a child that a test sends SIGINT or SIGTERM: the signals at their defaults.
    A child inherits an ignored signal (pytest started as a background job of a non-interactive
    shell runs with SIGINT ignored, `nohup` and some CI runners ignore others), and would then
    never see the signal the test sends: the test would pass or fail by how pytest was started."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@contextmanager
def default_interrupt() -> Iterator[None]:
    """Within this block this process takes Ctrl-C as Python does by default (KeyboardInterrupt),
    however pytest was started: Python leaves SIGINT ignored when it starts with it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def assert_refused(result, command: str, *names: str) -> str:
    """A user error as the project promises it: exit status 2, no traceback, and one line
    `headstudy COMMAND: error: ...`, the last one printed, that names every one of `names`."""
    assert result.returncode == 2, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1], result.stderr
    [line] = errors
    assert line.startswith(f"headstudy {command}: error: "), line
    for name in names:
        assert name in line, f"{name!r} not in {line!r}"
    return line


def assert_nothing_half_written(folder: Path) -> None:
    """No staging leftovers, and no NaN or Infinity in any JSON or CSV file under folder."""
    assert not list(folder.rglob("*.partial")), list(folder.rglob("*.partial"))

    def refuse(constant: str):
        raise AssertionError(f"{path} holds {constant}")

    for path in folder.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    for path in folder.rglob("*.csv"):
        for field in path.read_text().replace("\n", ",").split(","):
            try:
                value = float(field)
            except ValueError:
                continue
            assert math.isfinite(value), f"{path} holds {field}"


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> list[str]:
    """Overrides that train on a small real corpus: the first 3,000 lines of the Penn Treebank's
    train split as a text folder, prepared once with a 512-token BPE (150 lines each for
    validation and test), so that a test's validation takes milliseconds."""
    from tinyproject import write_small_corpus

    folder = tmp_path_factory.mktemp("small-corpus")
    write_small_corpus(folder / "corpus")
    overrides = [
        "data=textdir",
        f"data.dir={folder / 'corpus'}",
        "data.vocab_size=512",
        f"paths.prepared={folder / 'prepared'}",
    ]
    subprocess.run(["headstudy", "prepare", *overrides], cwd=ROOT, check=True, capture_output=True)
    return overrides


@pytest.fixture(scope="session")
def reproduced_study(tmp_path_factory) -> tuple[Path, str]:
    """tinyproject.REPRODUCED after its first `dvc repro`, committed, and that repro's output:
    built once per test run, not once per test file. Under pytest-xdist the first worker to ask
    builds it in the run's shared folder while the others wait on its lock. Read-only: a test
    works in `tinyproject.copy_project` of it. Python's hash seed is fixed, as DVC's order of
    stages, and so the lock file's, depends on it: test_lanes.py compares its lock byte for byte."""
    from filelock import FileLock
    from tinyproject import REPRODUCED, commit, environment, make_project, run

    # Shared by the workers of this run only: without xdist, getbasetemp() is this run's own.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    project, output = shared / "reproduced-study", shared / "reproduced-study.out"
    with FileLock(shared / "reproduced-study.lock"):
        if not output.is_file():
            shutil.rmtree(project, ignore_errors=True)  # a build that failed in another worker
            make_project(project, REPRODUCED)
            result = run(project, "dvc", "repro", env={**environment(), "PYTHONHASHSEED": "0"})
            commit(project, "reproduced")
            output.write_text(result.stdout)
    return project, output.read_text()


@contextmanager
def logged_to(stream) -> Iterator[None]:
    """Within this block every logging stream handler writes to `stream`: in a process of its own
    they would write to its stderr, where those set up at import (MLflow's) hold this one's."""
    import logging

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = {
        handler
        for logger in loggers
        for handler in getattr(logger, "handlers", [])  # placeholders of loggers not yet made have none
        if type(handler) is logging.StreamHandler
    }
    previous = {handler: handler.stream for handler in handlers}
    for handler in handlers:
        handler.setStream(stream)
    try:
        yield
    finally:
        for handler, old in previous.items():
            handler.setStream(old)


def headstudy_here(cwd: Path, *args: str, **env_changes: str) -> subprocess.CompletedProcess:
    """`headstudy *args` by hand in `cwd` (no DVC_STAGE or DVC_EXP_NAME) with this project's conf/
    and the store cwd/mlflow.db, through headstudy.cli.main in this process: without the seconds a
    process of its own spends importing, for a test that checks what the command does, not the
    process around it (a signal, an exit status of the interpreter). What a command changes in its
    process is put back: the environment (Lightning's seed variables), the working folder, torch's
    thread count and deterministic mode, MLflow's tracking URI, the warning filters. Its output is
    what a process of its own would print: logging's stream handlers (MLflow's, set up at import)
    write to its stderr meanwhile."""
    import contextlib
    import io
    import warnings

    import mlflow
    import torch
    from mlflow.tracking._tracking_service import utils as mlflow_tracking

    from headstudy.cli import main

    out, err = io.StringIO(), io.StringIO()
    environment, threads = dict(os.environ), torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    pinned_store = mlflow_tracking._tracking_uri  # Lightning's MLFlowLogger pins the store it logs to
    settings = {"HEADSTUDY_CONF": str(ROOT / "conf"), "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.chdir(cwd)
        for name in ("DVC_STAGE", "DVC_EXP_NAME"):
            os.environ.pop(name, None)
        os.environ.update({**settings, **env_changes})
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), logged_to(err):
                main(list(args))
            status = 0
        except SystemExit as stopped:
            status = stopped.code if isinstance(stopped.code, int) else int(stopped.code is not None)
        finally:
            mlflow.set_tracking_uri(pinned_store)
            os.environ.clear()
            os.environ.update(environment)
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)
    return subprocess.CompletedProcess(["headstudy", *args], status, out.getvalue(), err.getvalue())


def headstudy_environment(tracking_uri: str) -> dict[str, str]:
    """For `headstudy` run from a scratch folder: this project's conf/ and the given store."""
    return {**os.environ, "HEADSTUDY_CONF": str(ROOT / "conf"), "MLFLOW_TRACKING_URI": tracking_uri}


# The longest files, longest first (their summed --durations in a whole-suite run, 2026-12-05), so
# that the two workers, each given a file at a time, finish close together. test_scaling.py comes
# first because it builds `reproduced_study`, which the files after it on the other worker
# (test_lanes.py, test_pipeline.py) then find ready instead of waiting for.
LONGEST_FIRST = [
    "test_scaling.py",
    "test_guards.py",
    "test_lanes.py",
    "test_pipeline.py",
    "test_spotlight.py",
    "test_ddp.py",
    "test_slurm.py",
    "test_several_machines.py",
    "test_tracking.py",
]


def pytest_configure(config):
    """Compile the project's modules once, before the workers start: the hundreds of `headstudy`
    processes the tests start then read them compiled. Where PYTHONDONTWRITEBYTECODE is set (as
    on this project's CI machines) Python never writes them, and every process compiled the
    modules it imports again: about half a CPU-second of each training's start."""
    if not hasattr(config, "workerinput"):  # the controller, not each pytest-xdist worker
        compileall.compile_dir(ROOT / "src", quiet=1)


def pytest_collection_modifyitems(items):
    """Every test not marked slow is marked quick (`pytest -m quick`, the loop before a commit).
    The longest files first, then the other files with slow tests, then the rest; each file's
    tests in their own order: parallel workers, one file at a time, start on the long files and
    finish close together."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    for item in items:
        if not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.quick)

    def rank(item) -> tuple[int, int]:
        if item.path.name in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(item.path.name)
        return (1 if item.path in slow_files else 2), 0

    items.sort(key=rank)


def pytest_collection_finish(session):
    """Every test module and library is imported by now and stays to the end: frozen out of the
    cyclic collector's scans (gc.freeze), as cli.main does for a command's imports."""
    gc.freeze()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def served_mlflow(backend_uri: str, log_file: Path, *options: str) -> Iterator[str]:
    """A real `mlflow server` on a free port of 127.0.0.1, as README's "Sharing runs" starts
    it, until the block ends; yields its URL. Its output goes to log_file."""
    url = f"http://127.0.0.1:{free_port()}"
    with open(log_file, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                backend_uri,
                *options,
                "--host",
                "127.0.0.1",
                "--port",
                url.rsplit(":", 1)[1],
                "--workers",
                "1",
            ],
            cwd=log_file.parent,
            # Without its job runner (GenAI evaluation jobs): eight fewer processes, half the start.
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,  # stopped with SIGTERM below, which it must not inherit ignored
        )
        try:
            deadline = time.monotonic() + 180
            while True:
                assert server.poll() is None, Path(log_file).read_text()[-3000:]
                assert time.monotonic() < deadline, "mlflow server did not answer within 180 s"
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2):
                        break
                except OSError:
                    time.sleep(0.5)
            yield url
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
