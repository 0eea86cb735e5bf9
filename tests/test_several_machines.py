"""A sweep over several machines, as docs/scaling.md describes it, with two local clones for
the machines: each clone trains its share of the study's models as a DVC experiment and pushes
it to a shared git remote and a shared DVC remote; a third clone pulls both experiments and one
`dvc repro` evaluates and reports every model without training any of them again. All three log
to one MLflow store, as machines would to one `mlflow server`."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tinyproject import SMALL_CORPUS, commit, environment, make_project, ran_stages, run

from headstudy.bookkeeping import store

pytestmark = pytest.mark.slow

TINY = {
    "study": {"variants": [1], "seeds": [0, 1]},
    "data": SMALL_CORPUS,
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 20, "val_every_steps": 10},
}
# Each machine's share of the study: a DVC experiment of its train stages.
PARTS = {"part-a": ["train@1-0"], "part-b": ["train@1-1"]}


def clone(git_remote: Path, folder: Path) -> Path:
    run(folder.parent, "git", "clone", "-q", str(git_remote), str(folder))
    # `dvc exp run` commits the experiment: an identity of its own on every machine.
    run(folder, "git", "config", "user.name", "machine")
    run(folder, "git", "config", "user.email", "machine@example.org")
    return folder


def train_share(machine: Path, part: str, env: dict) -> None:
    """One machine's share: its train stages as the DVC experiment `part`, then pushed."""
    run(machine, "dvc", "pull", "--allow-missing", env=env)  # the commit's own outputs: none here
    run(machine, "dvc", "exp", "run", "--name", part, *PARTS[part], env=env)
    run(machine, "dvc", "exp", "push", "origin", part, env=env)


def gather(gatherer: Path, env: dict) -> str:
    """docs/scaling.md's gathering: pull every share, record each one's trainings in the local
    run-cache (DVC 3.67 restores a stage from the run-cache only with all its outputs in the
    local cache, and neither `dvc exp push` nor `--run-cache` sends the training curve, an output
    with `cache: false`), then one `dvc repro`. Returns its output."""
    run(gatherer, "dvc", "pull", "--allow-missing", env=env)  # the commit's own outputs: none here
    run(gatherer, "dvc", "exp", "pull", "origin", *PARTS, env=env)
    for part, stages in PARTS.items():
        run(gatherer, "dvc", "exp", "branch", part, f"sweep-{part}", env=env)
        run(gatherer, "git", "restore", f"--source=sweep-{part}", "--", ".")
        run(gatherer, "dvc", "checkout", "--with-deps", *stages, env=env)
        run(gatherer, "dvc", "commit", "--force", *stages, env=env)
    return run(gatherer, "dvc", "repro", env=env).stdout


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict:
    """The tiny study's two trainings on two clones, gathered on a third; all log to one store."""
    tmp_path = tmp_path_factory.mktemp("machines")
    origin = make_project(tmp_path / "origin", TINY)
    git_remote = tmp_path / "git-remote.git"
    run(tmp_path, "git", "init", "-q", "--bare", str(git_remote))
    run(origin, "dvc", "remote", "add", "--default", "shared", str(tmp_path / "dvc-remote"))
    commit(origin, "the DVC remote")
    run(origin, "git", "push", "-q", str(git_remote), "HEAD")
    store_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**environment(), "MLFLOW_TRACKING_URI": store_uri}
    with pytest.MonkeyPatch.context() as patch:
        # The store exists before the machines start, as an `mlflow server` would: two clones
        # that create and migrate a new SQLite file together take turns under its lock, which
        # a busy machine can hold for minutes. Artifacts beside it, in no clone.
        patch.chdir(tmp_path)
        patch.setenv("MLFLOW_TRACKING_URI", store_uri)
        store.check_store()

    machines = {part: clone(git_remote, tmp_path / part) for part in PARTS}
    gatherer = clone(git_remote, tmp_path / "gatherer")
    with ThreadPoolExecutor(len(machines)) as pool:  # the machines train side by side
        list(pool.map(lambda part: train_share(machines[part], part, env), PARTS))
    return {"gatherer": gatherer, "store": store_uri, "output": gather(gatherer, env)}


def test_a_sweep_trained_on_two_clones_is_gathered_into_one_report_without_training_again(sweep):
    gatherer, output = sweep["gatherer"], sweep["output"]
    trains = {stage for stages in PARTS.values() for stage in stages}
    assert ran_stages(output) == {"baselines", "evaluate@1-0", "evaluate@1-1", "inspect", "report"}, output
    for stage in trains:  # the last share's trainings are in its dvc.lock, the others in the run-cache
        assert (
            f"Stage '{stage}' is cached - skipping run, checking out outputs" in output
            or f"Stage '{stage}' didn't change, skipping" in output
        ), output
    assert "Stage 'train@1-0' is cached - skipping run" in output
    [row] = json.loads((gatherer / "reports/summary.json").read_text())["rows"]
    assert row["variant"] == "1" and row["seeds"] == [0, 1]

    # One training run per model in the shared store, each from its machine's experiment,
    # with the weights the gatherer reports on and the test perplexity its evaluate logged.
    client = MlflowClient(sweep["store"])
    experiment = client.get_experiment_by_name("headstudy")
    trained = [r for r in client.search_runs([experiment.experiment_id]) if "weights.sha256" in r.data.tags]
    assert sorted(r.info.run_name for r in trained) == ["h1-s0", "h1-s1"]
    for tracked in trained:
        name = tracked.info.run_name
        assert tracked.data.tags["dvc.exp_name"] == {"h1-s0": "part-a", "h1-s1": "part-b"}[name]
        record = json.loads((gatherer / f"models/{name}/run.json").read_text())
        assert tracked.data.tags["weights.sha256"] == record["weights_sha256"]
        metrics = json.loads((gatherer / f"metrics/{name}.json").read_text())
        assert tracked.data.metrics["test/ppl"] == metrics["test_ppl"]


def test_a_gatherer_whose_store_lacks_the_training_runs_evaluates_but_warns_that_test_ppl_is_not_logged(sweep):
    gatherer = sweep["gatherer"]
    before = (gatherer / "metrics/h1-s0.json").read_bytes()
    # Without MLFLOW_TRACKING_URI: the gatherer's own mlflow.db, which never saw the trainings.
    result = run(gatherer, "dvc", "repro", "--force", "--single-item", "evaluate@1-0")
    assert ran_stages(result.stdout) == {"evaluate@1-0"}
    assert "evaluate: warning: no finished MLflow run h1-s0 with weights.sha256=" in result.stderr, result.stderr
    assert f"in sqlite:///{gatherer / 'mlflow.db'}: test/ppl not logged" in result.stderr, result.stderr
    assert (gatherer / "metrics/h1-s0.json").read_bytes() == before
