"""The study's trainings as a SLURM job array (docs/slurm/study-array.sbatch, as a user submits it
from docs/scaling.md) on a single-node SLURM cluster that this test starts on this machine: munged,
slurmctld and slurmd as root, with their config, key, state and logs in a temporary folder. One
array task is preempted (`scontrol requeue`) after its first checkpoint and resumes to the weights
of an uninterrupted `dvc repro` of the same stage; the gathering job that docs/scaling.md submits
after the array then trains nothing. Skipped, saying why, where the cluster cannot start (SLURM or
munge not installed, not root, a daemon that does not come up): .ci/run installs Debian's
slurm-wlm and munge."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, default_signals, free_port
from tinyproject import environment, make_project, ran_stages, run, runs

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SCRIPT = ROOT / "docs" / "slurm" / "study-array.sbatch"
# Two trainings, the array's two tasks, side by side on two cores. The first checkpoint comes at
# step 10 and the training ends at step 100: the preemption, a fraction of a second after the
# checkpoint appears, lands with about 90 steps to spare.
TINY = {
    "study": {"variants": [1], "seeds": [0, 1]},
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 100, "val_every_steps": 10},
}
PREEMPTED = ("train@1-1", "h1-s1")  # the stage whose array task is requeued, and its model
NODE = "headstudy-node"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # SLURM_CONF: every SLURM command of the test, and the jobs, use this cluster

    def command(self, *args: str, cwd: Path | None = None) -> str:
        result = subprocess.run(args, cwd=cwd or self.folder, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise AssertionError(f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def jobs(self, job: str) -> list[dict[str, str]]:
        """Every record of `job` (an array: one per task), as `scontrol show job` gives it."""
        output = self.command("scontrol", "--oneliner", "show", "job", job)
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in output.splitlines() if line.strip()]

    def state(self, job: str) -> str:
        [record] = self.jobs(job)
        return record["JobState"]

    def wait_until_finished(self, job: str, timeout: float, logs: Path) -> list[dict[str, str]]:
        """Every record of `job` once all have finished; fails at once, with the logs, for a job that
        waits on one that failed (afterok), which SLURM keeps pending for ever."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.jobs(job)
            if records and all(record["JobState"] in FINISHED for record in records):
                return records
            never = any(record.get("Reason") == "DependencyNeverSatisfied" for record in records)
            assert not never, f"job {job} can never start: a job it depends on failed\n{self.logs(logs)}"
            assert time.monotonic() < deadline, f"job {job} not finished within {timeout:.0f} s\n{self.logs(logs)}"
            time.sleep(1)

    def logs(self, project: Path) -> str:
        """The jobs' logs in `project` and the ends of the daemons' logs, for a failure message."""
        daemons = [self.folder / f"{name}.log" for name in ("slurmctld", "slurmd")]
        tails = "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in daemons if path.exists())
        return f"{logs_of(project)}\n{tails}"


def logs_of(folder: Path) -> str:
    """The jobs' logs in `folder`, for a failure message."""
    return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in sorted(folder.glob("slurm-*.out")))


def installed(program: str) -> str | None:
    """SLURM's and munge's daemons are in /usr/sbin, which a user's PATH may lack."""
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


def slurm_conf(folder: Path, munge_socket: Path) -> str:
    """One node of this machine's cores, named NODE at 127.0.0.1, its controller beside it; ports
    of its own, so that it leaves any other SLURM on the machine alone. No accounting, no cgroups:
    processes are tracked as slurmd's descendants, and finished jobs are kept an hour for
    `scontrol show job`."""
    return f"""\
ClusterName=headstudy
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "slurmctld.log"}
SlurmdLogFile={folder / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=3600
KillWait=30
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def start(folder: Path, name: str, *command: str) -> subprocess.Popen:
    """A daemon in the foreground, in a session of its own, output to folder/NAME.out; SIGTERM
    stops it, so it must not inherit that signal ignored."""
    with open(folder / f"{name}.out", "w") as out:
        return subprocess.Popen(
            command,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,
        )


def stop(daemon: subprocess.Popen) -> None:
    if daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A single-node SLURM cluster on this machine until the module ends; every job still there
    is cancelled and every daemon stopped afterwards, whatever happened."""
    missing = [program for program in DAEMONS + CLIENTS if not installed(program)]
    if missing:
        pytest.skip(f"SLURM or munge not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users and must run as root; this test is not root")
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    socket_path = folder / "munge.socket"
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, socket_path))
    env = {**environment(), "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []
    cluster = Cluster(folder, env)
    try:
        # --force: munged wants every folder above its socket open to all, and pytest's are not.
        munge = [installed("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={socket_path}"]
        munge += [f"--pid-file={folder / 'munged.pid'}", f"--seed-file={folder / 'munged.seed'}"]
        daemons.append(start(folder, "munged", *munge))
        wait_for(lambda: socket_path.exists(), daemons, 60, "munged did not create its socket", folder)
        daemons.append(start(folder, "slurmctld", installed("slurmctld"), "-D", "-i", "-f", str(conf)))
        daemons.append(start(folder, "slurmd", installed("slurmd"), "-D", "-f", str(conf), "-N", NODE))
        wait_for(lambda: node_idle(cluster), daemons, 120, f"node {NODE} not idle", folder)
        yield cluster
    finally:
        if len(daemons) == len(DAEMONS) and all(daemon.poll() is None for daemon in daemons):
            cancel_every_job(cluster)
        for daemon in reversed(daemons):
            stop(daemon)


def node_idle(cluster: Cluster) -> bool:
    result = subprocess.run(
        ["sinfo", "--noheader", "--nodes", NODE, "--format", "%T"], env=cluster.env, capture_output=True, text=True
    )
    return result.returncode == 0 and result.stdout.strip() == "idle"


def wait_for(ready, daemons: list[subprocess.Popen], timeout: float, what: str, folder: Path) -> None:
    """Until ready(); skip, with the daemons' output, if one of them exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        exited = [daemon for daemon in daemons if daemon.poll() is not None]
        if exited or time.monotonic() > deadline:
            name = Path(exited[0].args[0]).name if exited else DAEMONS[len(daemons) - 1]
            reason = f"exited {exited[0].returncode}" if exited else f"{what} within {timeout:.0f} s"
            output = (folder / f"{name}.out").read_text()[-1500:]
            pytest.skip(f"a single-node SLURM cannot start here: {name} {reason}:\n{output}")
        time.sleep(0.5)


def cancel_every_job(cluster: Cluster) -> None:
    """Cancel what is left, and wait until SLURM has ended the jobs' processes."""
    subprocess.run(["scancel", "--user", "root"], env=cluster.env, capture_output=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = ["squeue", "--noheader", "--states", "all", "--format", "%T"]
        result = subprocess.run(states, env=cluster.env, capture_output=True, text=True)
        if result.returncode != 0 or not set(result.stdout.split()) - FINISHED:
            return
        time.sleep(1)


def train_stages(project: Path) -> list[str]:
    """The study's train stages, as the sbatch script lists them."""
    stages = run(project, "dvc", "stage", "list", "--name-only").stdout.split()
    return [stage for stage in stages if stage.startswith("train@")]


def lock_outs(project: Path, stage: str) -> dict[str, str]:
    """The md5 of each output of `stage` in the project's dvc.lock."""
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for out in lock["stages"][stage]["outs"]}


def wait_for_checkpoint(cluster: Cluster, project: Path, task: str, model: str) -> None:
    deadline = time.monotonic() + 300
    while not list((project / "checkpoints").glob(f"{model}-*/last.ckpt")):
        assert cluster.state(task) in ("PENDING", "RUNNING"), f"{task} ended before its first checkpoint"
        assert time.monotonic() < deadline, f"no checkpoint of {model} within 300 s\n{cluster.logs(project)}"
        time.sleep(0.2)


def requeue(cluster: Cluster, task: str) -> None:
    """Preempt `task` as a scheduler does (SIGTERM to every process of the job, SIGKILL after
    KillWait) and put it back into the queue. SLURM makes a requeued job wait two minutes before
    it may start again; once its processes have ended the test lets it start at once."""
    cluster.command("scontrol", "requeue", task)
    deadline = time.monotonic() + 120
    while True:  # COMPLETING while its processes end, then PENDING
        [record] = cluster.jobs(task)
        if record["JobState"] == "PENDING":
            # slurmd refuses a credential made in the same second as it revoked the killed
            # instance's ("Job credential revoked", the task then fails): start it a second later.
            time.sleep(2)
            cluster.command("scontrol", "update", f"JobId={task}", "StartTime=now")
            return
        if record["Restarts"] != "0" and (record["JobState"] == "RUNNING" or record["JobState"] in FINISHED):
            return  # started again already, or ended (the test's assertions say how)
        assert time.monotonic() < deadline, f"{task} not back in the queue within 120 s: {record['JobState']}"
        time.sleep(0.5)


def test_the_study_as_a_job_array_preempted_and_requeued_resumes_to_the_same_weights_and_gathers(cluster, tmp_path):
    project = make_project(tmp_path / "study", TINY)
    run(project, "dvc", "repro", "prepare")  # fingerprint, configure, prepare: what the array needs
    stages = train_stages(project)
    assert stages == ["train@1-0", "train@1-1"]
    task_id = stages.index(PREEMPTED[0])

    # The same stage uninterrupted, in a copy of the project, beside the cluster's jobs.
    reference = tmp_path / "uninterrupted"
    shutil.copytree(project, reference, symlinks=True)
    with open(tmp_path / "uninterrupted.log", "w") as log:
        uninterrupted = subprocess.Popen(
            ["dvc", "repro", "-s", PREEMPTED[0]], cwd=reference, env=environment(), stdout=log, stderr=log
        )
    try:
        # docs/scaling.md's commands: the array, then the gathering job once every task is done.
        array = cluster.command("sbatch", "--parsable", f"--array=0-{len(stages) - 1}", str(SCRIPT), cwd=project)
        array = array.strip()
        after = f"--dependency=afterok:{array}"
        gather = cluster.command(
            "sbatch", "--parsable", after, "--output=slurm-gather-%j.out", "--wrap", "dvc repro", cwd=project
        )
        gather = gather.strip()
        task = f"{array}_{task_id}"
        wait_for_checkpoint(cluster, project, task, PREEMPTED[1])
        requeue(cluster, task)

        records = cluster.wait_until_finished(array, 600, project)
        # A failed task leaves the gathering job pending for ever: say so now, with the logs.
        tasks = {record["ArrayTaskId"]: record["JobState"] for record in records}
        assert tasks == {"0": "COMPLETED", "1": "COMPLETED"}, cluster.logs(project)
        cluster.wait_until_finished(gather, 600, project)
        assert uninterrupted.wait(timeout=600) == 0, (tmp_path / "uninterrupted.log").read_text()[-3000:]
    finally:
        if uninterrupted.poll() is None:
            uninterrupted.kill()
            uninterrupted.wait()

    # Every task and the gathering job succeeded; the preempted task ran twice, and resumed.
    assert cluster.state(gather) == "COMPLETED", cluster.logs(project)
    restarts = {record["ArrayTaskId"]: record["Restarts"] for record in records}
    assert restarts == {str(task_id): "1", str(1 - task_id): "0"}, restarts
    log = (project / f"slurm-headstudy-study-{array}_{task_id}.out").read_text()
    assert "DUE TO JOB REQUEUE" in log, log
    assert f"study-array: task {task_id} of 2: {PREEMPTED[0]} on " in log and ", start 1" in log, log
    assert f"train: resuming {PREEMPTED[1]} from " in log, log
    # Preempted, DVC was not killed (the restart found no entry of a killed DVC in .dvc/tmp/rwlock) and
    # the task started again only once its training had stopped.
    assert "had been killed" not in log, log
    assert log.index(f"train: {PREEMPTED[1]} interrupted") < log.index(", start 1"), log

    # The resumed model is the uninterrupted one, bit for bit, and DVC's lock says so.
    model = f"models/{PREEMPTED[1]}"
    assert (project / model / "run.json").read_bytes() == (reference / model / "run.json").read_bytes()
    assert (project / model / "model.pt").read_bytes() == (reference / model / "model.pt").read_bytes()
    assert lock_outs(project, PREEMPTED[0]) == lock_outs(reference, PREEMPTED[0])

    # The gathering `dvc repro` trained nothing: each model is the one its lock records.
    gathered = (project / f"slurm-gather-{gather}.out").read_text()
    assert ran_stages(gathered) == {"baselines", "evaluate@1-0", "evaluate@1-1", "inspect", "report"}, gathered
    for stage in stages:
        assert f"Stage '{stage}' didn't change, skipping" in gathered, gathered
    assert json.loads(run(project, "dvc", "status", "--json").stdout) == {}
    [row] = json.loads((project / "reports/summary.json").read_text())["rows"]
    assert row["seeds"] == [0, 1]

    # One finished training run per model, the preempted one continued rather than started again;
    # no resume state left.
    trainings = [r for r in runs(project) if "weights.sha256" in r.data.tags]
    assert sorted((r.info.run_name, r.info.status) for r in trainings) == [
        ("h1-s0", "FINISHED"),
        ("h1-s1", "FINISHED"),
    ]
    assert not any(r.info.status == "RUNNING" for r in runs(project))
    assert not list((project / "checkpoints").glob("*"))


def test_an_array_of_the_wrong_size_or_before_prepare_is_refused_by_every_task(cluster, tmp_path):
    """Each task checks what `dvc repro -s` would not: that the array has one task per train stage,
    and that the stages upstream of its training (configure, prepare) are up to date."""
    project = make_project(tmp_path / "study", TINY)  # nothing run yet: no configs, no prepared data
    short = cluster.command("sbatch", "--parsable", "--array=0-0", str(SCRIPT), cwd=project).strip()
    unprepared = cluster.command("sbatch", "--parsable", "--array=0-1", str(SCRIPT), cwd=project).strip()
    for job in (short, unprepared):
        records = cluster.wait_until_finished(job, 300, project)
        assert {record["JobState"] for record in records} == {"FAILED"}, logs_of(project)
        assert {record["ExitCode"] for record in records} == {"2:0"}, logs_of(project)
    [log] = (project / f"slurm-headstudy-study-{short}_0.out").read_text().splitlines()
    assert log == "study-array: error: task 0 of an array of 1: dvc.yaml has 2 train stages; submit with --array=0-1"
    for task, stage in enumerate(["train@1-0", "train@1-1"]):
        [log] = (project / f"slurm-headstudy-study-{unprepared}_{task}.out").read_text().splitlines()
        assert log == (
            f"study-array: error: {stage}: stages upstream are not up to date: "
            "run `dvc repro configure fingerprint prepare` before submitting"
        )
    assert not (project / "models").exists() and not (project / "data/prepared").exists()


@pytest.mark.parametrize("task", ["-1", "x"])
def test_a_task_that_is_no_array_index_runs_nothing(tmp_path, task):
    """Run by hand with a task id that is no index: bash would take -1 as the last stage."""
    project = make_project(tmp_path / "study", TINY)
    env = {
        **environment(),
        "SLURM_SUBMIT_DIR": str(project),
        "SLURM_ARRAY_TASK_ID": task,
        "SLURM_ARRAY_TASK_COUNT": "2",
    }
    result = subprocess.run(["bash", str(SCRIPT)], cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"study-array: error: task {task} of an array of 2: dvc.yaml has 2 train stages; submit with --array=0-1"
    )
    assert not (project / "models").exists()
