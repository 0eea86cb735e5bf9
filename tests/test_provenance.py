"""What keys a training's resume state and what its MLflow run records of the data's DVC version."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from headstudy.bookkeeping import provenance
from headstudy.bookkeeping.provenance import dvc_locked_md5
from headstudy.formats.runconfig import config_digest
from headstudy.settings.compose import compose_config


@pytest.mark.parametrize(
    "override",
    [
        "threads=3",
        "inspect.batch_size=3",
        "paths.reports=elsewhere",
        "paths.checkpoints=elsewhere",
        "baselines.add_k=0.5",
    ],
)
def test_settings_of_later_stages_keep_a_killed_trainings_resume_key(in_project, override):
    key, value = override.split("=")
    changed, default = compose_config([override]), compose_config([])
    # The override must change the composed config, or the case could not fail.
    assert str(OmegaConf.select(changed, key)) == value != str(OmegaConf.select(default, key))
    assert config_digest(changed) == config_digest(default)


@pytest.mark.parametrize(
    "override",
    [
        "seed=1",
        "model.n_heads=4",
        "variant=4-nomix",
        "optimizer.lr=0.01",
        "trainer.max_steps=2999",
        "data.batch_size=16",
    ],
)
def test_settings_that_shape_the_weights_change_the_resume_key(in_project, override):
    assert config_digest(compose_config([override])) != config_digest(compose_config([]))


def test_a_study_under_studies_records_the_md5_of_the_projects_prepared_data(tmp_path, monkeypatch):
    (tmp_path / ".dvc").mkdir()
    lock = {
        "schema": "2.0",
        "stages": {"prepare": {"cmd": "headstudy prepare", "outs": [{"path": "data/prepared", "md5": "0123.dir"}]}},
    }
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    study = tmp_path / "studies" / "sweep"
    study.mkdir(parents=True)
    (study / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {}}))
    monkeypatch.chdir(study)
    assert dvc_locked_md5(Path("../../data/prepared")) == "0123.dir"
    assert dvc_locked_md5(Path("../../data/other")) == "none"
    monkeypatch.chdir(tmp_path)
    assert dvc_locked_md5(Path("data/prepared")) == "0123.dir"


def git_repository(folder: Path) -> None:
    (folder / "src").mkdir()
    (folder / "src/code.py").write_text("x = 1\n")
    for sub in ("configs/train", "studies/a/configs/train", "fingerprints"):
        (folder / sub).mkdir(parents=True)
    for path in GENERATED:
        (folder / path).write_text("old\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run(["git", *command], cwd=folder, check=True, env={**os.environ, **env})


GENERATED = ("configs/train/h1-s0.yaml", "studies/a/configs/train/h1-s0.yaml", "fingerprints/train.txt")


def test_generated_configs_and_fingerprints_do_not_make_a_run_dirty_and_code_does(tmp_path, monkeypatch):
    git_repository(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEADSTUDY_CONF", str(tmp_path / "conf"))
    for path in GENERATED:
        (tmp_path / path).write_text("rewritten by configure or fingerprint\n")
    assert provenance.git_state()["dirty"] == "false"
    (tmp_path / "src/code.py").write_text("x = 2\n")
    assert provenance.git_state()["dirty"] == "true"


def test_a_study_in_a_temporary_copy_names_the_users_repository_as_its_folder(tmp_path, monkeypatch):
    """dvc exp run --temp and the queue run the stages in a copy that DVC deletes, and name the
    user's repository in DVC_ROOT."""
    copy, repository = tmp_path / "copy", tmp_path / "repository"
    (copy / ".dvc").mkdir(parents=True)
    (copy / "studies/a").mkdir(parents=True)
    monkeypatch.chdir(copy / "studies/a")
    monkeypatch.setenv("DVC_ROOT", str(repository))
    assert provenance.study_identity()["study.folder"] == str(repository.resolve() / "studies/a")


@pytest.mark.slow
def test_a_training_in_a_pipeline_puts_its_machine_on_record_beside_the_lock(reproduced_study):
    from headstudy.bookkeeping.machines import this_machine

    project, _ = reproduced_study
    record = json.loads((project / "trained-on.json").read_text())
    here = this_machine(threads=1)
    assert sorted(record["models"]) == ["h1-mix-s0", "h1-s0"]
    for name, entry in record["models"].items():
        run_record = json.loads((project / "models" / name / "run.json").read_text())
        assert entry["weights_sha256"] == run_record["weights_sha256"]
        [machine] = entry["machines"]
        for key in ("cpu", "vendor", "family", "model", "capability", "torch", "kernel_selectors", "accelerator"):
            assert machine[key] == here[key], key
        assert machine["source"] == "training" and machine["threads"] == 1


def test_a_report_names_the_machine_kinds_behind_its_models_and_where_the_record_came_from():
    from headstudy.formats.machines import trained_on_line

    amd = {"cpu": "AMD EPYC", "family": 25, "model": 17, "source": "training"}
    xeon = {"cpu": "Intel Xeon", "family": 6, "model": 106, "source": "dated record: commit abc1234 (2026-12-01)"}
    record = {
        "models": {
            "h1-s1": {"weights_sha256": "a", "machines": [amd]},
            "h4-s1": {"weights_sha256": "b", "machines": [amd, xeon]},
            "h4-s2": {"weights_sha256": None, "machines": [xeon]},
        }
    }
    assert trained_on_line(record, ["h1-s1", "h4-s1", "h4-s2", "h1-s2"]) == (
        "Trained on: AMD EPYC (family 25, model 17), 2 models; Intel Xeon (family 6, model 106), 2 models; "
        "not on record, 1 model (from dated record: commit abc1234 (2026-12-01))."
    )
