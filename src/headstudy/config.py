"""Compose conf/ with Hydra's compose API and check the result before any work starts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from headstudy.model import ModelConfig


class ConfigError(Exception):
    """Bad input: the message names the key or file and what was expected."""


def conf_dir() -> Path:
    return Path(os.environ.get("HEADSTUDY_CONF", "conf")).resolve()


def compose_config(overrides: list[str]) -> DictConfig:
    directory = conf_dir()
    if not (directory / "config.yaml").is_file():
        raise ConfigError(f"{directory}/config.yaml not found: run headstudy in the project root")
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            config = compose("config", overrides=list(overrides))
        OmegaConf.resolve(config)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(f"conf/ with overrides {list(overrides)}: {first_line(error)}") from None
    validate(config)
    return config


def first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def model_config(config: DictConfig) -> ModelConfig:
    try:
        return ModelConfig(**OmegaConf.to_container(config.model))
    except TypeError as error:
        raise ConfigError(f"model: {error}") from None


# Integer settings and their smallest allowed value.
INTEGER_MINIMUMS = {
    "seed": 0,
    "threads": 1,
    "data.vocab_size": 257,  # byte-level BPE starts from the 256 bytes
    "data.batch_size": 1,
    "trainer.max_steps": 1,
    "trainer.val_every_steps": 1,
    "trainer.log_every_steps": 1,
}


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate(config: DictConfig) -> None:
    problems = []
    for key, minimum in INTEGER_MINIMUMS.items():
        value = OmegaConf.select(config, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            problems.append(f"{key} must be an integer >= {minimum}, got {value!r}")
    lr, warmup = config.optimizer.lr, config.optimizer.warmup_fraction
    if not is_number(lr) or lr <= 0:
        problems.append(f"optimizer.lr must be a positive number, got {lr!r}")
    if not is_number(warmup) or not 0 <= warmup < 1:
        problems.append(f"optimizer.warmup_fraction must be a number in [0, 1), got {warmup!r}")
    problems += model_config(config).problems()
    if problems:
        raise ConfigError("; ".join(problems))


def run_name(config: DictConfig) -> str:
    return f"h{config.model.n_heads}-s{config.seed}"


def config_digest(config: DictConfig) -> str:
    """Short hash of everything that shapes the trained weights, to key resume checkpoints."""
    return hashlib.sha256(OmegaConf.to_yaml(config, sort_keys=True).encode()).hexdigest()[:16]
