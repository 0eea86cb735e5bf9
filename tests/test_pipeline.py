"""The real pipeline, end to end: `dvc repro` on a temporary copy of the project with tiny
params, a real MLflow store and real training. The module works in a copy of the test run's
reproduced tiny study (conftest's `reproduced_study`, committed); each test starts from that
state and the `project` fixture puts it back afterwards (git checkout and clean, dvc checkout), so
the tests pass alone and in any order. The MLflow store alone keeps what every test added: the
tests look only at the runs they made."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import headstudy_here
from mlflow.tracking import MlflowClient
from tinyproject import copy_project, edit_params, environment, ran_stages, run, runs

from headstudy import inspect as inspect_stage
from headstudy.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reproduced(reproduced_study, tmp_path_factory) -> tuple[Path, str]:
    """The tiny study after its first `dvc repro`, committed; and that repro's output."""
    shared, output = reproduced_study
    return copy_project(shared, tmp_path_factory.mktemp("study") / "project"), output


@pytest.fixture
def project(reproduced) -> Path:
    """The reproduced study, as committed; put back so after the test."""
    folder, _ = reproduced
    assert run(folder, "git", "status", "--porcelain").stdout == ""
    yield folder
    run(folder, "git", "checkout", "-q", "--", ".")
    run(folder, "git", "clean", "-qfd")
    run(folder, "dvc", "checkout", "-q", "--force")


def test_repro_trains_evaluates_and_reports_every_variant(reproduced, project):
    _, output = reproduced
    assert ran_stages(output) == {
        "fingerprint",
        "configure",
        "prepare",
        "baselines",
        "train@1-0",
        "train@1-mix-0",
        "evaluate@1-0",
        "evaluate@1-mix-0",
        "inspect",
        "report",
    }
    summary = json.loads((project / "reports/summary.json").read_text())
    one, mixed = summary["rows"]
    assert (one["variant"], mixed["variant"]) == ("1", "1-mix") and one["seeds"] == [0]
    assert one["params"] == json.loads(run(project, "headstudy", "count", "model=tiny").stdout)["params"]
    assert (
        mixed["params"]
        == json.loads(run(project, "headstudy", "count", "model=tiny", "variant=1-mix").stdout)["params"]
    )
    assert mixed["params"] > one["params"]
    metrics = json.loads((project / "metrics/h1-s0.json").read_text())
    assert one["test_ppl"] == [metrics["test_ppl"]]
    assert 1 < metrics["test_ppl"] < 1024
    report = (project / "reports/results.md").read_text()
    assert "| 1 head + output projection |" in report and "Inside the heads" in report and "## Budget" in report
    assert "No comparison: none of the pairs in report.compare" in report
    # budget evidence, validation curves, test perplexity; two attention maps, head scores
    # validation curves, test perplexity; two attention maps, head scores (no comparison: one
    # seed; no budget evidence: the long runs behind it are not at this study's budget)
    assert (project / "reports/results.html").read_text().count("data:image/png;base64,") == 5
    heads = json.loads((project / "reports/heads.json").read_text())
    assert [(row["variant"], row["rank"]) for row in heads["rows"]] == [("1", 0), ("1-mix", 0)]

    [tracked] = [r for r in runs(project) if r.info.run_name == "h1-s0"]
    assert tracked.info.status == "FINISHED"
    assert tracked.data.metrics["test/ppl"] == metrics["test_ppl"]
    assert {"train/loss", "val/ppl", "train/tokens_per_sec", "model/parameter_count"} <= set(tracked.data.metrics)
    assert tracked.data.params["model.n_heads"] == "1" and tracked.data.params["seed"] == "0"
    assert tracked.data.tags["stage"] == "train@1-0"
    assert len(tracked.data.tags["git.commit"]) == 40
    assert tracked.data.tags["data.dvc_md5"].endswith(".dir")
    # The study run's artifacts as MLflow lists them (folders first, then by name): the forest plot
    # and the results page first.
    [study_run] = [r for r in runs(project) if r.data.tags.get("study.state") == "closed"]
    listed = MlflowClient(f"sqlite:///{project / 'mlflow.db'}").list_artifacts(study_run.info.run_id)
    assert [(item.path, item.is_dir) for item in listed] == [
        ("comparisons.png", False),
        ("results.html", False),
        ("results.md", False),
        ("summary.json", False),
    ]


def test_inspect_writes_the_same_heads_file_with_models_measured_in_worker_processes(reproduced, project, monkeypatch):
    _, output = reproduced
    # The tiny study's models take milliseconds each: no worker process would pay for its start.
    assert "inspect: model 2 of 2 (1 at a time)" in output
    in_its_own = (project / "reports/heads.json").read_bytes()
    spread, pools = inspect_stage.in_processes, []

    def in_two_workers(function, jobs_to_run, workers):
        pools.append(len(jobs_to_run))
        return spread(function, jobs_to_run, 2)

    monkeypatch.setattr(inspect_stage, "in_processes", in_two_workers)
    monkeypatch.chdir(project)
    monkeypatch.setenv("DVC_STAGE", "inspect")
    threads = torch.get_num_threads()
    try:
        main(["inspect", "--config", "configs/inspect.yaml"])
    finally:
        torch.set_num_threads(threads)
    assert pools == [1, 1]  # the second model, then the fair null, each in a spawned worker
    assert (project / "reports/heads.json").read_bytes() == in_its_own


def test_second_repro_runs_nothing(project):
    assert ran_stages(run(project, "dvc", "repro").stdout) == set()


def stale_stages(project: Path) -> set[str]:
    """The stages `dvc status` calls changed (a stage name per key of its JSON output)."""
    return set(json.loads(run(project, "dvc", "status", "--json").stdout))


def edited(path: Path, addition: str, replacing: tuple[str, str] = ("", "")):
    """Append to a file, and replace a piece of it, for the length of a `with` block."""

    class Edit:
        def __enter__(self):
            self.text = path.read_text()
            old, new = replacing
            assert old in self.text, f"{path} no longer holds {old!r}"
            path.write_text(self.text.replace(old, new) + addition)

        def __exit__(self, *exc):
            path.write_text(self.text)

    return Edit()


def test_a_comment_or_docstring_anywhere_retrains_nothing(project):
    """Only the fingerprint stage, which reads the sources, reruns; its files come out the same."""
    package = project / "src/headstudy"
    with (
        edited(package / "bookkeeping/tracking.py", '\n"""A docstring that changes nothing."""\n'),
        edited(package / "analysis/statistics.py", "\n# a comment\n"),
        edited(package / "weights/model.py", "\n# a comment\n"),
        edited(package / "cli.py", "\n# a comment\n"),
    ):
        assert stale_stages(project) == {"fingerprint"}
        assert ran_stages(run(project, "dvc", "repro").stdout) == {"fingerprint"}
        assert stale_stages(project) == set()


def test_a_change_to_the_model_code_makes_every_model_stale(project):
    # A constant that training never reads changes no weight, so the edit is in the loss itself.
    loss = "reduction=reduction)"
    model = project / "src/headstudy/weights/model.py"
    with edited(model, "", replacing=(loss, "reduction=reduction, label_smoothing=0.0)")):
        run(project, "dvc", "repro", "fingerprint")
        stale = stale_stages(project)
    assert {"train@1-0", "train@1-mix-0"} <= stale
    assert not {"prepare", "baselines"} & stale


def test_a_new_preset_the_study_does_not_use_retrains_nothing(project):
    preset = project / "conf/model/wide.yaml"
    preset.write_text((project / "conf/model/tiny.yaml").read_text().replace("width: 32", "width: 64"))
    assert ran_stages(run(project, "dvc", "repro").stdout) == {"configure"}  # its files come out the same
    assert stale_stages(project) == set()


def test_a_refused_study_deletes_no_output(project):
    """configure runs first and refuses before DVC has deleted any other stage's outputs."""
    before = {path: path.read_bytes() for path in (project / "reports").rglob("*") if path.is_file()}
    params = (project / "params.yaml").read_text()
    edit_params(project, "trainer", max_steps=10)  # shorter than val_every_steps: no validation
    result = run(project, "dvc", "repro", check=False)
    assert result.returncode != 0
    assert "trainer.val_every_steps=25 is more than trainer.max_steps=10" in result.stdout + result.stderr
    (project / "params.yaml").write_text(params)
    assert {path: path.read_bytes() for path in (project / "reports").rglob("*") if path.is_file()} == before
    assert (project / "configs/train/h1-s0.yaml").is_file()


def test_a_report_refused_through_dvc_leaves_the_last_report_in_place(project):
    """A NaN in a validation curve: the report stage refuses in one line, after DVC would have
    deleted its outputs, and the committed report is still there, byte for byte."""
    before = {path: path.read_bytes() for path in (project / "reports").rglob("*") if path.is_file()}
    curve = project / "metrics/curves/h1-s0.csv"
    lines = curve.read_text().splitlines()
    lines[-1] = ",".join([*lines[-1].split(",")[:-1], "nan"])
    curve.write_text("\n".join(lines) + "\n")
    result = run(project, "dvc", "repro", "-s", "report", check=False)
    assert result.returncode != 0
    assert "headstudy report: error: " in result.stderr, result.stderr
    assert {path: path.read_bytes() for path in (project / "reports").rglob("*") if path.is_file()} == before


def test_adding_a_head_count_trains_only_the_new_model(project):
    earlier = {r.info.run_id for r in runs(project)}
    edit_params(project, "study", variants=[1, "1-mix", 4])
    edit_params(project, "report", compare=[[1, 4], ["1-mix", 4]])  # configure refuses pairs of absent variants
    result = run(project, "dvc", "repro")
    assert ran_stages(result.stdout) == {"configure", "train@4-0", "evaluate@4-0", "inspect", "report"}
    summary = json.loads((project / "reports/summary.json").read_text())
    assert [row["variant"] for row in summary["rows"]] == ["1", "1-mix", "4"]
    assert [(c["variant_a"], c["variant_b"]) for c in summary["comparisons"]] == [("1", "4"), ("1-mix", "4")]
    assert summary["comparisons"][0]["relative_ci95"] == [None, None]  # one seed
    # Tiny models after 200 steps are far above the bigram: the report says so instead of an answer.
    assert summary["no_answer"].startswith("No answer: the models are undertrained")
    assert f"> **{summary['no_answer']}**" in (project / "reports/results.md").read_text()
    heads = json.loads((project / "reports/heads.json").read_text())
    assert [(row["variant"], row["rank"]) for row in heads["rows"]] == [
        ("1", 0),
        ("1-mix", 0),
        ("4", 0),
        ("4", 1),
        ("4", 2),
        ("4", 3),
    ]
    # the spotlight measure against its null, for the one layer, at every threshold of the sweep
    assert {row["layer"] for row in heads["spotlight"]["rows"]} == {0}
    assert len({row["threshold"] for row in heads["spotlight"]["rows"]}) >= 3
    added = [r.info.run_name for r in runs(project) if r.info.run_id not in earlier]
    assert [name for name in added if name.startswith("h")] == ["h4-s0"]


def test_changing_the_budget_retrains_every_model(project):
    steps = yaml.safe_load((project / "params.yaml").read_text())["trainer"]["max_steps"]
    edit_params(project, "trainer", max_steps=steps // 2)
    # A dry run lists the stages whose own inputs changed; the rest follow from their outputs.
    planned = ran_stages(run(project, "dvc", "repro", "--dry").stdout)
    assert planned == {"configure"}  # the rest follows from its new files, which --dry does not write
    run(project, "dvc", "repro", "configure")
    assert {"train@1-0", "train@1-mix-0"} <= stale_stages(project)
    edit_params(project, "trainer", max_steps=steps)
    run(project, "dvc", "repro", "configure")
    assert stale_stages(project) == set()


def test_sigkill_midway_then_repro_resumes_to_the_same_weights(project):
    uninterrupted = json.loads((project / "models/h1-s0/run.json").read_text())
    earlier = {r.info.run_id for r in runs(project)}
    shutil.rmtree(project / "models/h1-s0")
    # Forced, and this stage alone: DVC would otherwise check the model out of its cache
    # instead of training it, and force the stages upstream too.
    killed = subprocess.Popen(
        ["dvc", "repro", "--force", "--single-item", "train@1-0"],
        cwd=project,
        env=environment(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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

    result = run(project, "dvc", "repro", "--force", "--single-item", "train@1-0")
    assert "resuming h1-s0" in result.stdout
    # The model folder holds only what the inputs determine: the same bytes, though the
    # training ran as another MLflow run, killed and resumed. The resumed training continues the
    # killed one's run (docs/refusals.md), so the two make one new run, finished.
    assert json.loads((project / "models/h1-s0/run.json").read_text()) == uninterrupted
    trainings = [r for r in runs(project) if r.info.run_name == "h1-s0" and r.info.run_id not in earlier]
    assert [(r.info.status, r.data.tags["weights.sha256"]) for r in trainings] == [
        ("FINISHED", uninterrupted["weights_sha256"])
    ]
    assert not any(r.info.status == "RUNNING" for r in runs(project))
    assert not list(checkpoints.glob("h1-s0-*"))


def training_run_id(project: Path, name: str) -> str:
    """The latest finished training of the committed model NAME (not a reproduction, not an
    experiment's): its weights are those of models/NAME."""
    weights = json.loads((project / "models" / name / "run.json").read_text())["weights_sha256"]
    trainings = [
        r
        for r in runs(project)
        if r.info.run_name == name
        and r.info.status == "FINISHED"
        and r.data.tags.get("weights.sha256") == weights
        and not {"reproduces", "dvc.exp_name"} & set(r.data.tags)
    ]
    return max(trainings, key=lambda r: r.info.start_time).info.run_id


def test_reproduce_an_untouched_run_is_bit_identical(project):
    run_id = training_run_id(project, "h1-mix-s0")
    summary = (project / "reports/summary.json").read_bytes()
    result = headstudy_here(project, "reproduce", run_id)
    assert result.returncode == 0, result.stderr
    assert "weights sha256: identical" in result.stdout
    assert "test/ppl: identical" in result.stdout
    reproduction = [r for r in runs(project) if r.data.tags.get("reproduces") == run_id]
    assert len(reproduction) == 1
    assert (project / "reports/summary.json").read_bytes() == summary  # a reproduction never enters the report


def test_reproduce_refuses_altered_prepared_data(project):
    run_id = training_run_id(project, "h1-mix-s0")
    stats = project / "data/prepared/stats.json"
    stats.write_text(stats.read_text() + " ")
    result = headstudy_here(project, "reproduce", run_id)
    assert result.returncode != 0
    assert "prepared token data differs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_quick_experiment_leaves_the_committed_results_untouched(project):
    """The README's quick way in: `dvc exp run --temp` trains in a copy, so the workspace keeps
    the committed study, and the experiment is listed by `dvc exp show`."""
    run(project, "dvc", "exp", "run", "--temp", "-n", "quick", "-S", "study.variants=[1]", "-S", "trainer.max_steps=50")
    assert run(project, "git", "status", "--porcelain").stdout == ""
    assert "quick" in run(project, "dvc", "exp", "list", "--name-only").stdout.split()
    quick = [r for r in runs(project) if r.data.tags.get("dvc.exp_name") == "quick"]
    assert quick and all(r.info.status == "FINISHED" for r in quick)
