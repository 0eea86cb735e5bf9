"""What a study prints in the terminal: no Lightning boilerplate, which of the study's trainings
runs ("training k of N") and the study's time left, and closing tables that fit 120 columns."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml
from conftest import ROOT, headstudy_environment

from headstudy.analysis.statistics import verdict
from headstudy.bookkeeping import progress, stage_times
from headstudy.bookkeeping.training_bar import StepProgressBar, later_stages_text
from headstudy.report import results_table

BOILERPLATE = (
    "GPU available",
    "TPU available",
    "HPU available",
    "Seed set",
    "`Trainer.fit` stopped",
    "The `srun` command is available",  # where SLURM is installed
)


@pytest.mark.slow
def test_each_training_of_a_study_says_which_of_n_it_is_without_lightning_boilerplate(small_corpus, tmp_path):
    """Two trainings as DVC runs them (DVC_STAGE set, `--config configs/train/NAME.yaml`, the
    study's models in configs/report.yaml), off a terminal as under a kept log."""
    study = tmp_path / "study"
    (study / "configs" / "train").mkdir(parents=True)
    names = ["h1-s0", "h4-s0"]
    settings = [
        *small_corpus,
        "model=tiny",
        "threads=1",
        "trainer.max_steps=20",
        "trainer.val_every_steps=10",
        f"paths.models={study / 'models'}",
        f"paths.metrics={study / 'metrics'}",
        f"paths.checkpoints={study / 'checkpoints'}",
    ]
    for name, variant in zip(names, ["1", "4"], strict=True):
        composed = subprocess.run(
            ["headstudy", "config", f"variant={variant}", "seed=0", *settings],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        (study / "configs" / "train" / f"{name}.yaml").write_text(composed.stdout)
    (study / "configs" / "report.yaml").write_text(yaml.safe_dump({"models": [{"name": name} for name in names]}))
    environment = headstudy_environment(f"sqlite:///{tmp_path / 'mlflow.db'}")
    outputs = []
    for index, name in enumerate(names, start=1):
        result = subprocess.run(
            ["headstudy", "train", "--config", f"configs/train/{name}.yaml"],
            cwd=study,
            env={**environment, "DVC_STAGE": f"train@{name}"},
            check=True,
            capture_output=True,
            text=True,
        )
        output = result.stdout + result.stderr
        outputs.append(output)
        assert f"train: {name}: training {index} of 2 in the study ({index - 1} trained" in output, output
        assert "study left:" in output, output
        for line in BOILERPLATE:
            assert line not in output, output
    assert "train: study: 1 of 2 trainings left" in outputs[0]
    # How to serve the runs' addresses, and the address, are said once, by the study's report, not
    # by every training: no training line that a 120-column terminal would wrap.
    assert not any("`mlflow ui" in output or "://" in output for output in outputs), outputs
    assert "train: h4-s0: " in outputs[1] and ", model in " in outputs[1], outputs[1]


def test_a_training_by_hand_has_no_study_position(monkeypatch):
    monkeypatch.delenv("DVC_STAGE", raising=False)
    assert progress.study_position(["headstudy", "train", "--config", "configs/train/h4-s0.yaml"]) is None


def test_a_study_position_counts_the_models_trained_with_their_config(tmp_path, monkeypatch):
    """Models without a trained folder are still to train, with their configs' steps."""
    monkeypatch.setenv("DVC_STAGE", "train@4-0")
    train = tmp_path / "configs" / "train"
    train.mkdir(parents=True)
    for name in ("h1-s0", "h4-s0", "h4-s1"):
        (train / f"{name}.yaml").write_text(
            yaml.safe_dump({"name": name, "paths": {"models": str(tmp_path / "models")}, "trainer": {"max_steps": 30}})
        )
    (tmp_path / "configs" / "report.yaml").write_text(
        yaml.safe_dump({"models": [{"name": n} for n in ("h1-s0", "h4-s0", "h4-s1")]})
    )
    position = progress.study_position(["headstudy", "train", "--config", str(train / "h4-s0.yaml")])
    assert position == progress.StudyPosition("h4-s0", 1, 3, 0, 60)
    assert position.header() == "train: h4-s0: training 1 of 3 in the study (0 trained, 2 to train after this one)"


def test_each_kind_of_stage_keeps_its_latest_durations_in_its_pipeline_under_dvc_only(tmp_path, monkeypatch):
    (tmp_path / ".dvc").mkdir()
    pipeline = tmp_path / "studies" / "budget"
    pipeline.mkdir(parents=True)
    monkeypatch.chdir(pipeline)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.setenv("DVC_STAGE", "evaluate@1-0")
    for seconds in range(1, 8):
        stage_times.record("evaluate", seconds)
    assert stage_times.mean_seconds() == {"evaluate": 5.0}  # the latest five: 3 to 7
    saved = json.loads((tmp_path / stage_times.FILE).read_text())
    assert saved == {"studies/budget": {"evaluate": [3, 4, 5, 6, 7]}}
    monkeypatch.delenv("DVC_STAGE")
    stage_times.record("report", 9)  # by hand: no stage of the pipeline
    assert json.loads((tmp_path / stage_times.FILE).read_text()) == saved
    assert stage_times.mean_seconds() == {}


def test_a_times_file_that_cannot_be_written_leaves_the_stages_untimed(tmp_path, monkeypatch):
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "tmp").write_text("a file where DVC's folder belongs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.setenv("DVC_STAGE", "report")
    stage_times.record("report", 3)
    assert stage_times.mean_seconds() == {}


def test_the_study_time_left_counts_the_stages_after_the_trainings_as_long_as_they_took_here(tmp_path, monkeypatch):
    """Both models still to train: each to evaluate, then inspect and the report; evaluate and
    report were timed here before, inspect never."""
    (tmp_path / ".dvc" / "tmp").mkdir(parents=True)
    (tmp_path / stage_times.FILE).write_text(json.dumps({".": {"evaluate": [10, 20], "report": [30], "train": [99]}}))
    (tmp_path / "dvc.yaml").write_text(
        yaml.safe_dump({"stages": dict.fromkeys(("train", "evaluate", "inspect", "report"), {})})
    )
    train = tmp_path / "configs" / "train"
    train.mkdir(parents=True)
    for name in ("h1-s0", "h4-s0"):
        paths = {"models": str(tmp_path / "models"), "metrics": str(tmp_path / "metrics")}
        (train / f"{name}.yaml").write_text(
            yaml.safe_dump({"name": name, "paths": paths, "trainer": {"max_steps": 30}})
        )
    (tmp_path / "configs" / "report.yaml").write_text(
        yaml.safe_dump({"models": [{"name": "h1-s0"}, {"name": "h4-s0"}]})
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DVC_STAGE", "train@4-0")
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.delenv(progress.LANES_VARIABLE, raising=False)
    position = progress.study_position(["headstudy", "train", "--config", "configs/train/h4-s0.yaml"])
    assert position.later == {"evaluate": 2, "inspect": 1, "report": 1}
    assert position.later_seconds == 2 * 15 + 30 and position.untimed == ("inspect",)
    assert later_stages_text(position) == (
        "then 2 evaluations, inspect and report: about 1 min for those timed here before, inspect never timed here"
    )
    assert progress.time_left_text(300, position.untimed) == "over 5 min"
    assert progress.time_left_text(30, position.untimed) == "not known yet"
    assert progress.time_left_text(300) == "about 5 min"


def test_a_trained_model_is_evaluated_again_only_where_its_metrics_are_older_than_it(tmp_path):
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": {}, "evaluate": {}}}))
    (tmp_path / "models" / "h1-s0").mkdir(parents=True)
    (tmp_path / "metrics").mkdir()
    model, metrics = tmp_path / "models" / "h1-s0" / "model.pt", tmp_path / "metrics" / "h1-s0.json"
    model.write_text("weights")
    metrics.write_text("{}")
    os.utime(model, (1_000, 1_000))
    os.utime(metrics, (2_000, 2_000))
    later = progress.stages_after_trainings(tmp_path, 1, [(model, metrics)])
    assert later == {"evaluate": 1}  # h4-s0 only
    os.utime(model, (3_000, 3_000))  # trained again since its evaluation
    assert progress.stages_after_trainings(tmp_path, 1, [(model, metrics)]) == {"evaluate": 2}


@pytest.mark.slow
def test_a_study_run_by_dvc_times_its_stages_and_its_last_training_names_what_follows(reproduced_study):
    project, output = reproduced_study
    kinds = json.loads((project / stage_times.FILE).read_text())["."]
    assert {"train", "evaluate", "report"} <= set(kinds), kinds
    assert "train: study: every model trained; then " in output, output
    assert "not timed here yet" in output, output  # the first run of the project


@pytest.mark.parametrize(("lanes", "minutes"), [(None, 2 + 8), ("1", 2 + 8), ("2", 2 + 4), ("4", 2 + 2)])
def test_the_study_time_left_shares_the_trainings_after_this_one_among_the_lanes(lanes, minutes, monkeypatch):
    """At 100 steps a minute, with 200 of this training's steps left and 800 of other models' after."""
    if lanes is None:
        monkeypatch.delenv(progress.LANES_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(progress.LANES_VARIABLE, lanes)

    class Rate:
        tokens_per_step = 10

        def rate(self, trainer):
            return 100 * self.tokens_per_step / 60

    class Trainer:
        max_steps, global_step = 300, 100

    bar = StepProgressBar(Rate(), position=progress.StudyPosition("h4-s0", 1, 5, 0, 800))
    assert bar.study_time_left(Trainer()) == pytest.approx(minutes * 60)


def test_durations_read_as_minutes():
    assert progress.duration(20) == "under a minute"
    assert progress.duration(41 * 60) == "about 41 min"
    assert progress.duration(65 * 60) == "about 1 h 05 min"


@pytest.mark.parametrize("columns", [200, 120, 80])
def test_the_closing_table_and_verdicts_fit_the_terminal_and_120_columns(columns, monkeypatch, capsys):
    """The report stage's closing table of the committed study, on a wide terminal, a 120-column
    one and an 80-column one: no line wider than the terminal or 120."""
    monkeypatch.setenv("COLUMNS", str(columns))
    summary = json.loads((ROOT / "reports" / "summary.json").read_text())
    progress.print_table(results_table(summary["rows"], summary["baselines"], 1024))
    for comparison in summary["comparisons"]:
        progress.print_wrapped(verdict(comparison))
    printed = capsys.readouterr().out
    assert "Model" in printed and "Bigram" in printed and "Seeds" in printed  # no column dropped
    if columns >= 120:  # unwrapped cells
        low, high = summary["rows"][2]["test_ppl_ci95"]
        assert "4 heads, no output projection" in printed and f"[{low:.2f}, {high:.2f}]" in printed
    assert max(len(line.rstrip()) for line in printed.splitlines()) <= min(columns, 120), printed
