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


def validate(config: DictConfig) -> None:
    problems = model_config(config).problems()
    positive_integers = {
        "seed": config.seed + 1,  # seed 0 is fine
        "threads": config.threads,
        "data.vocab_size": config.data.vocab_size,
        "data.batch_size": config.data.batch_size,
        "trainer.max_steps": config.trainer.max_steps,
        "trainer.val_every_steps": config.trainer.val_every_steps,
        "trainer.log_every_steps": config.trainer.log_every_steps,
    }
    for key, value in positive_integers.items():
        if not isinstance(value, int) or value < 1:
            shown = OmegaConf.select(config, key)
            problems.append(f"{key} must be a {'non-negative' if key == 'seed' else 'positive'} "
                            f"integer, got {shown!r}")
    if not 0 < config.optimizer.lr:
        problems.append(f"optimizer.lr must be positive, got {config.optimizer.lr!r}")
    if not 0 <= config.optimizer.warmup_fraction < 1:
        problems.append(
            f"optimizer.warmup_fraction must be in [0, 1), got {config.optimizer.warmup_fraction!r}"
        )
    if config.data.vocab_size < 257:
        problems.append(
            f"data.vocab_size must exceed 256 (byte-level BPE starts from the 256 bytes), "
            f"got {config.data.vocab_size}"
        )
    if problems:
        raise ConfigError("; ".join(problems))


def run_name(config: DictConfig) -> str:
    return f"h{config.model.n_heads}-s{config.seed}"


def config_digest(config: DictConfig) -> str:
    """Short hash of everything that shapes the trained weights, to key resume checkpoints."""
    return hashlib.sha256(OmegaConf.to_yaml(config, sort_keys=True).encode()).hexdigest()[:16]
