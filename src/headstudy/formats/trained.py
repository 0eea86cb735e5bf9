"""A trained model on disk: models/<name>/ holds the weights (model.pt), the training config
(config.yaml: the training section of configs/train/<name>.yaml) and what the training recorded
(run.json): name, variant, heads, seed, learning rate, parameter count, the weights' sha256 and
the sha256 of the prepared data it was trained on. Only content that the same inputs reproduce
bit for bit: the MLflow run id and the measured speed live in MLflow. Plain PyTorch: no
Lightning needed to read it back. load_trained, the one way evaluate and inspect read a model,
hashes its weights on every load and refuses any that differ from run.json's record."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from headstudy.common.errors import ConfigError, first_line
from headstudy.common.files import read_json
from headstudy.common.trees import flatten
from headstudy.formats.prepared import check_vocab_size, digest_of, prepared_file_hashes
from headstudy.formats.runconfig import training_section
from headstudy.weights.model import Decoder, weights_sha256
from headstudy.weights.saved import CONFIG_FILE, MODEL_FILE, RUN_FILE
from headstudy.weights.settings import ModelConfig


def model_dir(config: DictConfig) -> Path:
    return Path(config.paths.models) / config.name


def read_run(directory: Path) -> dict:
    path = Path(directory) / RUN_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: no trained model in {directory} (train it first: dvc repro)")
    return read_json(path, remedy="train the model again")


def data_record(prepared: Path) -> dict:
    """The prepared data a model is trained on, as run.json records it."""
    files = prepared_file_hashes(prepared)
    return {"data_sha256": digest_of(files), "data_files": files}


def settings_text(config: DictConfig) -> str:
    """config.yaml of the model folder: the training section, as the config files hold it."""
    return OmegaConf.to_yaml(training_section(config), sort_keys=True)


def training_record(config: DictConfig, model: Decoder, data: dict) -> dict:
    """run.json: what the same inputs always reproduce, nothing about this one execution."""
    return {
        "name": config.name,
        "variant": config.variant,
        "heads": config.model.n_heads,
        "seed": config.seed,
        "lr": config.optimizer.lr,
        "params": sum(p.numel() for p in model.parameters()),
        "weights_sha256": weights_sha256(model),
        **data,
    }


def load_model(directory: Path, weights: str | None = None) -> Decoder:
    """The saved model, refused unless its weights hash to `weights` (run.json's record) when given:
    a model.pt changed after training would otherwise load and be scored silently."""
    path = Path(directory) / MODEL_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: no trained model in {directory} (train it first: dvc repro)")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        model = Decoder(ModelConfig(**saved["model_config"]))
        model.load_state_dict(saved["state_dict"])
    except (
        RuntimeError,
        OSError,
        EOFError,
        KeyError,
        TypeError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
    ) as error:
        raise ConfigError(f"{path} is not a readable headstudy model ({first_line(error)}): train it again") from None
    found = weights_sha256(model)
    if weights is not None and found != weights:
        raise ConfigError(
            f"{path}: its weights hash to {found[:12]}..., but {Path(directory) / RUN_FILE} "
            f"records {weights[:12]}... for this model: the file changed after training; "
            "train it again (dvc repro)"
        )
    return model.eval()


def load_trained(config: DictConfig) -> tuple[Decoder, dict]:
    """The model that `config` names (paths.models/NAME) and its run.json, refused unless it is
    the model config asks for, its weights are the ones its training recorded, and it was
    trained on the data now at paths.prepared. Evaluate and inspect read models only through this."""
    directory = model_dir(config)
    record = read_run(directory)
    check_saved_config(directory, config)
    check_vocab_size(Path(config.paths.prepared), config.model.vocab_size, "model.vocab_size")
    check_trained_data(directory, record, Path(config.paths.prepared))
    if not isinstance(record.get("weights_sha256"), str):
        raise ConfigError(f"{directory / RUN_FILE} records no weights_sha256: train the model again")
    return load_model(directory, record["weights_sha256"]), record


def check_saved_config(directory: Path, config: DictConfig) -> None:
    """The saved model's training config must be the requested one: a model folder swapped or
    trained with other settings must not be scored under this name."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: {directory} is not a complete trained model (train it again)")
    try:
        saved = flatten(OmegaConf.to_container(OmegaConf.load(path)))
    except (OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError, OSError) as error:
        raise ConfigError(f"{path} is not a readable config ({first_line(error)}): train the model again") from None
    asked = flatten(OmegaConf.to_container(training_section(config)))
    differing = [
        f"{key} (saved {saved.get(key)!r}, requested {asked.get(key)!r})"
        for key in sorted(set(saved) | set(asked))
        if str(saved.get(key)) != str(asked.get(key))
    ]
    if differing:
        raise ConfigError(
            f"{path} differs from the requested config in {', '.join(differing)}: "
            "request the model's own settings, or train it again with these (dvc repro)"
        )


def check_trained_data(directory: Path, record: dict, prepared: Path) -> None:
    """The prepared data must be what the model was trained on: other data that still holds valid
    token ids would change the results silently."""
    recorded = record.get("data_files")
    run_file = Path(directory) / RUN_FILE
    if not isinstance(recorded, dict):
        raise ConfigError(f"{run_file} records no prepared-data sha256 (data_files): train the model again")
    found = prepared_file_hashes(prepared)
    differing = sorted(name for name in set(recorded) | set(found) if recorded.get(name) != found.get(name))
    if differing:
        described = ", ".join(
            f"{prepared / name} ({file_difference(recorded.get(name), found.get(name))})" for name in differing
        )
        raise ConfigError(
            f"the prepared data differs from what {run_file} recorded at training: {described}: "
            "train the model again on this data (dvc repro), or point paths.prepared at its data"
        )


def file_difference(recorded: str | None, found: str | None) -> str:
    if found is None:
        return "missing"
    if recorded is None:
        return "not there at training"
    return f"sha256 {found[:12]}..., recorded {recorded[:12]}..."
