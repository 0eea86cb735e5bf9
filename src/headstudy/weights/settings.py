"""What shapes a training, typed, defined once: the model's settings (ModelConfig), the
optimiser's, the trainer's, and the batch and seed. Each field says what it must be; the same
classes are the typed schema of a config's model, optimizer and trainer sections
(settings/schema.py), so a value that is not is refused with its key before any training, and a
training is handed exactly what was checked. Nothing in weights/ reads a config file."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class Settings(BaseModel):
    """Strict: YAML and Hydra hand over typed values, so a text where a number belongs
    (`lr: 1e-3`, which YAML 1.1 reads as text) is refused rather than converted."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


def setting(description: str, **constraints: Any) -> Any:
    return Field(description=description, **constraints)


def whole(minimum: int, note: str = "") -> Any:
    return setting(f"an integer >= {minimum}{note}", ge=minimum)


class ModelConfig(Settings):
    vocab_size: int = whole(1)
    context: int = whole(1)
    width: int = whole(1)
    n_heads: int = whole(1)
    n_layers: int = whole(1)
    mlp_hidden: int = whole(1)
    # The output projection mixes the heads' outputs; with one head there is nothing to mix.
    # None means "only when n_heads > 1", as in the course's model.
    mix_heads: bool | None = setting("null, true or false", default=None)
    init_std: float = setting("a finite positive number", gt=0, default=0.02)
    # RMS-normalised queries and keys per head (Wortsman et al. 2023), which bounds the attention
    # logits that a high learning rate can blow up.
    qk_norm: bool = setting("true or false", default=False)

    @property
    def has_output_projection(self) -> bool:
        return self.n_heads > 1 if self.mix_heads is None else self.mix_heads

    def saved(self) -> dict:
        """The settings as model.pt keeps them, by name. An option that is off is left out: a model
        saved before the option existed is the same file as one saved with it off."""
        settings = dict(sorted(self.model_dump().items()))
        if not self.qk_norm:
            del settings["qk_norm"]
        return settings


class OptimizerSettings(Settings):
    """AdamW with a one-cycle schedule: linear warm-up from start_factor x lr over warmup_fraction
    of the steps, then cosine decay to final_factor x lr."""

    lr: float = setting("a finite positive number", gt=0)
    # A YAML list, as a config holds it; AdamW takes the pair.
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = setting(
        "two numbers in [0, 1)", strict=False
    )
    weight_decay: float = setting("a finite number >= 0", ge=0)
    warmup_fraction: float = setting("a number in [0, 1)", ge=0, lt=1)
    start_factor: float = setting("a finite number >= 0", ge=0)
    final_factor: float = setting("a finite number >= 0", ge=0)


def device_list(devices: Any) -> Any:
    """trainer.devices as Lightning takes it: a count (-1: all), `auto`, or device indices (a
    list, or a string such as "0,1"); anything else would end in Lightning's TypeError."""
    if isinstance(devices, int):
        good = devices >= 1 or devices == -1
    elif isinstance(devices, str):
        good = (
            devices == "auto" or devices.strip() == "-1" or all(part.strip().isdigit() for part in devices.split(","))
        )
    else:
        good = len(devices) > 0 and all(device >= 0 for device in devices)
    if not good:
        raise ValueError("not a device count or list")
    return devices


class TrainerSettings(Settings):
    """Where and how long the training runs, in Lightning's terms."""

    max_steps: int = whole(1)
    val_every_steps: int = whole(1)
    loss_points: int = whole(1)  # training-loss points logged over the run
    deterministic: bool | Literal["warn"] = setting("true, false or warn")
    accelerator: Literal["cpu", "gpu", "cuda", "mps", "auto"] = setting("cpu, gpu, cuda, mps or auto")
    devices: Annotated[int | str | list[int], AfterValidator(device_list)] = setting(
        "a number of devices (1, 2, ...; -1 for all), auto, or a list of device indices"
    )
    num_nodes: int = whole(1)
    strategy: str = setting("a Lightning strategy (auto, ddp)")
    # What the device trains in decides which precisions are right: settings/compose.py says them.
    precision: Any = setting("a precision this device trains in")
    compile: bool = setting("true or false")


class TrainingSettings(Settings):
    model: ModelConfig
    optimizer: OptimizerSettings
    trainer: TrainerSettings
    batch_size: int = whole(1)
    seed: int = whole(0)
