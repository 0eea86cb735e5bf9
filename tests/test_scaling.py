"""Past one process: the larger presets, the trainer's device settings, trainings that share
one tracking store, a shared MLflow server, a DVC remote and DVC's experiment queue."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import headstudy_environment, headstudy_here, served_mlflow
from mlflow.tracking import MlflowClient
from tinyproject import commit, copy_project, environment, ran_stages, run, runs

from headstudy.common.errors import ConfigError
from headstudy.count import count
from headstudy.execution.jobs import cores
from headstudy.settings.compose import compose_config
from headstudy.settings.training import start_training


def decoder_parameters(vocab: int, context: int, width: int, layers: int, mlp: int) -> int:
    """The architecture's count written out: embeddings (the token one is also the output layer),
    per block two RMSNorms, q,k,v, the output projection with bias and the MLP with biases,
    then the final RMSNorm."""
    block = 2 * width + 3 * width * width + (width * width + width) + (2 * width * mlp + mlp + width)
    return vocab * width + context * width + layers * block + width


@pytest.mark.parametrize(
    "preset, heads, shape",
    [
        ("width768", 12, dict(context=1024, width=768, layers=12, mlp=3072)),
        ("width4096", 32, dict(context=2048, width=4096, layers=32, mlp=16384)),
    ],
)
def test_larger_presets_pass_validation_and_count_without_allocating(in_project, preset, heads, shape):
    config = compose_config([f"model={preset}"])
    assert config.model.n_heads == heads and config.variant == str(heads)
    assert count([f"model={preset}"])["params"] == decoder_parameters(1024, **shape)


def test_width768_with_gpt2_vocabulary_has_gpt2_small_size(in_project):
    # GPT-2 small has 124,439,808: 46,848 more, the biases of its LayerNorms and of q,k,v.
    assert count(["model=width768", "data.vocab_size=50257"])["params"] == 124_392_960


NO_TOKENS = np.zeros(0, dtype=np.uint16)  # refused before any batch is drawn


def test_batch_that_does_not_split_evenly_among_processes_is_refused(in_project):
    config = compose_config(["data.batch_size=7", "trainer.devices=2", "trainer.strategy=ddp"])
    with pytest.raises(ConfigError, match=r"data\.batch_size=7 must be divisible by .* = 2 processes"):
        start_training(config, NO_TOKENS, NO_TOKENS, [])


@pytest.mark.parametrize("override", ["trainer.strategy=abacus"])
def test_bad_trainer_choice_is_a_one_line_error_naming_the_trainer_keys(in_project, override):
    with pytest.raises(
        ConfigError, match=r"trainer\.accelerator=\w+, trainer\.devices=1, .*trainer\.precision="
    ) as error:
        start_training(compose_config([override]), NO_TOKENS, NO_TOKENS, [])
    assert override in str(error.value) and "\n" not in str(error.value)


def test_an_accelerator_lightning_does_not_know_is_refused_where_the_config_is_composed(in_project):
    with pytest.raises(ConfigError, match=r"trainer\.accelerator must be cpu, gpu, cuda, mps or auto, got 'abacus'"):
        compose_config(["trainer.accelerator=abacus"])


def test_a_precision_lightning_does_not_know_is_refused_where_the_config_is_composed(in_project):
    with pytest.raises(ConfigError, match=r"trainer\.precision must be one of 32-true, .*, got '7-bit'"):
        compose_config(["trainer.precision=7-bit"])


TINY_TRAINING = [
    "model=tiny",
    "threads=1",
    "data.batch_size=8",
    "trainer.max_steps=20",
    "trainer.val_every_steps=10",
    "trainer.loss_points=4",
]


def assert_every_metric_recorded(client: MlflowClient, run) -> None:
    assert run.info.status == "FINISHED"
    history = {
        key: sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        for key in ("train/loss", "val/ppl", "model/parameter_count", "train/tokens_per_sec")
    }
    assert history == {
        "train/loss": [4, 9, 14, 19],
        "val/ppl": [10, 20],
        "model/parameter_count": [20],
        "train/tokens_per_sec": [20],
    }


# Each process gets ready (imports, config, the model), then waits for the same file to appear,
# so that all of them reach the new store within a millisecond of each other.
AT_THE_SIGNAL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from headstudy.settings.compose import compose_config
    from headstudy.train import train
    overrides = sys.argv[1:]
    config = compose_config(overrides)
    Path("ready").touch()
    while not Path("../go").exists():
        time.sleep(0.001)
    train(config)
""")


@pytest.mark.slow
def test_three_trainings_starting_together_on_a_new_store_record_every_metric(tmp_path, small_corpus):
    env = headstudy_environment(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trainings = []
    for seed in range(3):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        command = [sys.executable, "-c", AT_THE_SIGNAL, *TINY_TRAINING, *small_corpus, f"seed={seed}"]
        trainings.append(
            subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    deadline = time.monotonic() + 300
    while not all((tmp_path / f"seed{seed}" / "ready").exists() for seed in range(3)):
        assert all(training.poll() is None for training in trainings), "a training ended before the signal"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    (tmp_path / "go").touch()
    outputs = [training.communicate(timeout=600)[0] for training in trainings]

    for training, output in zip(trainings, outputs, strict=False):
        assert training.returncode == 0, output[-3000:]
        assert "database is locked" not in output and "_alembic_tmp" not in output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [experiment] = client.search_experiments(filter_string="name = 'headstudy-by-hand'")
    tracked = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.params["seed"] for r in tracked) == ["0", "1", "2"]
    for tracked_run in tracked:
        assert_every_metric_recorded(client, tracked_run)


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server`, backed by SQLite, serving artifacts."""
    with served_mlflow(
        f"sqlite:///{tmp_path / 'server.db'}",
        tmp_path / "server.log",
        "--artifacts-destination",
        str(tmp_path / "server-artifacts"),
    ) as url:
        yield url


@pytest.mark.slow
def test_training_against_an_mlflow_server_is_read_back_through_it(tmp_path, small_corpus, mlflow_server):
    result = headstudy_here(tmp_path, "train", *TINY_TRAINING, *small_corpus, MLFLOW_TRACKING_URI=mlflow_server)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists()

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("headstudy-by-hand")  # a training by hand
    assert experiment.artifact_location.startswith("mlflow-artifacts:")  # served, not a local path
    [tracked] = client.search_runs([experiment.experiment_id])
    assert_every_metric_recorded(client, tracked)
    # By hand, the run's address on a line of its own (a terminal's width never cuts it), on the server in use.
    [link] = [line for line in result.stdout.splitlines() if "MLflow run" in line]
    page = f"{mlflow_server}/#/experiments/{experiment.experiment_id}/runs/{tracked.info.run_id}"
    assert link == f"train: MLflow run {page}?workflowType=machine_learning", result.stdout
    record = json.loads((tmp_path / "models/h1-s0/run.json").read_text())
    assert tracked.data.tags["weights.sha256"] == record["weights_sha256"]
    # HEADSTUDY_MLFLOW_MODEL=0 (conftest): no MLflow model, the weights still an artifact.
    assert "model.uri" not in tracked.data.tags and not (tracked.outputs and tracked.outputs.model_outputs)
    downloaded = client.download_artifacts(tracked.info.run_id, "model.pt", str(tmp_path / "download"))
    assert Path(downloaded).read_bytes() == (tmp_path / "models/h1-s0/model.pt").read_bytes()


@pytest.fixture(scope="module")
def reproduced(reproduced_study, tmp_path_factory) -> Path:
    """A copy of the test run's tiny study, reproduced and committed with its dvc.lock; 200 training steps."""
    shared, _ = reproduced_study
    return copy_project(shared, tmp_path_factory.mktemp("shared") / "project")


REPORT = [
    "reports/results.md",
    "reports/results.html",
    "reports/summary.json",
    "reports/figures/validation_curves.png",
    "reports/figures/test_perplexity.png",
]


@pytest.mark.slow
def test_outputs_pushed_to_a_remote_and_pulled_into_a_fresh_clone_reproduce_nothing(reproduced, tmp_path):
    run(reproduced, "dvc", "remote", "add", "--default", "shared", str(tmp_path / "remote"))
    run(reproduced, "dvc", "push")
    commit(reproduced, "DVC remote")

    clone = tmp_path / "clone"
    run(tmp_path, "git", "clone", "-q", str(reproduced), str(clone))
    assert not (clone / "models").exists() or not any((clone / "models").glob("h*"))
    run(clone, "dvc", "pull")
    result = run(clone, "dvc", "repro")
    assert ran_stages(result.stdout) == set()
    assert "Data and pipelines are up to date" in result.stdout
    for path in REPORT:
        assert (clone / path).read_bytes() == (reproduced / path).read_bytes(), path
    assert (clone / "models/h1-s0/model.pt").read_bytes() == (reproduced / "models/h1-s0/model.pt").read_bytes()


def start_queue(project: Path, jobs: int) -> None:
    """`dvc queue start`, returning at once: its workers keep the output pipes they inherit open
    until the queue is empty, so a captured run would wait for the whole queue."""
    subprocess.run(
        ["dvc", "queue", "start", "--jobs", str(jobs)],
        cwd=project,
        env=environment(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def queue_states(project: Path) -> dict[str, str]:
    """`dvc queue status`: Queued, Running, Success or Failed by experiment name."""
    lines = run(project, "dvc", "queue", "status").stdout.splitlines()
    table = lines[1 : lines.index("")] if "" in lines else lines[1:]
    return {line.split()[1]: line.split()[-1] for line in table}


def wait_for_queue(project: Path, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while {"Queued", "Running"} & set(queue_states(project).values()):
        assert time.monotonic() < deadline, f"the queue did not finish within {seconds:.0f} s"
        time.sleep(3)  # each look is a DVC process of about half a CPU-second, taken from the queue's trainings


@pytest.mark.slow
def test_queued_experiments_run_two_at_a_time_into_the_project_store(reproduced):
    before = {r.info.run_id for r in runs(reproduced)}
    # Both differ from the committed study (200 steps, a validation every 25), so each one trains;
    # up to the test perplexity, which is all that this test reads. 2 threads each, so that the
    # check below sees them divided among the queue's jobs.
    for steps in (10, 30):
        run(
            reproduced,
            "dvc",
            "exp",
            "run",
            "--queue",
            "--name",
            f"steps{steps}",
            "-S",
            f"trainer.max_steps={steps}",
            "-S",
            "trainer.val_every_steps=10",
            "-S",
            "threads=2",
            "evaluate@1-0",
        )
    start_queue(reproduced, jobs=2)
    try:
        wait_for_queue(reproduced)
    finally:
        run(reproduced, "dvc", "queue", "stop", check=False)
    assert queue_states(reproduced) == {"steps10": "Success", "steps30": "Success"}, run(
        reproduced, "dvc", "queue", "logs", "steps10"
    ).stdout

    # The training runs; each experiment also opened a parent run for its study execution.
    new = [r for r in runs(reproduced) if r.info.run_id not in before and "weights.sha256" in r.data.tags]
    assert sorted(int(r.data.params["trainer.max_steps"]) for r in new) == [10, 30]
    # Two jobs on this machine's cores, never more threads than the experiments' `threads` (2),
    # as each job read the queue's two workers from `dvc queue status`.
    assert {r.data.tags["env.threads"] for r in new} == {str(max(1, min(2, cores() // 2)))}
    for name in ("steps10", "steps30"):
        assert "did not say how many workers" not in run(reproduced, "dvc", "queue", "logs", name).stdout
    assert all(r.info.status == "FINISHED" and "test/ppl" in r.data.metrics for r in new)

    shown = json.loads(run(reproduced, "dvc", "exp", "show", "--json").stdout)
    experiments = {exp["name"]: exp for baseline in shown for exp in baseline.get("experiments") or []}
    for name, tracked in [(f"steps{r.data.params['trainer.max_steps']}", r) for r in new]:
        [revision] = experiments[name]["revs"]
        # A plain output in git, not a DVC metric (`dvc metrics show` lists reports/metrics/):
        # read at the experiment's commit.
        metrics = json.loads(run(reproduced, "git", "show", f"{revision['rev']}:metrics/h1-s0.json").stdout)
        assert metrics["test_ppl"] == tracked.data.metrics["test/ppl"]


@pytest.mark.slow
def test_a_killed_queued_training_resumes_from_the_users_checkpoints_and_its_study_run_is_stopped(reproduced):
    # Long enough to be killed after its first checkpoint (step 10) and well before its end: about
    # 8 s of training on the small corpus, against the 1 to 2 s that a look at the queue takes.
    long_run = ["-S", "trainer.max_steps=1000", "-S", "trainer.val_every_steps=10", "-S", "threads=1", "train@1-0"]
    run(reproduced, "dvc", "exp", "run", "--queue", "--name", "killed", *long_run)
    start_queue(reproduced, jobs=1)
    try:
        deadline, next_look = time.monotonic() + 300, time.monotonic()
        while not list((reproduced / "checkpoints").glob("queued-*/h1-s0-*/last.ckpt")):
            assert time.monotonic() < deadline, "no checkpoint in the project's checkpoints/ within 300 s"
            if time.monotonic() > next_look:  # `dvc queue status` takes a second or two
                assert {"Queued", "Running"} & set(queue_states(reproduced).values()), run(
                    reproduced, "dvc", "queue", "logs", "killed"
                ).stdout[-3000:]
                next_look = time.monotonic() + 5
            time.sleep(0.1)
        run(reproduced, "dvc", "queue", "kill", "killed")
        wait_for_queue(reproduced)
        [resume_state] = (reproduced / "checkpoints").glob("queued-*/h1-s0-*/last.ckpt")  # outlived DVC's copy

        run(reproduced, "dvc", "exp", "run", "--queue", "--name", "resumed", *long_run)
        start_queue(reproduced, jobs=1)
        wait_for_queue(reproduced)
    finally:
        run(reproduced, "dvc", "queue", "stop", check=False)
    states = queue_states(reproduced)
    assert (states["killed"], states["resumed"]) == ("Failed", "Success")
    assert "train: resuming h1-s0" in run(reproduced, "dvc", "queue", "logs", "resumed").stdout
    assert not resume_state.exists()  # a finished training removes its resume state

    study_runs = {r.data.tags.get("dvc.exp_name"): r for r in runs(reproduced) if "study.state" in r.data.tags}
    killed = study_runs["killed"]
    assert (killed.info.status, killed.data.tags["study.state"]) == ("KILLED", "stopped")
    [trained] = [
        r for r in runs(reproduced) if "study.state" not in r.data.tags and r.data.params["trainer.max_steps"] == "1000"
    ]
    assert trained.info.status == "FINISHED" and trained.data.tags["mlflow.parentRunId"] == killed.info.run_id
    assert not [r for r in runs(reproduced) if r.info.status == "RUNNING"]
