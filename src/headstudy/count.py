"""`headstudy count [overrides]`: the model's parameters, without training."""

from __future__ import annotations

import json

import torch

from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder, parameter_breakdown


def count(overrides: list[str]) -> dict:
    config = model_config(compose_config(overrides))
    with torch.device("meta"):  # shapes without storage: the 4,096-wide preset would need 26 GB
        model = Decoder(config)
    parts = parameter_breakdown(model)
    return {"params": sum(parts.values()), "parts": parts}


def main(overrides: list[str]) -> None:
    print(json.dumps(count(overrides), indent=2))
