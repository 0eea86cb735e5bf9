"""The boundary between a stage's config and the training recipe: the typed settings built from
the config's keys, and the recipe's refusals and failures said in those keys."""

from __future__ import annotations

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from headstudy.common.errors import ConfigError, first_line
from headstudy.execution import jobs
from headstudy.weights.recipe import Training, prepare_training
from headstudy.weights.settings import TrainingSettings
from headstudy.weights.training import TrainerRefused, TrainingDiverged

PLACEMENT_KEYS = ("accelerator", "devices", "num_nodes", "strategy", "precision")
TRAINING_SECTIONS = ("model", "optimizer", "trainer")


def training_settings(config: DictConfig) -> TrainingSettings:
    """The training's typed settings, its sections handed whole to their one definition."""
    return TrainingSettings.model_validate(
        {
            **{section: OmegaConf.to_container(config[section]) for section in TRAINING_SECTIONS},
            "batch_size": config.data.batch_size,
            "seed": config.seed,
        }
    )


def start_training(config: DictConfig, train_tokens: np.ndarray, valid_tokens: np.ndarray, callbacks: list) -> Training:
    """The recipe, ready to fit, on the thread count this job may use; a trainer setting that
    Lightning or this machine cannot take is refused naming its key."""
    settings = config.trainer
    try:
        training = prepare_training(
            training_settings(config), train_tokens, valid_tokens, callbacks, jobs.torch_threads(config.threads)
        )
    except TrainerRefused as error:
        chosen = ", ".join(f"trainer.{key}={settings[key]}" for key in PLACEMENT_KEYS)
        raise ConfigError(f"{chosen}: {first_line(error)}") from None
    world_size = training.trainer.world_size
    if config.data.batch_size % world_size:
        raise ConfigError(
            f"data.batch_size={config.data.batch_size} must be divisible by trainer.devices x "
            f"trainer.num_nodes = {world_size} processes (each takes an equal slice of every batch)"
        )
    if (
        str(settings.precision).startswith("bf16")
        and training.trainer.strategy.root_device.type == "cuda"
        and not torch.cuda.is_bf16_supported()
    ):
        raise ConfigError(
            f"trainer.precision={settings.precision}: {torch.cuda.get_device_name()} "
            "has no bfloat16 support; use 16-mixed or 32-true"
        )
    return training


def diverged(error: TrainingDiverged, precision: str) -> ConfigError:
    """The likely cause in the key the user set: float16's range (its largest value is 65,504)
    where the training ran in it, the learning rate otherwise."""
    cause = (
        f"trainer.precision={precision} computes in float16, whose range a loss or an attention logit "
        f"can leave: use bf16-mixed or 32-true, or lower optimizer.lr={error.lr}"
        if precision == "16-mixed"
        else f"optimizer.lr={error.lr} is likely too high: lower it"
    )
    return ConfigError(
        f"training diverged: {error.quantity} is {error.value} at step {error.step} of "
        f"trainer.max_steps={error.max_steps}; {cause} (no model was written)"
    )
