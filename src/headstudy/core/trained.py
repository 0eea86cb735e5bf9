"""A trained model on disk: models/<name>/ holds the weights (model.pt), the resolved config
(config.yaml) and what the training recorded (run.json). Plain PyTorch: no Lightning needed
to read it back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from headstudy.core.config import run_name
from headstudy.core.model import Decoder, ModelConfig

MODEL_FILE = "model.pt"
RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"


def model_dir(config: DictConfig) -> Path:
    return Path(config.paths.models) / run_name(config)


def read_run(directory: Path) -> dict:
    return json.loads((Path(directory) / RUN_FILE).read_text())


def write_model(directory: Path, model: Decoder, config: DictConfig, record: dict) -> None:
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    torch.save(
        {"model_config": OmegaConf.to_container(config.model), "state_dict": model.state_dict()},
        staging / MODEL_FILE,
    )
    (staging / CONFIG_FILE).write_text(OmegaConf.to_yaml(config))
    (staging / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


def load_model(directory: Path) -> Decoder:
    saved = torch.load(Path(directory) / MODEL_FILE, map_location="cpu", weights_only=True)
    model = Decoder(ModelConfig(**saved["model_config"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval()
