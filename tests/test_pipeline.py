"""The real pipeline, end to end: `dvc repro` on a temporary copy of the project with tiny
params, a real MLflow store and real training. The tests in this module share one project
and run in file order, each one a step a user takes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tinyproject import edit_params, environment, make_project, ran_stages, run, runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("study"))


def test_repro_trains_evaluates_and_reports_every_model(project):
    result = run(project, "dvc", "repro")
    assert ran_stages(result.stdout) == {
        "prepare", "baselines", "train@1-0", "evaluate@1-0", "inspect", "report"
    }
    summary = json.loads((project / "reports/summary.json").read_text())
    [row] = summary["rows"]
    assert row["heads"] == 1 and row["seeds"] == [0]
    assert row["params"] == json.loads(run(project, "headstudy", "count", "model=tiny").stdout)["params"]
    metrics = json.loads((project / "metrics/h1-s0.json").read_text())
    assert row["test_ppl"] == [metrics["test_ppl"]]
    assert 1 < metrics["test_ppl"] < 1024
    report = (project / "reports/results.md").read_text()
    assert "One attention head" in report and "Inside the heads" in report
    assert "No comparison: report.compare asks for 1 and 4 heads" in report
    assert (project / "reports/results.html").read_text().count("data:image/png;base64,") == 4
    heads = json.loads((project / "reports/heads.json").read_text())
    assert [(row["heads"], row["head"]) for row in heads["rows"]] == [(1, 0)]

    [tracked] = runs(project)
    assert tracked.info.run_id == row["mlflow_run_ids"][0]
    assert tracked.info.status == "FINISHED"
    assert tracked.data.metrics["test/ppl"] == metrics["test_ppl"]
    assert {"train/loss", "val/ppl", "train/tokens_per_sec", "params"} <= set(tracked.data.metrics)
    assert tracked.data.params["model.n_heads"] == "1" and tracked.data.params["seed"] == "0"
    assert tracked.data.tags["stage"] == "train@1-0"
    assert len(tracked.data.tags["git.commit"]) == 40
    assert tracked.data.tags["data.dvc_md5"].endswith(".dir")


def test_second_repro_runs_nothing(project):
    assert ran_stages(run(project, "dvc", "repro").stdout) == set()


def test_adding_a_head_count_trains_only_the_new_model(project):
    edit_params(project, "study", heads=[1, 4])
    result = run(project, "dvc", "repro")
    assert ran_stages(result.stdout) == {"train@4-0", "evaluate@4-0", "inspect", "report"}
    summary = json.loads((project / "reports/summary.json").read_text())
    assert [row["heads"] for row in summary["rows"]] == [1, 4]
    assert summary["comparison"]["heads_a"] == 1 and summary["comparison"]["heads_b"] == 4
    assert summary["comparison"]["diff_ci95"] == [None, None]
    assert "no claim is made" in (project / "reports/results.md").read_text()  # one seed
    heads = json.loads((project / "reports/heads.json").read_text())
    assert [(row["heads"], row["head"]) for row in heads["rows"]] == [(1, 0), (4, 0), (4, 1), (4, 2), (4, 3)]
    assert heads["claim"] is not None
    assert len(runs(project)) == 2


def test_changing_a_training_parameter_retrains_every_model(project):
    default_lr = yaml.safe_load((project / "params.yaml").read_text())["train"]["lr"]
    edit_params(project, "train", lr=default_lr / 2)
    # A dry run lists the stages whose own inputs changed; the rest follow from their outputs.
    planned = ran_stages(run(project, "dvc", "repro", "--dry").stdout)
    assert planned == {"train@1-0", "train@4-0"}
    edit_params(project, "train", lr=default_lr)
    assert ran_stages(run(project, "dvc", "repro", "--dry").stdout) == set()


def test_sigkill_midway_then_repro_resumes_to_the_same_weights(project):
    uninterrupted = json.loads((project / "models/h1-s0/run.json").read_text())
    shutil.rmtree(project / "models/h1-s0")  # DVC now has to train this model again
    killed = subprocess.Popen(
        ["dvc", "repro", "train@1-0"], cwd=project, env=environment(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    checkpoints = project / "checkpoints"
    deadline = time.monotonic() + 120
    while not list(checkpoints.glob("h1-s0-*/last.ckpt")):
        assert killed.poll() is None, "training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.01)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (project / "models/h1-s0").exists()

    result = run(project, "dvc", "repro")
    assert "resuming h1-s0" in result.stdout
    resumed = json.loads((project / "models/h1-s0/run.json").read_text())
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    assert resumed["mlflow_run_id"] != uninterrupted["mlflow_run_id"]
    assert not any(r.info.status == "RUNNING" for r in runs(project))
    assert not list(checkpoints.glob("h1-s0-*"))


def test_reproduce_an_untouched_run_is_bit_identical(project):
    run_id = json.loads((project / "metrics/h4-s0.json").read_text())["mlflow_run_id"]
    result = run(project, "headstudy", "reproduce", run_id)
    assert "weights sha256: identical" in result.stdout
    assert "test/ppl: identical" in result.stdout
    reproduction = [r for r in runs(project) if r.data.tags.get("reproduces") == run_id]
    assert len(reproduction) == 1
    summary = json.loads((project / "reports/summary.json").read_text())
    assert reproduction[0].info.run_id not in sum((row["mlflow_run_ids"] for row in summary["rows"]), [])


def test_reproduce_refuses_altered_prepared_data(project):
    run_id = json.loads((project / "metrics/h4-s0.json").read_text())["mlflow_run_id"]
    stats = project / "data/prepared/stats.json"
    stats.write_text(stats.read_text() + " ")
    result = run(project, "headstudy", "reproduce", run_id, check=False)
    assert result.returncode != 0
    assert "prepared token data differs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
