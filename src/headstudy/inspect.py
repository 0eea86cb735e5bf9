"""Stage `inspect`: what each attention head follows, what it is worth, and whether several
heads look at more places than one, on the whole test split of every model of the study.

It reads configs/inspect.yaml (the study's models, inspect settings and paths), the prepared test
split and its tokenizer, and every trained model; the measures are analysis/measures/attention.py's, the
figures analysis/figures/heads.py's. It writes reports/heads.json and reports/figures/heads/.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer

from headstudy.analysis.figures import heads as head_figures
from headstudy.analysis.measures.attention import (
    ORDER_KEY,
    Coverage,
    fair_null,
    head_rows,
    layer_rows,
    measure_model,
    null_thresholds,
    sentence_maps,
    spotlight_null,
)
from headstudy.analysis.statistics import nan_to_null
from headstudy.common.errors import ConfigError, first_line
from headstudy.common.files import write_json
from headstudy.execution import guards, jobs
from headstudy.formats.prepared import TOKENIZER_FILE, load_tokens
from headstudy.formats.trained import load_trained


def sentence_ids(tokenizer: Tokenizer, sentence: str, test_tokens: np.ndarray) -> list[int]:
    if sentence not in tokenizer.decode(np.asarray(test_tokens).tolist()):
        raise ConfigError(f"inspect.sentence={sentence!r} does not occur in the test split")
    # Inside the stream every word follows a space: encode it the way the model saw it there.
    return tokenizer.encode(" " + sentence.strip()).ids


def measured_model(job: dict) -> tuple[int, dict, Coverage, list | None]:
    """One model of the study, in a worker process of its own or in this one: loaded (refused
    unless it is the model these settings ask for, trained on this data), measured on the test
    split, and its attention on the sentence when its maps are drawn."""
    torch.set_num_threads(job["threads"])
    model, _ = load_trained(OmegaConf.create(job["training"]))
    test = load_tokens(Path(job["prepared"]), "test")
    measured, coverage = measure_model(model, test, job["batch_size"], job["substantial"], job["thresholds"])
    maps = sentence_maps(model, job["ids"]) if job["draw"] else None
    return model.config.n_heads, measured, coverage, maps


def variant_fair_null(job: dict) -> dict:
    """One variant's fair null, in a worker process of its own or in this one: its models loaded
    and read together over the test split."""
    torch.set_num_threads(job["threads"])
    members = [
        {**entry, "model": load_trained(OmegaConf.create(training))[0]}
        for entry, training in zip(job["members"], job["trainings"], strict=True)
    ]
    test = load_tokens(Path(job["prepared"]), "test")
    return fair_null(members, job["variant"], test, *job["settings"])


def in_processes(function, jobs_to_run: list[dict], workers: int) -> Iterator[tuple[int, object]]:
    """Each job's result as it finishes, with its index: in this process, or in `workers`
    processes (spawned: a forked torch can hang in its thread pool)."""
    if workers == 1:
        yield from ((index, function(job)) for index, job in enumerate(jobs_to_run))
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(function, job): index for index, job in enumerate(jobs_to_run)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def workers_pay(job_cpu: float, start_cpu: float) -> bool:
    """Whether worker processes are worth starting: a job (its CPU seconds, measured on the first
    one in this process) takes longer than this process took to start, which every spawned worker
    pays again before its first job. A study's models take minutes each; a tiny test study's take
    milliseconds, where two workers cost seconds of imports."""
    return job_cpu > start_cpu


def inspect(config: DictConfig) -> dict:
    start_cpu = time.process_time()
    threads = jobs.torch_threads(config.threads)
    torch.set_num_threads(threads)
    settings = config.inspect
    prepared = Path(config.paths.prepared)
    test = load_tokens(prepared, "test")
    try:
        tokenizer = Tokenizer.from_file(str(prepared / TOKENIZER_FILE))
    except Exception as error:  # the tokenizers library raises its own untyped exceptions
        raise ConfigError(
            f"{prepared / TOKENIZER_FILE} is not a readable tokenizer ({first_line(error)}): "
            "prepare the data again (dvc repro prepare)"
        ) from None
    ids = sentence_ids(tokenizer, settings.sentence, test)
    labels = [tokenizer.decode([i]).strip() or repr(tokenizer.decode([i])) for i in ids]
    figure_dir = Path(config.paths.reports) / "figures" / "heads"
    thresholds = null_thresholds(settings.substantial_weight)
    trainings = {
        model.name: OmegaConf.to_container(
            OmegaConf.merge(model.training, {"name": model.name, "paths": config.paths}), resolve=True
        )
        for model in config.models
    }
    first_seeds = {}
    for name, training in trainings.items():  # each variant's first seed has its maps drawn
        first_seeds.setdefault(str(training["variant"]), name)
    to_run = [
        {
            "training": training,
            "prepared": str(prepared),
            "threads": threads,
            "batch_size": settings.batch_size,
            "substantial": settings.substantial_weight,
            "thresholds": thresholds,
            "ids": ids,
            "draw": first_seeds[str(training["variant"])] == name,
        }
        for name, training in trainings.items()
    ]
    results: dict[int, tuple] = {}
    started = time.monotonic()

    def record(done: int, index: int, result: tuple, workers: int) -> None:
        results[index] = result
        print(
            f"inspect: model {done} of {len(to_run)} ({workers} at a time), {list(trainings)[index]}: "
            + ", ".join(f"L{r['layer']}: {r['covered_positions']:.2f} positions covered" for r in result[1]["layers"])
            + f" ({time.monotonic() - started:.0f} s)"
        )

    first_cpu = time.process_time()
    record(1, 0, measured_model(to_run[0]), 1)
    spread = workers_pay(time.process_time() - first_cpu, start_cpu)
    workers = jobs.stage_workers(threads, len(to_run) - 1) if spread else 1
    for done, (index, result) in enumerate(in_processes(measured_model, to_run[1:], workers), 2):
        record(done, index + 1, result, workers)
    per_model, loaded, map_figures = [], [], []
    for index, training in enumerate(trainings.values()):
        heads, measured, coverage, maps = results[index]
        variant, seed = str(training["variant"]), training["seed"]
        per_model.append({"variant": variant, "heads": heads, "seed": seed, **measured})
        loaded.append(
            {
                "variant": variant,
                "heads": heads,
                "seed": seed,
                "coverage": coverage,
                "head_scores": measured["head_scores"],
            }
        )
        if maps is not None:
            drawn_maps = head_figures.model_attention_maps(
                maps, measured["head_scores"], labels, variant, seed, figure_dir
            )
            map_figures += [str(path) for path in drawn_maps]
    fair = settings.spotlight.fair_null
    fair_variants = [str(settings.spotlight.multi)] + [
        str(v)
        for v in fair.also
        if str(v) != str(settings.spotlight.multi) and any(m["variant"] == str(v) for m in loaded)
    ]
    present = {m["variant"] for m in loaded}
    spotlight = spotlight_null(loaded, str(settings.spotlight.multi), thresholds)
    if str(settings.spotlight.multi) in present:
        print(
            f"inspect: the single-head null, variant {settings.spotlight.multi} against unions of single heads "
            f"({time.monotonic() - started:.0f} s)"
        )
    fair_jobs = [
        {
            "variant": variant,
            "members": [
                {key: entry[key] for key in ("variant", "heads", "seed", "head_scores")}
                for entry in loaded
                if entry["variant"] == variant
            ],
            "trainings": [training for training in trainings.values() if str(training["variant"]) == variant],
            "prepared": str(prepared),
            "threads": threads,
            "settings": (settings.batch_size, thresholds, fair.max_unions, fair.sample_seed, fair.shuffles),
        }
        for variant in fair_variants
    ]
    fair_nulls: list = [None] * len(fair_jobs)
    # A variant's fair null reads each of its models over the test split again: at least a model's work.
    workers = jobs.stage_workers(threads, len(fair_jobs)) if spread else 1
    for index, result in in_processes(variant_fair_null, fair_jobs, workers):
        fair_nulls[index] = result
        if fair_jobs[index]["members"]:
            print(
                f"inspect: the fair null, variant {fair_jobs[index]['variant']}: unions of its own models' heads "
                f"({time.monotonic() - started:.0f} s)"
            )
    return {
        "sentence": settings.sentence,
        "substantial_weight": settings.substantial_weight,
        "roles": {name: dict(rule) for name, rule in settings.roles.items()},
        "heads_ordered_by": ORDER_KEY,
        "rows": head_rows(per_model, settings.roles),
        "layers": layer_rows(per_model),
        "spotlight": spotlight,
        "fair_null": {
            "max_unions": fair.max_unions,
            "sample_seed": fair.sample_seed,
            "shuffles": fair.shuffles,
            "alpha": fair.alpha,
            "overlap_margin": fair.overlap_margin,
            "predicted": str(settings.spotlight.multi),
            "variants": fair_nulls,
        },
        "models": per_model,
        "figures": {"attention_maps": map_figures},
    }


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    result = inspect(config)
    head_scores = head_figures.head_scores(
        result["rows"], Path(config.paths.reports) / "figures" / "heads" / "head_scores.png"
    )
    result["figures"]["head_scores"] = str(head_scores)
    fair = [variant for variant in result["fair_null"]["variants"] if variant["available"]]
    layers = sorted({row["layer"] for variant in fair for row in variant["rows"]})
    result["figures"]["spotlight_nulls"] = [
        str(
            head_figures.spotlight_nulls(
                result["spotlight"],
                fair,
                layer,
                Path(config.paths.reports) / "figures" / "heads" / f"spotlight_nulls_layer{layer}.png",
            )
        )
        for layer in layers
    ]
    write_json(Path(config.paths.reports) / "heads.json", nan_to_null(result))
    for row in result["spotlight"].get("rows", []):
        print(
            f"inspect: spotlight, layer {row['layer']}, threshold {row['threshold']:g}: variant "
            f"{result['spotlight']['multi']} covers {', '.join(f'{c:.2f}' for c in row['multi_covered'])} "
            f"positions per query; unions of single heads {row['null_min']:.2f} to {row['null_max']:.2f}: "
            f"{row['position']}"
        )
    for variant in fair:
        for row in variant["rows"]:
            against = "; ".join(
                f"{name} {row[key]['min']:.2f} to {row[key]['max']:.2f}: {row[key]['position']}"
                for key, name in (("cross_model", "unions across models"), ("rank_matched", "rank-matched"))
            )
            print(
                f"inspect: fair null, variant {variant['variant']}, layer {row['layer']}, threshold "
                f"{row['threshold']:g}: covers {', '.join(f'{c:.2f}' for c in row['multi_covered'])}; {against}"
            )
