"""Compose conf/ with the study's params.yaml and key=value overrides (Hydra's compose API), check
the result, and cut from it the settings each stage reads.

Every command composes its config here, and only here: under `dvc repro` the configure stage
writes what `stage_config` returns into configs/, and each stage reads its file there; by hand, a
command composes the same thing in memory. So a training by hand, `headstudy config` and the
study agree: all three start from conf/, then params.yaml, then the overrides given."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from headstudy.common.errors import ConfigError, first_line
from headstudy.formats.names import computed_variant, model_name, parse_variant
from headstudy.formats.runconfig import TRAINING_KEYS
from headstudy.settings import schema
from headstudy.weights.settings import ModelConfig

PARAMS_FILE = Path("params.yaml")
# params.yaml sections that hold study settings rather than conf/ keys.
STUDY_SECTIONS = ("study", "report")
# params.yaml keys that choose a file of a conf/ group rather than set a key.
GROUP_CHOICES = {"data": "corpus", "model": "preset"}


def conf_dir() -> Path:
    """HEADSTUDY_CONF, or the conf/ of the project this command runs in: the working directory
    or the nearest folder above it that holds conf/config.yaml (a study in studies/NAME runs
    from its own folder)."""
    if "HEADSTUDY_CONF" in os.environ:
        return Path(os.environ["HEADSTUDY_CONF"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "conf" / "config.yaml").is_file():
            return folder / "conf"
    return here / "conf"


def project_root() -> Path:
    return conf_dir().parent


def read_params(path: Path = PARAMS_FILE, required: bool = False) -> dict:
    """The study's params.yaml ({} when there is none and none is required)."""
    path = Path(path)
    if not path.is_file():
        if required:
            raise ConfigError(f"{path} not found: run this in the folder of a study (the project root or studies/NAME)")
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
        ) from None
    try:
        repeated = repeated_keys(yaml.compose(text))
        params = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML ({first_line(error)})") from None
    if repeated:  # YAML would keep the last silently, and DVC refuses the file: refused alike here
        raise ConfigError(
            f"{path} gives {', '.join(repeated)} more than once: keep one (YAML would silently take the last, "
            "and DVC refuses the file)"
        )
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ConfigError(
            f"{path}: expected a mapping of sections (study:, trainer:, ...), got {type(params).__name__}"
        )
    empty = [section for section, values in params.items() if values is None or values == {}]
    if empty:  # `trainer:` with its keys removed: a null that Hydra would take for a group choice
        raise ConfigError(
            f"{path}: the section {', '.join(f'{name}:' for name in map(str, empty))} is empty: expected its keys "
            f"(such as {empty[0]}.KEY: VALUE), or leave the section out"
        )
    return params


def repeated_keys(node: yaml.Node | None, prefix: str = "") -> list[str]:
    """The dotted keys that a mapping of this YAML document gives twice, with their lines."""
    if isinstance(node, yaml.SequenceNode):
        return [key for item in node.value for key in repeated_keys(item, prefix)]
    if not isinstance(node, yaml.MappingNode):
        return []
    repeated, seen = [], {}
    for key_node, value_node in node.value:
        key = f"{prefix}{key_node.value}" if isinstance(key_node, yaml.ScalarNode) else None
        if key is not None and key in seen:
            repeated.append(f"{key} (lines {seen[key] + 1} and {key_node.start_mark.line + 1})")
        elif key is not None:
            seen[key] = key_node.start_mark.line
        repeated += repeated_keys(value_node, f"{key}." if key is not None else prefix)
    return repeated


# Settings that conf/ leaves out on purpose: absent, they keep their default, so the configs of
# every study written before them stay as they were (tasks/multiclue.py: absent = uniform types;
# weights/model.py: absent = no QK-norm, and a model saved without it is the same file).
OPTIONAL_KEYS = {"data": ("type_concentration",), "model": ("qk_norm",)}


def with_optional_keys(override: str) -> str:
    """`model.qk_norm=true` as `++model.qk_norm=true`: Hydra adds a key that conf/ leaves out only so."""
    key, _, value = override.partition("=")
    section, _, name = key.partition(".")
    return f"++{key}={value}" if name in OPTIONAL_KEYS.get(section, ()) else override


def params_overrides(params: dict) -> list[str]:
    """params.yaml's conf/ settings as Hydra overrides: `data.corpus` and `model.preset` choose a
    file of their group, every other key sets that key (`trainer.max_steps: 3000`)."""
    overrides = []
    for section, values in params.items():
        if section in STUDY_SECTIONS:
            continue
        if not isinstance(values, dict):  # a top-level key of conf/config.yaml (threads: 1)
            overrides.append(f"{section}={override_value(values)}")
            continue
        for key, value in values.items():
            if GROUP_CHOICES.get(section) == key:
                overrides.append(f"{section}={value}")
            elif value is None and section == "model":
                continue  # `width: null` in params.yaml: the preset's own, so that `dvc exp run -S` finds the key
            else:
                overrides.append(with_optional_keys(f"{section}.{key}={override_value(value)}"))
    return overrides


def override_value(value) -> str:
    """A YAML value in Hydra's override grammar (lists and strings included)."""
    if isinstance(value, str):
        return value if value and all(c.isalnum() or c in "._/-" for c in value) else repr(value)
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# The learning rates the tuning studies selected, one entry per tuning study, in conf/: each rate
# is written once, and a study takes an entry by name (study.rates).
def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


RATES_FILE = "selected_rates.yaml"


def selected_rates(study: dict) -> Callable[[str], float | None]:
    """The learning rate that study.rates gives each variant: its own, from the entry of
    conf/selected_rates.yaml that study.rates names, or one rate for every variant where study.rates
    is a number (`dvc exp run -S study.rates=0.003`); none without study.rates."""
    choice = study.get("rates")
    if choice is None:
        return lambda _variant: None
    path = conf_dir() / RATES_FILE
    if is_number(choice) and choice > 0:
        return lambda _variant: float(choice)
    table = read_params(path)
    if not isinstance(choice, str) or not isinstance(table.get(choice), dict):
        raise ConfigError(
            f"study.rates in {PARAMS_FILE} must name an entry of {path} ({', '.join(map(str, table)) or 'none'}) "
            f"or be one learning rate > 0 for every variant, got {choice!r}"
        )
    rates = {str(variant): rate for variant, rate in table[choice].items()}
    wrong = [variant for variant, rate in rates.items() if not isinstance(rate, float) or not rate > 0]
    if wrong:
        raise ConfigError(f"{path}: {choice}.{wrong[0]} must be a learning rate > 0, got {rates[wrong[0]]!r}")
    # A rounding of a variant (`4-avx2`) trains at the rate selected for the variant it computes.
    return lambda variant: rates.get(variant, rates.get(computed_variant(variant)))


def variant_settings(params: dict, overrides: list[str]) -> list[str]:
    """The study's own settings of the variant that the overrides name, so that a run by hand
    trains what the study trains: its selected learning rate (study.rates), then params.yaml's
    study.variant_overrides.VARIANT, which may set another."""
    chosen = [value for key, _, value in (o.partition("=") for o in overrides) if key == "variant"]
    study = params.get("study") if isinstance(params.get("study"), dict) else {}
    per_variant = study.get("variant_overrides") or {}
    per_variant = {str(key): value for key, value in per_variant.items()} if isinstance(per_variant, dict) else {}
    settings = per_variant.get(chosen[-1], []) if chosen else []
    if not isinstance(settings, list) or not all(isinstance(item, str) and "=" in item for item in settings):
        raise ConfigError(
            f"study.variant_overrides.{chosen[-1]} in {PARAMS_FILE} must be a list of key=value, got {settings!r}"
        )
    check_variant_settings(chosen[-1] if chosen else "", settings)
    rate = selected_rates(study)(chosen[-1]) if chosen else None
    if rate is not None and not any(item.partition("=")[0].lstrip("+~") == "optimizer.lr" for item in settings):
        settings = [f"optimizer.lr={rate!r}", *settings]
    return settings


# Keys that a variant's own settings may not set: the variant and the study's matrix choose them.
# A study's configure sets them after the variant's settings, so there they would be dropped,
# while a run by hand would take them: the two would train different models.
CHOSEN_BY_THE_STUDY = ("variant", "seed", "model.n_heads", "variants")


def check_variant_settings(variant: str, settings: list[str], also: tuple[str, ...] = ()) -> None:
    """Refuse study.variant_overrides.VARIANT settings of keys the variant or the study sets itself."""
    keys = [item.partition("=")[0].lstrip("+~") for item in settings]
    clashes = [key for key in keys if key in (*CHOSEN_BY_THE_STUDY, *also)]
    if clashes:
        chooser = "the variant itself" if set(clashes) & {"variant", "model.n_heads", "variants"} else "the study"
        raise ConfigError(
            f"study.variant_overrides.{variant} in {PARAMS_FILE} sets {', '.join(clashes)}, which {chooser} chooses"
            + " (study.variants, study.seeds"
            + (", study.lrs, study.clues" if also else "")
            + "): remove it there"
        )


def variant_overrides(overrides: list[str]) -> list[str]:
    """`variant=4` is 4 heads; `variant=1-mix` is 1 head plus the settings in conf/variants/mix.yaml."""
    expanded = []
    for override in overrides:
        key, _, value = override.partition("=")
        if key != "variant":
            expanded.append(override)
            continue
        heads, extra = parse_variant(value)
        expanded += [override, f"model.n_heads={heads}"] + ([f"+variants={extra}"] if extra else [])
    return expanded


def compose_config(overrides: list[str], params: dict | None = None) -> DictConfig:
    """conf/, then params.yaml's settings (read from the working directory unless given), then
    the overrides; checked, with a `name` for the model it describes."""
    directory = conf_dir()
    if not (directory / "config.yaml").is_file():
        raise ConfigError(f"{directory}/config.yaml not found: run headstudy in the project root")
    params = read_params() if params is None else params
    overrides = [*params_overrides(params), *variant_settings(params, overrides), *map(with_optional_keys, overrides)]
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            config = compose("config", overrides=variant_overrides(overrides))
        OmegaConf.resolve(config)
    except (HydraException, OmegaConfBaseException) as error:
        hints = override_hints(list(overrides), directory)
        raise ConfigError(hints or f"conf/ with overrides {list(overrides)}: {first_line(error)}") from None
    OmegaConf.set_struct(config, False)  # composed and checked: plain settings from here on
    widen_mlp_by_projection(config.model)
    if config.variant is None:
        heads = config.model.n_heads
        if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
            raise ConfigError(
                f"model.n_heads must be an integer >= 1 (the number of heads), got {heads!r}; or choose "
                "variant=H or variant=H-NAME for H heads plus conf/variants/NAME.yaml"
            )
        config.variant = str(config.model.n_heads)
    config.variant = str(config.variant)
    validate(config)
    config.name = model_name(config.variant, config.seed)
    return config


def groups(directory: Path) -> list[str]:
    """The config groups of conf/, nested ones as `model/variant`."""
    return sorted(
        path.relative_to(directory).as_posix()
        for path in directory.rglob("*")
        if path.is_dir() and any(path.glob("*.yaml"))
    )


def group_options(directory: Path, group: str) -> list[str]:
    return sorted(path.stem for path in (directory / group).glob("*.yaml"))


def default_options(directory: Path) -> dict[str, str]:
    """The option of each group that conf/config.yaml's defaults list picks."""
    defaults = (yaml.safe_load((directory / "config.yaml").read_text()) or {}).get("defaults", [])
    return {key: value for entry in defaults if isinstance(entry, dict) for key, value in entry.items()}


def known_keys(directory: Path) -> list[str]:
    """Every dotted key that some option of conf/ defines, e.g. `model.n_heads`, `paths.models`."""
    keys: set[str] = set()

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif prefix:
            keys.add(prefix)

    top = yaml.safe_load((directory / "config.yaml").read_text()) or {}
    walk({key: value for key, value in top.items() if key != "defaults"}, "")
    for group in groups(directory):
        for option in group_options(directory, group):
            path = directory / group / f"{option}.yaml"
            package = group.replace("/", ".")
            for line in path.read_text().splitlines():
                if line.startswith("# @package "):
                    package = line.removeprefix("# @package ").strip()
            walk(yaml.safe_load(path.read_text()) or {}, package)
    return sorted(keys)


def override_hints(overrides: list[str], directory: Path) -> str:
    """For overrides that name no key or option of conf/: what was probably meant."""
    all_groups, keys = groups(directory), known_keys(directory)
    hints, unknown_without_guess = [], 0
    for override in overrides:
        key, _, value = override.partition("=")
        name, head = key.lstrip("+~"), f"{key}="
        if name == "variant" and "-" in value:  # variant=1-mix names conf/variants/mix.yaml
            heads, _, value = value.partition("-")
            name, head = "variants", f"variant={heads}-"
        if name in all_groups:
            options = group_options(directory, name)
            if value not in options:
                close = difflib.get_close_matches(value, options, n=1)
                hints.append(
                    f"{head}{value}: conf/{name}/ has no option {value!r}"
                    + (f" (did you mean {head}{close[0]}?)" if close else f"; the options are {', '.join(options)}")
                )
        elif name not in keys and not any(known.startswith(name + ".") for known in keys):
            close = difflib.get_close_matches(name, keys + all_groups, n=1, cutoff=0.6)
            hints.append(f"{name} is not a config key" + (f" (did you mean {close[0]}?)" if close else ""))
            unknown_without_guess += not close
    if unknown_without_guess:  # said once, after all of them
        hints[-1] += "; `headstudy config` prints every key"
    return "; ".join(hints)


def projection_units(width: int) -> int:
    """The hidden units of an MLP (each 2 x width + 1 parameters: its row in, its column out, its
    bias) that the output projection's width^2 + width parameters buy, never more."""
    return (width * width + width) // (2 * width + 1)


def widen_mlp_by_projection(model: DictConfig) -> None:
    """A variant file's model.widen_mlp_by_projection (conf/variants/wide.yaml) is no setting of the
    model: it widens model.mlp_hidden by projection_units(model.width), at any preset, and goes."""
    if not model.pop("widen_mlp_by_projection", False):
        return
    width, hidden = model.get("width"), model.get("mlp_hidden")
    if all(isinstance(value, int) and not isinstance(value, bool) and value > 0 for value in (width, hidden)):
        model.mlp_hidden = hidden + projection_units(width)


def model_config(config: DictConfig) -> ModelConfig:
    """The plain model's settings, from a composed (so checked) config."""
    return ModelConfig.model_validate(OmegaConf.to_container(config.model))


def validate(config: DictConfig) -> None:
    """Every problem of a composed config, by key, in one line: the typed schema's first (each
    setting's type and range), then what one key cannot say alone, once the keys it reads are
    of their type."""
    problems = schema.problems(OmegaConf.to_container(config))
    if not problems:
        problems += precision_problems(config.trainer)
        if config.data.corpus == "multiclue":
            problems += task_problems(config)
        model = config.model
        if model.width % model.n_heads:
            problems.append(
                f"model.n_heads={model.n_heads} must divide model.width={model.width} (the heads split the width)"
            )
        heads, _ = parse_variant(config.variant)
        if heads != model.n_heads:
            problems.append(
                f"variant={config.variant} names {heads} heads, but model.n_heads={model.n_heads}: set one of them"
            )
    if not problems and config.trainer.val_every_steps > config.trainer.max_steps:
        problems.append(
            f"trainer.val_every_steps={config.trainer.val_every_steps} is more than trainer.max_steps="
            f"{config.trainer.max_steps}: no validation would run, and the curves would stay empty"
        )
    if problems:
        raise ConfigError("; ".join(problems))


# The precisions this trainer trains in, by the device: float32 everywhere; bfloat16 autocast on
# a GPU and on a CPU that computes bfloat16 natively (checked below); float16 autocast on a GPU
# only, since on a CPU Lightning runs 16-mixed in bfloat16 while the run would record 16-mixed.
# Weights held in half precision (16-true, bf16-true), 64-true and transformer-engine's are none:
# the evaluation and the saved model expect float32 weights.
PRECISIONS = {"cpu": ("32-true", "bf16-mixed"), "gpu": ("32-true", "bf16-mixed", "16-mixed")}


def precision_problems(trainer: DictConfig) -> list[str]:
    """trainer.precision only from the values the trainer supports on the device it trains on
    (trainer.accelerator; `auto` is a GPU where one is visible), and bfloat16 on a CPU only where
    the CPU has native bfloat16 (AVX-512 BF16 or AMX): PyTorch emulates it elsewhere, slower than
    float32, so the setting would cost time and buy nothing."""
    precision = trainer.get("precision")
    accelerator = trainer.get("accelerator")
    if accelerator == "auto":
        import torch

        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    device = "cpu" if accelerator == "cpu" else "gpu"
    if not isinstance(precision, str) or precision not in PRECISIONS[device]:
        where = "on a CPU" if device == "cpu" else f"with trainer.accelerator={trainer.get('accelerator')}"
        return [
            f"trainer.precision must be one of {', '.join(PRECISIONS[device])} {where}, got {precision!r}"
            + (" (on a CPU Lightning would run 16-mixed in bfloat16)" if precision == "16-mixed" else "")
        ]
    if not precision.startswith("bf16") or device != "cpu":
        return []
    import torch

    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        return []
    return [
        f"trainer.precision={precision}: this CPU computes no bfloat16 natively (no AVX-512 BF16 or AMX; "
        f"PyTorch's CPU capability: {torch.backends.cpu.get_cpu_capability()}), where it is slower than float32; "
        "use trainer.precision=32-true"
    ]


def precision_warning(trainer: DictConfig) -> str | None:
    """bfloat16 autocast on the one kind of CPU where it was measured slower than float32: an
    Intel CPU with AVX-512 BF16 but without AMX's tile units (docs/speed.md). Accepted there (it
    trains correctly, and a study of precision may want it), with a warning for a user who asks
    for speed. Measured faster: with AMX (Intel) and on AMD's Zen 4, which has no AMX."""
    if trainer.get("accelerator") != "cpu" or not str(trainer.get("precision")).startswith("bf16"):
        return None
    import torch

    from headstudy.bookkeeping.provenance import cpu_info

    intel = cpu_info().get("vendor_id") == "GenuineIntel"
    if not intel or torch.cpu._is_amx_tile_supported() or not torch.cpu._is_avx512_bf16_supported():
        return None  # no native bfloat16 at all: precision_problems refuses it
    return (
        f"trainer.precision={trainer.precision} on an Intel CPU without AMX is slower than 32-true: measured at "
        "0.57-0.68x its speed on an Intel Xeon of that kind (docs/speed.md); it is accepted for a study of "
        "precision, but for speed use trainer.precision=32-true"
    )


def task_problems(config: DictConfig) -> list[str]:
    """The generated multi-clue task's own checks (tasks/multiclue.py, which prepare applies too),
    and a segment that fits in one context window."""
    from headstudy.tasks.multiclue import MultiClue

    try:
        MultiClue.from_settings(config.data)
    except ConfigError as error:
        return [str(error)]
    longest, context = config.data.segment_max, config.model.context
    if isinstance(context, int) and longest >= context:
        return [
            f"data.segment_max={longest} must be below model.context={context}: a query and its clues "
            "must fit in one context window"
        ]
    return []


# Keys of the composed config that a stage's file holds only where they are set: every file written
# before them stays as it was (`kernels`: the CPU kernels, default where absent).
SET_ONLY_KEYS = ("kernels",)
# What each stage reads of the composed config. The configure stage writes exactly this to the
# stage's file in configs/, so editing anything else never reruns the stage.
STAGE_KEYS = {
    "prepare": ("data", "paths.prepared"),
    "baselines": ("data", "baselines", "paths.prepared", "paths.baselines"),
    "train": (
        "name",
        *TRAINING_KEYS,
        "threads",
        "kernels",
        "paths.prepared",
        "paths.models",
        "paths.metrics",
        "paths.checkpoints",
    ),
    "inspect": ("inspect", "threads", "paths.prepared", "paths.models", "paths.reports"),
    "report": ("tracking.experiment", "paths.prepared", "paths.metrics", "paths.baselines", "paths.reports"),
}
# Commands that read the config of one model: `evaluate` reads the model's training config.
STAGE_KEYS["evaluate"] = STAGE_KEYS["score"] = STAGE_KEYS["ablate"] = STAGE_KEYS["answers"] = STAGE_KEYS["train"]
# One training as `train` runs it, and how the diagnosis watches it (and clips it, in an arm).
STAGE_KEYS["diagnose"] = (*STAGE_KEYS["train"], "diagnose")


def stage_config(command: str, config: DictConfig) -> DictConfig:
    """The part of a composed config that `command` reads."""
    selected = OmegaConf.create()
    for key in STAGE_KEYS[command]:
        value = OmegaConf.select(config, key)
        if value is not None or key not in SET_ONLY_KEYS:
            OmegaConf.update(selected, key, value, force_add=True)
    return selected
