"""The resolved config files in configs/: what each stage reads, written by the configure stage.

`configs/train/NAME.yaml` holds one model's settings. Its training section (TRAINING_KEYS) is
what the study chooses to shape the weights: it keys the resume checkpoint, becomes the model's
MLflow params and is saved as models/NAME/config.yaml. The rest of the file says where and how
to run: name and paths never change the weights; threads is the environment, as the CPU and the
PyTorch build are, and like them can change the last bits of the weights (CPU kernels split their
sums by thread), so a study fixes it and a reproduction uses the recorded value."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from headstudy.common.errors import ConfigError, first_line

TRAINING_KEYS = ("variant", "seed", "data", "model", "trainer", "optimizer")
HEADER = "# Written by `headstudy configure` from conf/ and params.yaml: edit those, not this file.\n"


def read_config(path: Path) -> DictConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} not found: `dvc repro` writes it (the configure stage)")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML ({first_line(error)}): run `dvc repro` to rewrite it") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} holds no settings: run `dvc repro` to rewrite it")
    return OmegaConf.create(loaded)


def config_text(config: DictConfig) -> str:
    return HEADER + OmegaConf.to_yaml(config, sort_keys=True)


def training_section(config: DictConfig) -> DictConfig:
    return OmegaConf.create({key: OmegaConf.select(config, key) for key in TRAINING_KEYS})


def config_digest(config: DictConfig) -> str:
    """Short hash of the settings that shape the weights, to key resume checkpoints."""
    text = OmegaConf.to_yaml(training_section(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
