"""One model trained by two processes (Lightning DDP on CPU, gloo) against the same model
trained by one: each process takes its slice of the global batch of step k, so both see the
same data and only the order of float summation differs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import default_signals, free_port, headstudy_environment
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow

# One thread per process: two DDP processes on two cores.
TINY_RUN = [
    "model=tiny",
    "variant=4",
    "seed=0",
    "threads=1",
    "data.batch_size=8",
    "trainer.max_steps=40",
    "trainer.val_every_steps=10",
]

# Measured: after 40 steps the two runs' weights differ by at most 1.2e-7, one float32 unit in
# the last place at the norms' weights of about 1.0 and less elsewhere. Summing a gradient as
# (mean of 4 rows + mean of 4 rows) / 2 instead of a mean of 8 rounds differently by about
# one such unit; Adam turns a relative gradient difference into a relative update difference
# of the same size, and each update is at most about lr = 3e-3. 1e-6 leaves 8x room for other
# machines' kernels, yet a slice that went to the wrong process, or a resume that drew other
# batches, changes an update by the order of lr itself: thousands of times the tolerance.
TOLERANCE = 1e-6


def train(folder: Path, corpus: list[str], *extra: str, wait: bool = True):
    folder.mkdir(exist_ok=True)
    command = ["headstudy", "train", *TINY_RUN, *corpus, *extra]
    env = headstudy_environment(f"sqlite:///{folder / 'mlflow.db'}")
    if not wait:
        return started(command, folder, env)
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def started(command: list[str], folder: Path, env: dict) -> subprocess.Popen:
    """The command running in the background, in a session of its own, with SIGINT and SIGTERM at
    their defaults: the test may send SIGTERM (a preemption), which an inherited ignore would swallow."""
    return subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        start_new_session=True,
        preexec_fn=default_signals,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def torchrun(folder: Path, corpus: list[str], *extra: str, wait: bool = True):
    """The training as torchrun starts it on one machine: 2 processes meeting at 127.0.0.1."""
    folder.mkdir(exist_ok=True)
    command = [
        "torchrun",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        shutil.which("headstudy"),
        "train",
        *TINY_RUN,
        *corpus,
        "trainer.devices=2",
        "trainer.strategy=ddp",
        *extra,
    ]
    env = headstudy_environment(f"sqlite:///{folder / 'mlflow.db'}")
    if not wait:
        return started(command, folder, env)
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def stop_after_first_checkpoint(training: subprocess.Popen, checkpoints: Path, stop) -> None:
    deadline = time.monotonic() + 300
    while not list(checkpoints.glob("h4-s0-*/last.ckpt")):
        assert training.poll() is None, "the training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.01)
    stop(training)
    training.wait(timeout=120)


def kill_every_process(training: subprocess.Popen) -> None:
    os.killpg(training.pid, signal.SIGKILL)  # Lightning's launcher keeps its processes in one process session


def preempt(training: subprocess.Popen) -> None:
    training.terminate()  # torchrun passes SIGTERM on to every process it started, as on preemption


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "models/h4-s0/model.pt", weights_only=True)["state_dict"]


def test_two_processes_killed_and_resumed_match_one_process_and_record_one_run(tmp_path, small_corpus):
    one = tmp_path / "one"
    train(one, small_corpus)

    two = tmp_path / "two"
    ddp = ["trainer.devices=2", "trainer.strategy=ddp"]
    stop_after_first_checkpoint(train(two, small_corpus, *ddp, wait=False), two / "checkpoints", kill_every_process)
    assert not (two / "models").exists()
    resumed = train(two, small_corpus, *ddp)
    assert "resuming h4-s0" in resumed.stdout

    single, distributed = weights(one), weights(two)
    assert single.keys() == distributed.keys()
    for name in single:
        torch.testing.assert_close(distributed[name], single[name], rtol=0, atol=TOLERANCE, msg=name)

    client = MlflowClient(f"sqlite:///{two / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("headstudy-by-hand").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["processes"] == "2"
    assert sorted({m.step for m in client.get_metric_history(run.info.run_id, "val/ppl")}) == [10, 20, 30, 40]
    assert not list((two / "checkpoints").glob("*"))


def test_torchrun_processes_resuming_from_different_steps_stop_at_once_and_resume_from_one_folder(
    tmp_path, small_corpus
):
    # Each process its own checkpoints folder, as on machines without a shared file system:
    # only process 0 writes checkpoints, so after the preemption process 1 has none.
    separate = ["paths.checkpoints=checkpoints-${oc.env:RANK}"]
    stop_after_first_checkpoint(
        torchrun(tmp_path, small_corpus, *separate, wait=False), tmp_path / "checkpoints-0", preempt
    )

    refused = torchrun(tmp_path, small_corpus, *separate)
    assert refused.returncode != 0
    assert re.search(
        r"^headstudy train: error: the 2 processes resume from different steps "
        r"\(process 0: step [1-9]\d*, process 1: step 0\)",
        refused.stderr,
        re.MULTILINE,
    )
    assert not (tmp_path / "models").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("headstudy-by-hand").experiment_id])
    assert run.info.status != "RUNNING"

    shared = torchrun(tmp_path, small_corpus, "paths.checkpoints=checkpoints-0")
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert "resuming h4-s0" in shared.stdout
    assert (tmp_path / "models/h4-s0/model.pt").is_file()
