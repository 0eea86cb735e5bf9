"""What shapes a training, typed: the model's settings (ModelConfig), the optimiser's, the
trainer's, and the batch and seed. The stages build these from their config at the boundary
(settings/training.py); nothing in weights/ reads a config key by name."""

from __future__ import annotations

from dataclasses import dataclass

from headstudy.weights.model import ModelConfig


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW with a one-cycle schedule: linear warm-up from start_factor x lr over warmup_fraction
    of the steps, then cosine decay to final_factor x lr."""

    lr: float
    betas: tuple[float, float]
    weight_decay: float
    warmup_fraction: float
    start_factor: float
    final_factor: float


@dataclass(frozen=True)
class TrainerSettings:
    """Where and how long the training runs, in Lightning's terms."""

    max_steps: int
    val_every_steps: int
    loss_points: int  # training-loss points logged over the run
    deterministic: bool
    accelerator: str
    devices: int | str | list[int]
    num_nodes: int
    strategy: str
    precision: str
    compile: bool


@dataclass(frozen=True)
class TrainingSettings:
    model: ModelConfig
    optimizer: OptimizerSettings
    trainer: TrainerSettings
    batch_size: int
    seed: int
