"""The type and range of every setting, in one typed schema (pydantic): a composed config's
sections, and params.yaml's study: and report: sections. The sections that shape a training are the
training's own typed settings (weights/settings.py), so each of those is defined once. Each field
says in its description what it must be, and a value that is not is refused with its key, that
description and the value (`optimizer.lr must be a finite positive number, got -1`); a key no
section has is refused too. What one key cannot say alone (a head count that divides the width, a
precision this device trains in, the multi-clue task's own rules, a pair naming a variant of the
study) is checked beside it, in settings/compose.py and configure.py. Types are strict
(weights/settings.py's Settings says why)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from headstudy.weights.settings import ModelConfig, OptimizerSettings, Settings, TrainerSettings, setting, whole

# A head count (4) or a head count and a file of conf/variants/ (1-mix), as YAML gives either.
Variant = Annotated[str | int, Field(description="a variant")]


class Data(Settings):
    corpus: str = setting("ptb, textdir or multiclue")
    vocab_size: int = whole(257, " (byte-level BPE starts from the 256 bytes)")
    batch_size: int = whole(1)


class Splits(Settings):
    train: str = setting("the sha256 of the split's text")
    valid: str = setting("the sha256 of the split's text")
    test: str = setting("the sha256 of the split's text")


class PennTreebank(Data):
    corpus: Literal["ptb"] = setting("ptb")
    sha256: Splits = setting("the sha256 of each split's text (train, valid, test)")


class TextFolder(Data):
    corpus: Literal["textdir"] = setting("textdir")
    dir: str = setting("a folder of .txt files")
    valid_fraction: float = setting("a number in (0, 0.5)", gt=0, lt=0.5)
    test_fraction: float = setting("a number in (0, 0.5)", gt=0, lt=0.5)


class GeneratedTask(Data):
    """The multi-clue task's keys are checked by the task's own definition (tasks/multiclue.py),
    whose rules tie them to each other."""

    model_config = ConfigDict(extra="allow")
    corpus: Literal["multiclue"] = setting("multiclue")


CORPORA = {"ptb": PennTreebank, "textdir": TextFolder, "multiclue": GeneratedTask}


class Baselines(Settings):
    add_k: float = setting("a finite positive number (add-k smoothing)", gt=0)


class Role(Settings):
    score: str = setting("a head score of analysis/measures (previous_token, first_position, self)")
    above: float = setting("a number in [0, 1] (an attention share)", ge=0, le=1)


class FairNull(Settings):
    also: list[Variant] = setting("a list of variants")
    max_unions: int = whole(1)
    sample_seed: int = whole(0)
    shuffles: int = whole(1)
    alpha: float = setting("a number in (0, 1)", gt=0, lt=1)
    overlap_margin: float = setting("a number in [0, 1)", ge=0, lt=1)


class Spotlight(Settings):
    single: Variant = setting("a variant")
    multi: Variant = setting("a variant")
    fair_null: FairNull = setting("the fair null's settings")


class Inspect(Settings):
    sentence: str = setting("a sentence of the test split")
    batch_size: int = whole(1)
    roles: dict[str, Role] = setting("named head roles, each {score, above}")
    substantial_weight: float = setting("a number in (0, 1] (an attention share)", gt=0, le=1)
    spotlight: Spotlight = setting("the spotlight's settings")


class Diagnose(Settings):
    probe_every: int = whole(1)
    probe_windows: int = whole(1)
    clip_grad_norm: float | None = setting("null (no clipping) or a finite positive number", gt=0)


class Paths(Settings):
    model_config = ConfigDict(extra="allow")  # each stage's own folders


class Tracking(Settings):
    experiment: str = setting("an MLflow experiment name")


class Config(Settings):
    """A composed config, or the part of it a stage's file or a recorded run holds: the
    sections a training needs are required, the others checked where present."""

    variant: Variant | None = setting("a variant (H or H-NAME)", default=None)
    seed: int = whole(0)
    threads: int = whole(1)
    kernels: Literal["default", "avx2"] | None = setting(
        "default (the CPU's own kernels) or avx2 (PyTorch's CPU kernels pinned to AVX2)", default=None
    )
    name: str | None = setting("a model name", default=None)
    data: dict = setting("the data section")  # checked by its corpus's schema
    model: ModelConfig = setting("the model section")
    trainer: TrainerSettings = setting("the trainer section")
    optimizer: OptimizerSettings = setting("the optimizer section")
    baselines: Baselines | None = setting("the baselines section", default=None)
    inspect: Inspect | None = setting("the inspect section", default=None)
    diagnose: Diagnose | None = setting("the diagnose section", default=None)
    paths: Paths | None = setting("the paths section", default=None)
    tracking: Tracking | None = setting("the tracking section", default=None)


class ChapterClaim(Settings):
    a: Variant = setting("a variant of study.variants")
    b: Variant = setting("a variant of study.variants")
    ppl_a: float = setting("a positive number (the chapter's perplexity of variant a)", gt=0)
    ppl_b: float = setting("a positive number (the chapter's perplexity of variant b)", gt=0)


class VideoClaim(Settings):
    single: Variant = setting("a variant")
    multi: Variant = setting("a variant")
    single_accuracy: float = setting("a number in [0, 1] (an accuracy)", ge=0, le=1)
    multi_accuracy: float = setting("a number in [0, 1] (an accuracy)", ge=0, le=1)


class ExtraRuns(Settings):
    title: str = setting("a title", min_length=1)
    metrics: str = setting("a folder of score metrics files", min_length=1)
    note: str = setting("a note", default="")


class Budget(Settings):
    evidence: str = setting("a folder of the budget study's validation curves", min_length=1)
    beat_bigram_by: float = setting("a number in [0, 1) (how far below the bigram every variant ends)", ge=0, lt=1)
    max_gap_drift: float = setting("a positive number (the gap's largest move over the last quarter)", gt=0)


class Roundings(Settings):
    pairs: list[Annotated[list[Variant], Field(min_length=2, max_length=2)]] = setting(
        "a list of pairs [H, H-avx2] of variants: one model under two roundings", min_length=1
    )
    collapse_above: float = setting("a positive number (a test perplexity)", gt=0)
    within: float = setting("a fraction in (0, 1) (a relative difference in test perplexity)", gt=0, lt=1)


class Report(Settings):
    """params.yaml's report: section. Which variants its pairs and claims may name, and
    report.share's own rules, are checked beside it (configure.py)."""

    title: str = setting("the report's title")
    compare: list[Annotated[list[Variant], Field(min_length=2, max_length=2)]] = setting(
        "a list of pairs [A, B] of variants", default=[]
    )
    compare_with: list[Variant] = setting("a list of variants", default=[])
    chapter_claim: ChapterClaim | None = setting(
        "{a: VARIANT, b: VARIANT, ppl_a: PERPLEXITY, ppl_b: PERPLEXITY}", default=None
    )
    video_claim: VideoClaim | None = setting(
        "{single: VARIANT, multi: VARIANT, single_accuracy: A, multi_accuracy: A}", default=None
    )
    extra: list[ExtraRuns] | None = setting("a list of {title, metrics: FOLDER, note}", default=None)
    labels: dict[Variant, str] = setting("a label for each variant it names", default={})
    inspect: bool = setting("true or false", default=False)
    sweep: bool = setting("true or false", default=False)
    budget: Budget | None = setting("{evidence: FOLDER, beat_bigram_by: F, max_gap_drift: D}", default=None)
    length_against: str | None = setting("the folder of a study at another training length", default=None)
    reference: str | None = setting("a learning-rate study's reports/summary.json", default=None)
    measured_time: str | None = setting("the study's measured time, in words", default=None)
    pool_if_variance_ratio_below: float | None = setting("a number above 1 (a ratio of variances)", gt=1, default=None)
    success_accuracy: float | None = setting(
        "a number in (0, 1], the test accuracy at or above which a training counts as a success",
        gt=0,
        le=1,
        default=None,
    )
    roundings: Roundings | None = setting("{pairs: [[H, H-avx2], ...], collapse_above: PPL, within: F}", default=None)
    share: Any = setting(
        "{gap: [A, B], closed_by: C, collapse_above: PPL, resamples: N, seed: S} or a list", default=None
    )


class Partners(Settings):
    folder: str = setting("the folder of the study that trains them (../STUDY)")
    variants: list[Variant] = setting("a non-empty list of variants", min_length=1)


class Study(Settings):
    """params.yaml's study: section. What its lists may hold beyond their types (no repeats, a
    variant conf/ can build, arms and their settings, the rates' entry) is checked in configure.py."""

    variants: list[Variant] = setting("a non-empty list of variants", min_length=1)
    seeds: list[Annotated[int, Field(ge=0)]] = setting("a non-empty list of seeds (integers >= 0)", min_length=1)
    lrs: list[Annotated[float, Field(gt=0)]] | None = setting(
        "a non-empty list of learning rates (positive numbers)", min_length=1, default=None
    )
    clues: list[Annotated[int, Field(ge=1)]] | None = setting(
        "a non-empty list of clue counts (integers >= 1)", min_length=1, default=None
    )
    # An entry's name or one rate: settings/compose.py's selected_rates says which, for a run by hand too.
    rates: Any = setting("an entry of conf/selected_rates.yaml, or one learning rate", default=None)
    variant_overrides: dict[Variant, list[str]] | None = setting(
        "a map of variants to lists of KEY=VALUE", default=None
    )
    arms: list[str] | None = setting("a non-empty list of arm names", min_length=1, default=None)
    arm_overrides: dict[str, list[str]] | None = setting("a map of arms to lists of KEY=VALUE", default=None)
    partners: Partners | None = setting("{folder: ../STUDY, variants: [VARIANT, ...]}", default=None)


def study_problems(study: dict, where: str = "") -> list[str]:
    return errors_of(Study, study, "study.", where)


def report_problems(report: dict, where: str = "") -> list[str]:
    return errors_of(Report, report, "report.", where)


def problems(settings: dict) -> list[str]:
    """One line per key that breaks the schema, in the config's order."""
    found = errors_of(Config, settings, "")
    data = settings.get("data")
    if isinstance(data, dict):
        schema = CORPORA.get(data.get("corpus"))
        if schema is None:
            found.append(f"data.corpus must be {', '.join(CORPORA)}, got {data.get('corpus')!r}")
        else:
            found += errors_of(schema, data, "data.")
    return found


def errors_of(schema: type[Settings], settings: dict, prefix: str, where: str = "") -> list[str]:
    """The schema's problems with these settings, each key given with prefix (its section) and
    where (the file, for a section a user writes by hand)."""
    try:
        schema.model_validate(settings)
    except ValidationError as error:
        found: dict[str, str] = {}
        for detail in error.errors():
            key, description = field_at(schema, detail["loc"])
            if detail["type"] == "extra_forbidden":
                key = ".".join(map(str, detail["loc"]))
                found[key] = f"{prefix}{key}{where} is not a setting"
            elif key in found:  # a union's members each report the one value
                continue
            elif detail["type"] == "missing" and len(detail["loc"]) == key.count(".") + 1:  # not a pair's item
                found[key] = f"{prefix}{key}{where} is missing: expected {description}"
            else:
                found[key] = f"{prefix}{key}{where} must be {description}, got {value_at(settings, key)!r}"
        return list(found.values())
    return []


def field_at(schema: type[Settings], location: tuple) -> tuple[str, str]:
    """The dotted key of the setting an error is about, and its description: the error's
    location, less what it says below a setting (a list's index, a union member's type)."""
    keys: list[str] = []
    description, current = "", schema
    parts = list(location)
    while parts and current is not None:
        part = parts.pop(0)
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            field = current.model_fields[part]
            keys.append(str(part))
            description, current = field.description or "", section_type(field.annotation)
        elif isinstance(current, tuple) and current[0] is dict:  # a named entry: inspect.roles.NAME
            keys.append(str(part))
            current = current[1]
        else:
            break
    if not keys:
        keys.append(str(location[0]) if location else "")
    return ".".join(keys), description


def section_type(annotation: Any) -> Any:
    """What a field holds, for following an error's location below it: a section's schema,
    ("dict", schema) for named entries of one, or None for a value."""
    if get_origin(annotation) in (Union, type(int | None)):
        members = [member for member in get_args(annotation) if member is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    if get_origin(annotation) is dict:
        value_type = get_args(annotation)[1]
        return (dict, value_type) if isinstance(value_type, type) and issubclass(value_type, BaseModel) else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def value_at(settings: dict, key: str) -> Any:
    value: Any = settings
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
