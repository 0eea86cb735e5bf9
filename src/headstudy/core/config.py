"""Compose conf/ with Hydra's compose API and check the result before any work starts."""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path

import yaml

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(Exception):
    """Bad input: the message names the key or file and what was expected."""


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


def variant_overrides(overrides: list[str]) -> list[str]:
    """`variant=4` is 4 heads; `variant=1-mix` is 1 head plus the settings in conf/model/variant/mix.yaml.
    The variant names the model's outputs and runs (h4-s0, h1-mix-s0)."""
    expanded = []
    for override in overrides:
        key, _, value = override.partition("=")
        if key != "variant":
            expanded.append(override)
            continue
        heads, _, extra = value.partition("-")
        if not heads.isdigit():
            raise ConfigError(f"variant={value}: expected a head count, optionally followed by "
                              "-NAME for conf/model/variant/NAME.yaml (e.g. 4 or 1-mix)")
        expanded += [override, f"model.n_heads={heads}"] + ([f"+model/variant={extra}"] if extra else [])
    return expanded


def compose_config(overrides: list[str]) -> DictConfig:
    directory = conf_dir()
    if not (directory / "config.yaml").is_file():
        raise ConfigError(f"{directory}/config.yaml not found: run headstudy in the project root")
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            config = compose("config", overrides=variant_overrides(list(overrides)))
        OmegaConf.resolve(config)
    except (HydraException, OmegaConfBaseException) as error:
        hints = override_hints(list(overrides), directory)
        raise ConfigError(hints or f"conf/ with overrides {list(overrides)}: {first_line(error)}") from None
    if config.variant is None:
        config.variant = str(config.model.n_heads)
    validate(config)
    return config


def groups(directory: Path) -> list[str]:
    """The config groups of conf/, nested ones as `model/variant`."""
    return sorted(path.relative_to(directory).as_posix() for path in directory.rglob("*")
                  if path.is_dir() and any(path.glob("*.yaml")))


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
    hints = []
    for override in overrides:
        key, _, value = override.partition("=")
        name, head = key.lstrip("+~"), f"{key}="
        if name == "variant" and "-" in value:  # variant=1-mix names conf/model/variant/mix.yaml
            heads, _, value = value.partition("-")
            name, head = "model/variant", f"variant={heads}-"
        if name in all_groups:
            options = group_options(directory, name)
            if value not in options:
                close = difflib.get_close_matches(value, options, n=1)
                hints.append(f"{head}{value}: conf/{name}/ has no option {value!r}"
                             + (f" (did you mean {head}{close[0]}?)" if close else
                                f"; the options are {', '.join(options)}"))
        elif name not in keys and not any(known.startswith(name + ".") for known in keys):
            close = difflib.get_close_matches(name, keys + all_groups, n=1, cutoff=0.6)
            hints.append(f"{name} is not a config key"
                         + (f" (did you mean {close[0]}?)" if close else
                            "; `headstudy config` prints every key"))
    return "; ".join(hints)


PARAMS_FILE = Path("params.yaml")


def load_params(command: str, required: dict[str, tuple[str, ...]]) -> dict:
    """The study's params.yaml, in the folder DVC runs a stage from, refused in one line unless
    every section in `required` is there with its keys."""
    if not PARAMS_FILE.is_file():
        raise ConfigError(f"{PARAMS_FILE} not found: run {command} from the study's folder")
    params = yaml.safe_load(PARAMS_FILE.read_text())
    for section, keys in required.items():
        if not isinstance(params, dict) or not isinstance(params.get(section), dict):
            raise ConfigError(f"{PARAMS_FILE}: expected a `{section}:` section")
        missing = [key for key in keys if key not in params[section]]
        if missing:
            raise ConfigError(f"{PARAMS_FILE}: {section}.{missing[0]} is missing")
    return params


def check_study(params_file: Path) -> None:
    """params.yaml's study: DVC expands an empty list silently to no stages and a repeated value
    silently to one, so both are refused here, before a stage does any work."""
    params_file = Path(params_file)
    if not params_file.is_file():
        return
    study = (yaml.safe_load(params_file.read_text()) or {}).get("study")
    if not isinstance(study, dict):
        return
    problems = []
    for key in ("variants", "seeds"):
        values = study.get(key)
        if not isinstance(values, list) or not values:
            problems.append(f"study.{key} in {params_file} must be a non-empty list, got {values!r}")
            continue
        names = [str(value) for value in values]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            problems.append(f"study.{key} in {params_file} lists {', '.join(repeated)} more than once")
    if problems:
        raise ConfigError("; ".join(problems))


def first_line(error: Exception) -> str:
    """An exception's message in one line, for a one-line error."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def model_config(config: DictConfig):
    """The plain model's ModelConfig (imported here: help and config printing need no torch)."""
    from headstudy.core.model import ModelConfig

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
    "trainer.loss_points": 1,
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
    variant_heads = str(config.variant).partition("-")[0]
    if variant_heads != str(config.model.n_heads):
        problems.append(f"variant={config.variant} names {variant_heads} heads, but model.n_heads="
                        f"{config.model.n_heads}: set one of them")
    if problems:
        raise ConfigError("; ".join(problems))


def run_name(config: DictConfig) -> str:
    return f"h{config.variant}-s{config.seed}"


# The settings that shape the trained weights. Not the later stages' groups, the other paths or
# `threads` (1 and 2 threads give bit-identical weights): editing those must not discard the
# resume state of a killed training.
TRAINING_KEYS = ("data", "model", "trainer", "optimizer", "variant", "seed", "paths.prepared")


def config_digest(config: DictConfig) -> str:
    """Short hash of the settings that shape the trained weights, to key resume checkpoints."""
    training = {key: OmegaConf.select(config, key) for key in TRAINING_KEYS}
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(training), sort_keys=True).encode()).hexdigest()[:16]
