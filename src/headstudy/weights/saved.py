"""The model folder a training writes: the weights with the model's settings (model.pt), the
training's settings (config.yaml) and what the training recorded (run.json). Reading it back, and
refusing what does not match, is formats/trained.py's."""

from __future__ import annotations

from pathlib import Path

import torch

from headstudy.common.files import staged_folder, write_json
from headstudy.weights.model import Decoder

MODEL_FILE = "model.pt"
RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"


def write_model(directory: Path, model: Decoder, settings_text: str, record: dict) -> None:
    """The whole folder or nothing: written beside `directory`, then renamed over it."""
    with staged_folder(directory) as staging:
        torch.save({"model_config": model.config.saved(), "state_dict": model.state_dict()}, staging / MODEL_FILE)
        (staging / CONFIG_FILE).write_text(settings_text)
        write_json(staging / RUN_FILE, record)
