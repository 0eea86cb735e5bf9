"""Stage `configure`: check the study in params.yaml and write the resolved config file of every
stage into configs/, before any other stage runs.

Each later stage depends on its own file here, not on conf/ or params.yaml: a comment or an
unused preset in conf/ changes no file, so it reruns nothing, and a new learning rate changes
exactly the files of the models that use it. Every refusal of a bad study happens here, first, so
DVC has deleted no other stage's outputs when it comes. The folder is replaced whole, only once
every file is composed and checked."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from headstudy.common.errors import ConfigError
from headstudy.common.files import staged_folder
from headstudy.formats.names import model_name, parse_variant, task_folder
from headstudy.formats.runconfig import config_text, training_section
from headstudy.settings.compose import PARAMS_FILE, compose_config, read_params, stage_config

CONFIGS = Path("configs")


def listed(study: dict, key: str, required: bool = True) -> list:
    """A non-empty list without repeats (DVC expands an empty matrix silently to no stages)."""
    values = study.get(key)
    if values is None and not required:
        return []
    if not isinstance(values, list) or not values:
        raise ConfigError(f"study.{key} in {PARAMS_FILE} must be a non-empty list, got {values!r}")
    names = [str(value) for value in values]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"study.{key} in {PARAMS_FILE} lists {', '.join(repeated)} more than once")
    return values


def task_overrides(clues: int | None) -> list[str]:
    """A study of the multi-clue task trains each model on the task with `clues` clues."""
    return [] if clues is None else [f"data.clues={clues}", f"paths.prepared={task_folder(clues)}"]


def study_models(params: dict) -> list[dict]:
    """Every model the study trains: variant x learning rate (in a learning-rate study) x number
    of clues (in a multi-clue task study) x seed."""
    study = params.get("study")
    if not isinstance(study, dict):
        raise ConfigError(f"{PARAMS_FILE}: expected a `study:` section with variants and seeds")
    variants = [str(variant) for variant in listed(study, "variants")]
    for variant in variants:
        parse_variant(variant)
    seeds = listed(study, "seeds")
    lrs = listed(study, "lrs", required=False)
    clue_counts = listed(study, "clues", required=False)
    # Each variant's own settings (study.variant_overrides) are added by compose_config, for a run
    # by hand too. Settings of a variant the study leaves out are kept for when it comes back.
    if not isinstance(study.get("variant_overrides") or {}, dict):
        raise ConfigError(f"study.variant_overrides in {PARAMS_FILE} must map variants to lists of key=value")
    models = []
    for variant in variants:
        for lr in lrs or [None]:
            for clues in clue_counts or [None]:
                for seed in seeds:
                    overrides = [f"variant={variant}", f"seed={seed}", *task_overrides(clues)]
                    if lr is not None:
                        overrides.append(f"optimizer.lr={lr}")
                    models.append(
                        {
                            "name": model_name(variant, seed, lr, clues),
                            "variant": variant,
                            "seed": seed,
                            "lr": lr,
                            "clues": clues,
                            "overrides": overrides,
                        }
                    )
    return models


def check_report(params: dict) -> dict:
    report = params.get("report")
    if not isinstance(report, dict) or not isinstance(report.get("title"), str):
        raise ConfigError(f"{PARAMS_FILE}: expected a `report:` section with a title")
    if "seed_claim" in report:  # its name until 0.2.0: refused, so that the claim is never dropped unsaid
        raise ConfigError(f"report.seed_claim in {PARAMS_FILE} is now report.chapter_claim: rename it")
    for pair in report.get("compare") or []:
        # A pair naming a variant outside the study is allowed: the report says it is left out.
        if not isinstance(pair, list) or len(pair) != 2:
            raise ConfigError(f"report.compare in {PARAMS_FILE}: expected pairs [A, B], got {pair!r}")
    return report


def resolve(params: dict, overrides: list[str] = ()) -> dict[str, DictConfig]:
    """Every stage's config file, by its path under configs/."""
    models = study_models(params)
    report = check_report(params)
    files: dict[str, DictConfig] = {}
    for model in models:
        config = compose_config([*model["overrides"], *overrides], params)
        config.name = model["name"]
        files[f"train/{model['name']}.yaml"] = stage_config("train", config)
    shared = compose_config(list(overrides), params)
    for clues in dict.fromkeys(model["clues"] for model in models if model["clues"] is not None):
        files[f"prepare/k{clues}.yaml"] = stage_config(
            "prepare", compose_config([*overrides, *task_overrides(clues)], params)
        )
    files["prepare.yaml"] = stage_config("prepare", shared)
    files["baselines.yaml"] = stage_config("baselines", shared)
    inspect = stage_config("inspect", shared)
    inspect.models = [
        {"name": model["name"], "training": training_section(files[f"train/{model['name']}.yaml"])} for model in models
    ]  # in study order
    files["inspect.yaml"] = inspect
    summary = stage_config("report", shared)
    summary.study = OmegaConf.create(params["study"])
    summary.report = OmegaConf.create(report)
    summary.models = [{key: model[key] for key in ("name", "variant", "seed", "lr", "clues")} for model in models]
    files["report.yaml"] = summary
    return files


def configure(folder: Path = CONFIGS) -> None:
    files = resolve(read_params(required=True))
    with staged_folder(folder) as staging:
        for relative, config in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(config_text(config))
    print(
        f"configure: {len(files)} config files in {folder}/, {sum(name.startswith('train/') for name in files)} models"
    )


def main(args: list[str]) -> None:
    if args:
        raise ConfigError(f"configure takes no overrides (got {' '.join(args)}): edit params.yaml or conf/")
    configure()
