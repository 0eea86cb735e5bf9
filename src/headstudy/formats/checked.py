"""A trained model read back for scoring: the one its config names, with the weights its training
recorded. evaluate and inspect read models only through this."""

from __future__ import annotations

from omegaconf import DictConfig

from headstudy.formats.errors import ConfigError
from headstudy.formats.trained import MODEL_FILE, RUN_FILE, load_trained, model_dir
from headstudy.weights.model import Decoder, weights_sha256


def load_checked(config: DictConfig) -> tuple[Decoder, dict]:
    """load_trained's model and run.json, refused unless model.pt's weights hash to what run.json
    recorded at training: a model.pt changed afterwards would still load and be scored silently."""
    model, record = load_trained(config)
    found, recorded = weights_sha256(model), record.get("weights_sha256")
    if found != recorded:
        directory = model_dir(config)
        raise ConfigError(f"{directory / MODEL_FILE}: its weights hash to {found[:12]}..., but "
                          f"{directory / RUN_FILE} records {str(recorded)[:12]}... for this model: the file changed "
                          "after training; train it again (dvc repro)")
    return model, record
