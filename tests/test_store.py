"""The MLflow store when something is wrong with it: a command interrupted while it creates a
new store, a lock that cannot be made or is never released, a server that is down, a password
in the store's URI. Each stops a command with one line, soon, and leaves the store usable."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import ROOT, assert_refused, free_port, headstudy_here
from mlflow.tracking import MlflowClient

from headstudy.bookkeeping import store as tracking_store
from headstudy.bookkeeping import tracking
from headstudy.common.errors import ConfigError

# Killed at the worst moment: inside a batch migration of the new store's schema, after alembic
# has made its _alembic_tmp_ table and before it has copied the old one into it.
KILLED_WHILE_MIGRATING = """
import os, signal
from sqlalchemy import event
from sqlalchemy.engine import Engine

def kill(connection, cursor, statement, *args):
    if statement.lstrip().startswith("INSERT INTO _alembic_tmp_"):
        os.kill(os.getpid(), signal.SIGKILL)

event.listen(Engine, "before_cursor_execute", kill)
from headstudy.bookkeeping import store
store.check_store()
"""


# Logs the prepared data as the dataset of the run named on the command line, as a training does.
LOGS_THE_DATASET = """
import sys
from pathlib import Path
from headstudy.bookkeeping import tracking
tracking.log_dataset(sys.argv[1], Path(sys.argv[2]), "corpus-prepared", "0" * 64)
"""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail the block, rather than wait on, if it runs past `seconds`."""

    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def headstudy(cwd: Path, *args: str, timeout: float = 120, **env_changes: str) -> subprocess.CompletedProcess:
    """conftest's headstudy_here, failed rather than waited on past `timeout` seconds."""
    with deadline(timeout):
        return headstudy_here(cwd, *args, **env_changes)


@pytest.fixture
def store(tmp_path, monkeypatch) -> str:
    """MLFLOW_TRACKING_URI: a new SQLite store in tmp_path."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.mark.slow
def test_a_command_killed_while_it_migrates_a_new_store_leaves_the_next_command_a_working_store(tmp_path, store):
    env = {**os.environ, "HEADSTUDY_CONF": str(ROOT / "conf")}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_MIGRATING],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # it did die inside the migration

    # The next command finds no store, or a whole one: it never sees the half-migrated schema.
    result = headstudy(tmp_path, "reproduce", "0123456789abcdef", MLFLOW_TRACKING_URI=store)
    assert_refused(result, "reproduce", "run '0123456789abcdef' not found")
    assert "_alembic_tmp" not in result.stderr and "cannot open the MLflow store" not in result.stderr
    mlflow_client = MlflowClient(store)
    assert mlflow_client.get_experiment_by_name(tracking_store.EXPERIMENT) is not None
    assert sorted(path.name for path in tmp_path.iterdir() if "mlflow.db" in path.name) == [
        "mlflow.db",
        "mlflow.db.lock",
    ]  # and no staged copy left beside it


@pytest.mark.slow
def test_a_dataset_another_process_logs_between_mlflows_lookup_and_insert_is_the_inputs_of_both(
    store, small_corpus, monkeypatch
):
    """The race of trainings that start together on a new store, made certain: another process
    logs the same dataset after MLflow has looked for its row and before it inserts one."""
    from sqlalchemy.orm import Session

    prepared = Path(next(item for item in small_corpus if item.startswith("paths.prepared=")).split("=", 1)[1])
    mlflow_client = tracking_store.client()
    experiment = tracking_store.experiment_id(tracking_store.BY_HAND_EXPERIMENT)
    ours, theirs = (mlflow_client.create_run(experiment).info.run_id for _ in range(2))
    add_all, raced = Session.add_all, []

    def the_other_process_first(session, objects):
        objects = list(objects)
        if not raced and any(type(item).__name__ == "SqlDataset" for item in objects):
            raced.append(True)
            subprocess.run([sys.executable, "-c", LOGS_THE_DATASET, theirs, str(prepared)], check=True, timeout=120)
        return add_all(session, objects)

    monkeypatch.setattr(Session, "add_all", the_other_process_first)
    tracking.log_dataset(ours, prepared, "corpus-prepared", "0" * 64)

    assert raced  # the other process did log it in between
    for run_id in ours, theirs:
        inputs = mlflow_client.get_run(run_id).inputs.dataset_inputs
        assert [(item.dataset.name, item.dataset.digest) for item in inputs] == [("corpus-prepared", "0" * 16)]


@pytest.mark.slow
def test_a_store_whose_lock_file_cannot_be_created_is_refused_at_once(tmp_path):
    uri = "sqlite:////proc/x.db"
    started = time.monotonic()
    result = headstudy(tmp_path, "reproduce", "0123456789abcdef", timeout=90, MLFLOW_TRACKING_URI=uri)
    line = assert_refused(
        result, "reproduce", "cannot open the MLflow store", uri, "MLFLOW_TRACKING_URI", "/proc/x.db.lock"
    )
    assert "cannot be created" in line
    assert time.monotonic() - started < 60


def test_a_store_locked_by_a_stuck_process_is_refused_after_the_lock_timeout(tmp_path, store, monkeypatch):
    lock = tmp_path / "mlflow.db.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock\n"
            f"held = FileLock({str(lock)!r}); held.acquire(); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(tracking_store, "LOCK_TIMEOUT_S", 1.0)
        with deadline(30), pytest.raises(ConfigError) as refused:
            tracking_store.check_store()
    finally:
        holder.kill()
        holder.wait()
    message = str(refused.value)
    assert store in message and "MLFLOW_TRACKING_URI" in message and str(lock) in message
    assert "\n" not in message


def test_a_study_lock_held_by_a_stuck_process_is_refused_after_the_lock_timeout(store, monkeypatch):
    key = hashlib.sha256(store.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"headstudy-{key}-study-test.lock"
    monkeypatch.setattr(tracking_store, "LOCK_TIMEOUT_S", 0.5)
    with open(path, "a") as held:  # another open file: flock makes it wait as another process would
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            with deadline(30), pytest.raises(ConfigError, match="another process has held"):
                with tracking_store.file_lock("study-test"):
                    pass
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            path.unlink(missing_ok=True)


def test_a_server_that_is_down_is_refused_within_seconds(monkeypatch):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with deadline(60), pytest.raises(ConfigError) as refused:
        tracking_store.check_store()
    assert time.monotonic() - started < 10
    message = str(refused.value)
    assert message.startswith(f"cannot open the MLflow store {uri} (MLFLOW_TRACKING_URI)")
    assert "\n" not in message


@pytest.mark.slow
def test_a_password_in_the_store_uri_never_shows_in_a_message(tmp_path):
    uri = f"postgresql://analyst:s3cret-pw@127.0.0.1:{free_port()}/runs"
    result = headstudy(tmp_path, "reproduce", "0123456789abcdef", timeout=90, MLFLOW_TRACKING_URI=uri)
    line = assert_refused(
        result, "reproduce", "cannot open the MLflow store", "postgresql://analyst:***@127.0.0.1", "MLFLOW_TRACKING_URI"
    )
    assert "s3cret-pw" not in result.stderr + result.stdout, line


def test_redact_hides_the_password_wherever_a_message_repeats_it(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "mysql://analyst:p%40ss-word@db.example:3306/runs")
    message = (
        "cannot open mysql://analyst:p%40ss-word@db.example:3306/runs: "
        "Access denied for user 'analyst' (using password p@ss-word)"
    )
    assert tracking_store.redact(message) == (
        "cannot open mysql://analyst:***@db.example:3306/runs: Access denied for user 'analyst' (using password ***)"
    )
    assert tracking_store.redact("sqlite:///mlflow.db", "sqlite:///mlflow.db") == "sqlite:///mlflow.db"


def test_every_lock_of_the_project_is_the_one_in_execution_locks():
    """One lock helper: no other module takes a lock of its own (fcntl, filelock)."""
    package = ROOT / "src/headstudy"
    takers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if re.search(r"^\s*(import fcntl|from fcntl|import filelock|from filelock)", path.read_text(), re.M)
    )
    assert takers == ["execution/locks.py"]
