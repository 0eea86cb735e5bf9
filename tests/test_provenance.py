"""What keys a training's resume state and what its MLflow run records of the data's DVC version."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

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
