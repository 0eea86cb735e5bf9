"""Stage `configure`: check the study in params.yaml and write the resolved config file of every
stage into configs/, before any other stage runs.

Each later stage depends on its own file here, not on conf/ or params.yaml: a comment or an
unused preset in conf/ changes no file, so it reruns nothing, and a new learning rate changes
exactly the files of the models that use it. Every refusal of a bad study happens here, first, so
DVC has deleted no other stage's outputs when it comes. The folder is replaced whole, only once
every file is composed and checked."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from headstudy.analysis.gap_share import check_share
from headstudy.common.errors import ConfigError
from headstudy.common.files import read_json, staged_folder, write_json
from headstudy.formats.names import model_name, parse_variant, task_folder
from headstudy.formats.runconfig import config_text, training_section
from headstudy.settings import schema
from headstudy.settings.compose import (
    PARAMS_FILE,
    check_variant_settings,
    compose_config,
    conf_dir,
    precision_warning,
    read_params,
    selected_rates,
    stage_config,
)

CONFIGS = Path("configs")
DIGESTS_FILE = "digests.json"
# An arm of a diagnosis study: a name that can end a run's name and a DVC stage's.
ARM = re.compile(r"[a-z][a-z0-9_]*")


def listed(study: dict, key: str, section: str = "study") -> list:
    """A list of the study's (typed by settings/schema.py), without repeats: DVC expands a
    repeated matrix value to one stage, silently. [] when absent."""
    values = study.get(key) or []
    names = [str(value) for value in values]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"{section}.{key} in {PARAMS_FILE} lists {', '.join(repeated)} more than once")
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
    problems = schema.study_problems(study, f" in {PARAMS_FILE}")
    if problems:
        raise ConfigError("; ".join(problems))
    variants = [str(variant) for variant in listed(study, "variants")]
    for variant in variants:
        parse_variant(variant)
    seeds = listed(study, "seeds")
    lrs = listed(study, "lrs")
    clue_counts = listed(study, "clues")
    # Each variant's own settings (its rate from study.rates, study.variant_overrides) are added by
    # compose_config, for a run by hand too. Settings of a variant the study leaves out are kept for
    # when it comes back.
    if lrs and study.get("rates") is not None:
        raise ConfigError(
            f"study.rates in {PARAMS_FILE} sets each variant's learning rate, and study.lrs is a grid of them: keep one"
        )
    selected_rates(study)
    per_variant = study.get("variant_overrides") or {}
    for variant, settings in per_variant.items():
        try:
            parse_variant(variant)
        except ConfigError as error:
            raise ConfigError(f"study.variant_overrides in {PARAMS_FILE} names no variant: {error}") from None
        # What the study's matrix sets after a variant's settings would drop them silently.
        check_variant_settings(
            str(variant),
            settings,
            (("optimizer.lr",) if lrs else ()) + (("data.clues", "paths.prepared") if clue_counts else ()),
        )
    models = []
    for variant in variants:
        for lr in lrs or [None]:
            for clues in clue_counts or [None]:
                models += [model_entry(variant, seed, lr, clues) for seed in seeds]
    return models


def model_entry(variant: str, seed: int, lr: float | None = None, clues: int | None = None) -> dict:
    """One model: its name, what tells it apart, and the overrides that compose its config."""
    overrides = [f"variant={variant}", f"seed={seed}", *task_overrides(clues)]
    if lr is not None:
        overrides.append(f"optimizer.lr={lr}")
    return {
        "name": model_name(variant, seed, lr, clues),
        "variant": variant,
        "seed": seed,
        "lr": lr,
        "clues": clues,
        "overrides": overrides,
    }


def partner_models(params: dict) -> list[dict]:
    """The models of study.partners: variants that another study trains on this study's seeds,
    which this study's report sets beside its own (a study too long to regenerate in one go
    otherwise). Each must be configured there exactly as this study would configure it, so that a
    pair differs in the variant alone; its results are read from that study's metrics/."""
    study = params["study"]
    partners = study.get("partners")
    if partners is None:
        return []
    if study.get("lrs") or study.get("clues"):
        raise ConfigError(
            f"study.partners in {PARAMS_FILE}: only for a study of variants x seeds, without lrs or clues"
        )
    variants = [str(variant) for variant in listed(partners, "variants", section="study.partners")]
    trained_here = [variant for variant in variants if variant in map(str, study["variants"])]
    if trained_here:
        raise ConfigError(
            f"study.partners.variants in {PARAMS_FILE} lists {', '.join(trained_here)}, which study.variants "
            "trains here: a variant comes from one study"
        )
    folder = Path(partners["folder"])
    models = []
    for variant in variants:
        parse_variant(variant)
        for seed in listed(study, "seeds"):
            model = model_entry(variant, seed)
            name = model["name"]
            path = folder / CONFIGS / "train" / f"{name}.yaml"
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                raise ConfigError(
                    f"study.partners.folder={folder}: {path} not found; the study there must train variant "
                    f"{variant} on seed {seed}"
                ) from None
            if text != config_text(training_file(model, params)):
                raise ConfigError(
                    f"study.partners.folder={folder}: {path} differs from what this study would write for {name}, "
                    "so a pair would differ in more than the variant: give both studies the same settings"
                )
            models.append(model | {"metrics": (folder / "metrics").as_posix()})
    return models


# The training settings a diagnosis arm may change: the stabilisers of a single head's learning-rate
# cliff (studies/stabilisers). Clipping (diagnose.clip_grad_norm) is a diagnose key.
STABILISERS = ("optimizer.warmup_fraction", "optimizer.betas", "model.qk_norm")


def study_arms(study: dict) -> dict[str, list[str]]:
    """The arms of a diagnosis study (study.arms), each with the diagnose settings it sets
    (study.arm_overrides.ARM; none for an arm not named there): every model of the study is
    diagnosed once per arm. {} for a study without arms, which writes no diagnose files."""
    arms = [str(arm) for arm in listed(study, "arms")]
    misnamed = [arm for arm in arms if not ARM.fullmatch(arm)]
    if misnamed:
        raise ConfigError(
            f"study.arms in {PARAMS_FILE} names {', '.join(misnamed)}: an arm's name is lower-case letters, "
            "digits and _, starting with a letter (it ends the run's name)"
        )
    settings = study.get("arm_overrides") or {}
    unlisted = [str(arm) for arm in settings if str(arm) not in arms]
    if unlisted:
        raise ConfigError(
            f"study.arm_overrides in {PARAMS_FILE} names {', '.join(unlisted)}, which study.arms does not list"
        )
    for arm, items in settings.items():
        # An arm changes how the diagnosis watches a training, or applies one stabiliser; any other
        # training key would train another model than the one the arm is compared with.
        if not all(
            "=" in item and (item.startswith("diagnose.") or item.partition("=")[0] in STABILISERS) for item in items
        ):
            raise ConfigError(
                f"study.arm_overrides.{arm} in {PARAMS_FILE} must be a list of diagnose.KEY=VALUE or of a "
                f"stabiliser ({', '.join(STABILISERS)}): an arm never changes the rest of the training, got {items!r}"
            )
    return {arm: [str(item) for item in settings.get(arm) or []] for arm in arms}


def diagnosis_name(model: str, arm: str) -> str:
    """A diagnosis run: the model it trains, and its arm (h1-lr0.012-s0-clip1)."""
    return f"{model}-{arm}"


def diagnosis_file(model: dict, arm: str, settings: list[str], params: dict, overrides: list[str] = ()) -> DictConfig:
    config = compose_config([*model["overrides"], *settings, *overrides], params)
    config.name = diagnosis_name(model["name"], arm)
    return stage_config("diagnose", config)


def diagnosis_runs(params: dict, models: list[dict]) -> list[dict]:
    """Every run of a diagnosis study: each model once per arm, in study order."""
    return [
        {"name": diagnosis_name(model["name"], arm), "model": model, "arm": arm, "settings": settings}
        for model in models
        for arm, settings in study_arms(params["study"]).items()
    ]


def check_budget(params: dict) -> None:
    """A study states its training budget: conf's default would otherwise train it silently when
    the trainer: section is lost from params.yaml."""
    trainer = params.get("trainer")
    if not isinstance(trainer, dict) or "max_steps" not in trainer:
        raise ConfigError(
            f"{PARAMS_FILE}: expected trainer.max_steps, the study's training budget in steps (for example "
            "trainer: {max_steps: 3000}); a study states its budget rather than taking conf's"
        )


def report_variants(params: dict) -> list[str]:
    """The variants the report sets side by side: study.partners' first, then the study's own."""
    partners = params["study"].get("partners") or {}
    return [str(variant) for variant in [*partners.get("variants", []), *params["study"]["variants"]]]


def check_report(params: dict) -> dict:
    report = params.get("report")
    if not isinstance(report, dict):
        raise ConfigError(f"{PARAMS_FILE}: expected a `report:` section with a title")
    if "seed_claim" in report:  # its name until 0.2.0: refused, so that the claim is never dropped unsaid
        raise ConfigError(f"report.seed_claim in {PARAMS_FILE} is now report.chapter_claim: rename it")
    problems = schema.report_problems(report, f" in {PARAMS_FILE}")
    if problems:
        raise ConfigError("; ".join(problems))
    variants = report_variants(params)
    compare = report.get("compare") or []
    for pair in compare:
        # The report could only leave such a pair out.
        missing = [str(variant) for variant in pair if str(variant) not in variants]
        if missing:
            raise ConfigError(
                f"report.compare in {PARAMS_FILE} pairs {pair!r}, but study.variants ({', '.join(variants)}) "
                f"has no {' and no '.join(missing)}: add it to study.variants or remove the pair"
            )
    if report.get("chapter_claim") is not None:
        check_chapter_claim(report["chapter_claim"], variants, compare)
    if "share" in report:
        check_share(report["share"], variants, PARAMS_FILE)
    return report


def check_chapter_claim(claim: dict, variants: list[str], compare: list) -> None:
    """report.chapter_claim, the course chapter's perplexities of variants A and B, set beside our
    comparison [A, B] of report.compare: the report would silently leave the claim out where
    that comparison is not made."""
    for key in ("a", "b"):
        if str(claim[key]) not in variants:
            raise ConfigError(
                f"report.chapter_claim.{key} in {PARAMS_FILE} names variant {claim[key]!r}, but study.variants "
                f"({', '.join(variants)}) has no such variant: the report could only leave the claim out"
            )
    pair = [str(claim["a"]), str(claim["b"])]
    if pair not in [[str(variant) for variant in other] for other in compare]:
        raise ConfigError(
            f"report.chapter_claim in {PARAMS_FILE} sets the chapter beside the comparison [{', '.join(pair)}], "
            f"which report.compare does not make: add the pair to report.compare, or remove the claim"
        )


def check_waiting_variants(params: dict, models: list[dict]) -> None:
    """A variant with settings in study.variant_overrides that the study leaves out is composed
    as it would train, so that a missing conf/variants file or a bad setting shows now, as it
    would for study.variants, not when the variant comes back."""
    study = params["study"]
    in_study = {model["variant"] for model in models}
    for variant in map(str, study.get("variant_overrides") or {}):
        if variant not in in_study:
            try:
                compose_config([f"variant={variant}", f"seed={models[0]['seed']}"], params)
            except ConfigError as error:
                raise ConfigError(f"study.variant_overrides.{variant} in {PARAMS_FILE}: {error}") from None


def training_file(model: dict, params: dict, overrides: list[str] = ()) -> DictConfig:
    config = compose_config([*model["overrides"], *overrides], params)
    config.name = model["name"]
    return stage_config("train", config)


def task_file(clues: int, params: dict, overrides: list[str] = ()) -> DictConfig:
    return stage_config("prepare", compose_config([*overrides, *task_overrides(clues)], params))


def inputs_digest(params: dict) -> str:
    """What configure composes the study from: params.yaml as parsed (DVC's params dependency
    ignores its comments too) and every file of conf/ byte for byte."""
    directory = conf_dir()
    conf = {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*.yaml"))
    }
    text = json.dumps({"params": params, "conf": conf}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def text_digest(text: str) -> str:
    """A config file's sha256, as configure records it and a stage checks it."""
    return hashlib.sha256(text.encode()).hexdigest()


def check_stage_file(path: Path) -> None:
    """A stage's file in this study's configs/ must be exactly what configure wrote, from the
    params.yaml and conf/ there are now: a file truncated, edited by hand, or left from another
    params.yaml would otherwise run (or fail deep inside) with settings that no params.yaml says.
    Checked by the digests configure recorded, not by composing the study again. A file outside
    configs/ (written by hand for a run by hand) is not checked."""
    path = Path(path)
    try:
        relative = path.absolute().relative_to(CONFIGS.absolute()).as_posix()
    except ValueError:
        return
    if not PARAMS_FILE.is_file():
        return
    remedy = "run `dvc repro configure` to write it again, and edit params.yaml or conf/, never this file"
    record = read_json(CONFIGS / DIGESTS_FILE, remedy)
    written = record.get("files") if isinstance(record, dict) else None
    if not isinstance(written, dict):
        raise ConfigError(f"{CONFIGS / DIGESTS_FILE} holds no digests of the files configure wrote: {remedy}")
    if record.get("inputs") != inputs_digest(read_params(required=True)):
        raise ConfigError(
            f"{path} was written from another {PARAMS_FILE} or conf/ ({PARAMS_FILE} or conf/ changed since "
            f"`headstudy configure` ran): {remedy}"
        )
    if relative not in written:
        raise ConfigError(f"{path} is no file that `headstudy configure` writes for this {PARAMS_FILE}: {remedy}")
    if not path.is_file():
        raise ConfigError(f"{path} not found: {remedy}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} cannot be read ({error}): {remedy}") from None
    if text_digest(text) != written[relative]:
        raise ConfigError(
            f"{path} differs from what `headstudy configure` wrote from {PARAMS_FILE} and conf/ (truncated, "
            f"edited, or not YAML): {remedy}"
        )
    prepare = yaml.safe_load(text) if relative == "prepare.yaml" else {}
    if "corpus_sha256" in prepare and prepare["corpus_sha256"] != corpus_digests(str(prepare["data"]["dir"])):
        raise ConfigError(
            f"{path} differs from what `headstudy configure` writes now: the .txt files of data.dir changed "
            f"since it ran: {remedy}"
        )


def resolve(params: dict, overrides: list[str] = ()) -> dict[str, DictConfig]:
    """Every stage's config file, by its path under configs/."""
    models = study_models(params)
    check_budget(params)
    partners = partner_models(params)
    files: dict[str, DictConfig] = {}
    for model in models:
        files[f"train/{model['name']}.yaml"] = training_file(model, params, overrides)
    # After the models: a variant that cannot be built is named as such, not as a pair it is in.
    report = check_report(params)
    # After the study's own models: a setting they share is blamed on its key, not on a variant.
    check_waiting_variants(params, models)
    for run in diagnosis_runs(params, models):
        files[f"diagnose/{run['name']}.yaml"] = diagnosis_file(
            run["model"], run["arm"], run["settings"], params, overrides
        )
    shared = compose_config(list(overrides), params)
    for clues in dict.fromkeys(model["clues"] for model in models if model["clues"] is not None):
        files[f"prepare/k{clues}.yaml"] = task_file(clues, params, overrides)
    files["prepare.yaml"] = prepare_file(shared)
    files["baselines.yaml"] = stage_config("baselines", shared)
    inspect = stage_config("inspect", shared)
    inspect.models = [
        {"name": model["name"], "training": training_section(files[f"train/{model['name']}.yaml"])} for model in models
    ]  # in study order
    files["inspect.yaml"] = inspect
    files["report.yaml"] = report_file(params, [*partners, *models], report, shared)
    return files


def prepare_file(config: DictConfig) -> DictConfig:
    """prepare's config; for a study on its own corpus (data.corpus: textdir), with the sha256 of
    every .txt file that prepare reads (corpus_sha256): a corpus file edited, added or removed
    changes configs/prepare.yaml, so DVC reruns prepare and all that depends on it. The configure
    stage depends on the corpus folder (check_corpus_dependency); every other corpus adds nothing."""
    prepare = stage_config("prepare", config)
    if config.data.get("corpus") == "textdir":
        prepare.corpus_sha256 = corpus_digests(str(config.data.dir))
    return prepare


def corpus_digests(folder: str) -> list[str]:
    """`SHA256  PATH` of each .txt file under the folder, PATH relative to it, in the order
    prepare reads them (prepare.read_text_folder)."""
    root = Path(folder)
    files = sorted(root.rglob("*.txt")) if root.is_dir() else []
    if not files:
        raise ConfigError(f"data.dir={folder}: expected a folder holding .txt files, found none")
    digests = []
    for path in files:
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as error:  # a broken link, a folder named .txt, no permission
            raise ConfigError(
                f"{path} cannot be read ({error.strerror or error}): data.dir must hold only text files"
            ) from None
        digests.append(f"{digest}  {path.relative_to(root).as_posix()}")
    return digests


def check_corpus_dependency(prepare: DictConfig, pipeline: Path = Path("dvc.yaml")) -> None:
    """A textdir corpus must lie in a folder that this study's configure stage depends on (the
    project's corpus/): else DVC would never rerun configure when the corpus changes, and every
    result would stay that of the old text. A study without a dvc.yaml reruns nothing by itself."""
    if prepare.data.get("corpus") != "textdir" or not pipeline.is_file():
        return
    try:
        stages = (yaml.safe_load(pipeline.read_text(encoding="utf-8")) or {}).get("stages") or {}
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError):
        return  # DVC names what is wrong with its own file
    deps = (stages.get("configure") or {}).get("deps") or [] if isinstance(stages, dict) else []
    folder = Path(prepare.data.dir).resolve()
    tracked = [Path(dep).resolve() for dep in deps if isinstance(dep, str)]
    if not any(dep == folder or dep in folder.parents for dep in tracked):
        raise ConfigError(
            f"data.dir={prepare.data.dir} is in no folder that the configure stage of {pipeline} depends on "
            f"({', '.join(str(dep) for dep in deps if isinstance(dep, str))}), so a change of the corpus would "
            "rerun nothing: put the .txt files in corpus/, or add the folder to that stage's deps"
        )


def report_file(params: dict, models: list[dict], report: dict, shared: DictConfig) -> DictConfig:
    """The report's config: the study, its report: section and every model it reads, a partner's
    (study.partners) with the metrics/ folder of the study that trained it; study.variants there
    is every variant the report sets side by side."""
    summary = stage_config("report", shared)
    summary.study = OmegaConf.create(params["study"])
    if params["study"].get("partners"):
        summary.study.variants = report_variants(params)
    summary.report = OmegaConf.create(report)
    summary.models = [
        {key: model[key] for key in ("name", "variant", "seed", "lr", "clues", "metrics") if key in model}
        for model in models
    ]
    runs = diagnosis_runs(params, models)
    if runs:  # a diagnosis study's report reads each run's diagnostics
        summary.runs = [{"name": run["name"], "model": run["model"]["name"], "arm": run["arm"]} for run in runs]
    return summary


def configure(folder: Path = CONFIGS) -> None:
    params = read_params(required=True)
    files = resolve(params)
    check_corpus_dependency(files["prepare.yaml"])
    texts = {relative: config_text(config) for relative, config in files.items()}
    with staged_folder(folder) as staging:
        for relative, text in texts.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        # What each stage checks its file against (check_stage_file), so that no stage composes the study again.
        digests = {relative: text_digest(text) for relative, text in texts.items()}
        write_json(staging / DIGESTS_FILE, {"inputs": inputs_digest(params), "files": digests})
    print(
        f"configure: {len(files)} config files in {folder}/, {sum(name.startswith('train/') for name in files)} models"
    )
    warnings = {precision_warning(config.trainer) for config in files.values() if "trainer" in config}
    for warning in sorted(warnings - {None}):
        print(f"configure: warning: {warning}", file=sys.stderr)


def main(args: list[str]) -> None:
    if args:
        raise ConfigError(f"configure takes no overrides (got {' '.join(args)}): edit params.yaml or conf/")
    configure()
