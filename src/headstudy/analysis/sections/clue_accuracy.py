"""The spotlight study's analysis, from the score stage's metrics: accuracy at the answer
positions against the number of clues k, one line per variant, with 95% CIs over seeds; the
paired gap between two variants at every k, the first pair beside the video's 75% against 35%;
and where the heads look, clue by clue. The report's blocks and its summary.json.

With report.success_accuracy set, the outcomes are read as bimodal (a training learns the task or
stalls): the accuracy table and the comparisons give successes out of seeds, medians and every
seed's value instead of a mean with a t-interval, which over a few bimodal seeds describes
nothing; the means and intervals stay in summary.json."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from headstudy.analysis.figures import clues as clue_figures
from headstudy.analysis.rendering.headline import estimate
from headstudy.analysis.rendering.wording import label, mid_sentence
from headstudy.analysis.sections import answer_types, clue_ablation, extra_runs
from headstudy.analysis.statistics import mean_ci95


def percent(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def points(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.1f}"


def with_interval(mean: float, low: float, high: float, show=percent) -> str:
    return show(mean) if math.isnan(low) else f"{show(mean)} [{show(low)}, {show(high)}]"


def success_threshold(settings: dict) -> float | None:
    """report.success_accuracy: the accuracy at or above which a training counts as a success; None
    when absent (its range checked by configure, settings/schema.py)."""
    value = settings.get("success_accuracy")
    return None if value is None else float(value)


def successes(accuracy: list[float], threshold: float) -> int:
    return sum(value >= threshold for value in accuracy)


def accuracy_rows(
    models: list[dict], variants: list[str], ks: list[int], labels: dict, threshold: float | None = None
) -> list[dict]:
    """Per variant and k: accuracy per seed, their mean and 95% CI, their median (and, given a
    success threshold, how many seeds reach it); the clue-reading measures."""
    rows = []
    for variant in variants:
        for k in ks:
            group = sorted((m for m in models if m["variant"] == variant and m["k"] == k), key=lambda m: m["seed"])
            if not group:
                continue
            accuracy = [m["accuracy"] for m in group]
            mean, low, high = mean_ci95(accuracy)
            low, high = float(np.clip(low, 0, 1)), float(np.clip(high, 0, 1))  # an accuracy stays in [0, 1]
            focused = np.clip(mean_ci95([m["clues_focused"] for m in group]), 0, k).tolist()
            best = np.mean([m["attention"][0]["best"] for m in group], axis=0)
            rows.append(
                {
                    "variant": variant,
                    "label": label(variant, labels),
                    "k": k,
                    "heads": group[0]["heads"],
                    "params": group[0]["params"],
                    "seeds": [m["seed"] for m in group],
                    "accuracy": accuracy,
                    "accuracy_mean": mean,
                    "accuracy_ci95": [low, high],
                    "accuracy_median": float(np.median(accuracy)),
                    **({} if threshold is None else {"successes": successes(accuracy, threshold)}),
                    "clues_focused_mean": focused[0],
                    "clues_focused_ci95": list(focused[1:]),
                    "best_share": best.tolist(),
                    "chance": group[0]["chance"],
                    "one_clue_best": group[0]["one_clue_best"],
                }
            )
    return rows


def gaps(models: list[dict], a: str, b: str, ks: list[int], threshold: float | None = None) -> list[dict]:
    """Accuracy of b minus a at every k, paired by seed (same seed, same data): mean with its 95%
    CI, and median; given a success threshold, each variant's successes among the paired seeds."""
    found = []
    for k in ks:
        by_seed = {
            variant: {m["seed"]: m["accuracy"] for m in models if m["variant"] == variant and m["k"] == k}
            for variant in (a, b)
        }
        seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
        if not seeds:
            continue
        differences = [by_seed[b][s] - by_seed[a][s] for s in seeds]
        mean, low, high = mean_ci95(differences)
        found.append(
            {
                "k": k,
                "a": a,
                "b": b,
                "seeds": seeds,
                "per_seed": differences,
                "diff_mean": mean,
                "diff_ci95": [low, high],
                "diff_median": float(np.median(differences)),
                "b_better_in": sum(d > 0 for d in differences),
                "significant": bool(low > 0 or high < 0),
            }
        )
        if threshold is not None:
            found[-1]["a_successes"] = successes([by_seed[a][s] for s in seeds], threshold)
            found[-1]["b_successes"] = successes([by_seed[b][s] for s in seeds], threshold)
    return found


def accuracy_table(rows: list[dict], ks: list[int]) -> pd.DataFrame:
    table = {"Model": [], "Parameters": []}
    for k in ks:
        table[f"k = {k}"] = []
    labels = list(dict.fromkeys(r["label"] for r in rows))
    for name in labels:
        mine = {r["k"]: r for r in rows if r["label"] == name}
        first = next(iter(mine.values()))
        table["Model"].append(name)
        table["Parameters"].append(f"{first['params']:,}")
        for k in ks:
            row = mine.get(k)
            table[f"k = {k}"].append("" if row is None else with_interval(row["accuracy_mean"], *row["accuracy_ci95"]))
    for name, key in (("Best from one clue", "one_clue_best"), ("Chance", "chance")):
        table["Model"].append(name)
        table["Parameters"].append("")
        for k in ks:
            level = next((r[key] for r in rows if r["k"] == k), None)
            table[f"k = {k}"].append("" if level is None else percent(level))
    return pd.DataFrame(table)


def seed_values(rows: list[dict]) -> tuple[str, list[str]]:
    """A column of each row's accuracy per seed, in seed order, in percent: the seeds in the header
    when every row has the same ones, else beside each value."""
    same = all(r["seeds"] == rows[0]["seeds"] for r in rows)
    header = f"Per seed ({', '.join(map(str, rows[0]['seeds']))}), %" if same else "Per seed, %"
    cells = [
        ", ".join(
            f"{100 * value:.1f}" if same else f"{100 * value:.1f} (seed {seed})"
            for seed, value in zip(r["seeds"], r["accuracy"], strict=True)
        )
        for r in rows
    ]
    return header, cells


def threshold_text(threshold: float) -> str:
    return f"{100 * threshold:g}%"


def outcome_table(rows: list[dict], threshold: float) -> pd.DataFrame:
    """Per k and variant: the seeds that reached the success threshold, the median accuracy and
    every seed's accuracy (no mean: a mean of bimodal outcomes lies between the modes)."""
    ordered = sorted(rows, key=lambda r: r["k"])  # stable: within a k, the study's order of variants
    header, cells = seed_values(ordered)
    return pd.DataFrame(
        {
            "k": [str(r["k"]) for r in ordered],
            "Model": [r["label"] for r in ordered],
            "Parameters": [f"{r['params']:,}" for r in ordered],
            f"Succeeded (>= {threshold_text(threshold)})": [f"{r['successes']} of {len(r['seeds'])}" for r in ordered],
            "Median": [percent(r["accuracy_median"]) for r in ordered],
            header: cells,
        }
    )


def levels_sentence(levels: dict[int, dict]) -> str:
    ks = sorted(levels)
    return (
        f"At k = {', '.join(map(str, ks))}, chance is {', '.join(percent(levels[k]['chance']) for k in ks)} and the "
        f"best a model reading one clue can do {', '.join(percent(levels[k]['one_clue_best']) for k in ks)}."
    )


def success_gap_table(found: list[dict], labels: dict) -> pd.DataFrame:
    """Per k: each variant's successes among the paired seeds, the median paired gap and every seed's gap."""
    a, b = label(found[0]["a"], labels), label(found[0]["b"], labels)
    return pd.DataFrame(
        {
            "k": [str(g["k"]) for g in found],
            f"{b} succeeded": [f"{g['b_successes']} of {len(g['seeds'])}" for g in found],
            f"{a} succeeded": [f"{g['a_successes']} of {len(g['seeds'])}" for g in found],
            f"Median gap ({b} minus {a}), points": [points(g["diff_median"]) for g in found],
            "Per seed": [", ".join(points(d) for d in g["per_seed"]) for g in found],
            "Better in": [f"{g['b_better_in']} of {len(g['seeds'])} seeds" for g in found],
        }
    )


def gap_table(found: list[dict], labels: dict) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "k": [str(g["k"]) for g in found],
            f"{label(found[0]['b'], labels)} minus {label(found[0]['a'], labels)}, points": [
                with_interval(g["diff_mean"], *g["diff_ci95"], show=points) for g in found
            ],
            "Per seed": [", ".join(points(d) for d in g["per_seed"]) for g in found],
            "Better in": [f"{g['b_better_in']} of {len(g['seeds'])} seeds" for g in found],
        }
    )


def gap_sentence(found: list[dict], rows: list[dict], labels: dict, video: dict | None) -> tuple[str, dict]:
    a, b = found[0]["a"], found[0]["b"]
    largest = max(found, key=lambda g: g["diff_mean"])
    accuracy = {(r["variant"], r["k"]): r["accuracy_mean"] for r in rows}
    k = largest["k"]
    low, high = largest["diff_ci95"]
    n = len(largest["seeds"])
    text = (
        f"The gap between {mid_sentence(label(b, labels))} and {mid_sentence(label(a, labels))} is largest at k = {k}: "
        f"{percent(accuracy[(b, k)])} against {percent(accuracy[(a, k)])}, "
        f"{points(largest['diff_mean'])} points"
    )
    text += (
        " (one seed: no interval, so no claim)."
        if n < 2
        else f", 95% CI [{points(low)}, {points(high)}] over {n} seeds, which "
        + ("excludes 0." if largest["significant"] else "includes 0: not resolved by these seeds.")
    )
    text += video_sentence(video)
    return text, {
        "k": k,
        "diff_mean": largest["diff_mean"],
        "diff_ci95": [low, high],
        "significant": largest["significant"],
    }


def video_sentence(video: dict | None) -> str:
    if not video:
        return ""
    gap = video["multi_accuracy"] - video["single_accuracy"]
    return (
        f" The video's comparison, {percent(video['multi_accuracy'])} for {video['multi']} spotlights against "
        f"{percent(video['single_accuracy'])} for {video['single']}, is a gap of {points(gap)} points; it "
        "names no task or model, so it is an illustration to hold ours against, not a measurement."
    )


def success_gap_sentence(found: list[dict], labels: dict, video: dict | None) -> tuple[str, dict]:
    """Where the median paired gap is largest, with both variants' success counts there; no
    t-interval, which over a few bimodal outcomes describes nothing."""
    largest = max(found, key=lambda g: g["diff_median"])
    n = len(largest["seeds"])
    name_a, name_b = (mid_sentence(label(largest[side], labels)) for side in ("a", "b"))
    text = (
        f"The median gap between {name_b} and {name_a} "
        f"is largest at k = {largest['k']}: {name_b} succeeded in "
        f"{largest['b_successes']} of {n} seeds, {name_a} in {largest['a_successes']} "
        f"of {n}; median gap {points(largest['diff_median'])} points (per seed "
        f"{', '.join(points(d) for d in largest['per_seed'])})."
    )
    return text + video_sentence(video), {
        "by": "median",
        **{key: largest[key] for key in ("k", "diff_median", "a_successes", "b_successes")},
        **{key: largest[key] for key in ("diff_mean", "diff_ci95", "significant")},
    }


def attention_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Model": [r["label"] for r in rows],
            "k": [str(r["k"]) for r in rows],
            "Clues read by a head of their own, per answer": [
                with_interval(r["clues_focused_mean"], *r["clues_focused_ci95"], show=lambda v: f"{v:.2f}")
                + f" of {r['k']}"
                for r in rows
            ],
            "Largest weight any head puts on each clue (a, b, c, ...)": [
                ", ".join(f"{v:.2f}" for v in r["best_share"]) for r in rows
            ],
        }
    )


def head_assignments(models: list[dict], focus: float) -> list[dict]:
    """Per model: for each head, the clue it gives most of its weight to, on average over the
    queries (share > focus), or None; and whether two heads take the same clue."""
    found = []
    for model in models:
        share = np.asarray(model["attention"][0]["share"])
        takes = [int(row.argmax()) if row.max() > focus else None for row in share]
        taken = [clue for clue in takes if clue is not None]
        found.append(
            {
                "name": model["name"],
                "variant": model["variant"],
                "k": model["k"],
                "seed": model["seed"],
                "takes": takes,
                "distinct": len(set(taken)),
                "shared": len(taken) - len(set(taken)),
            }
        )
    return found


def assignment_sentence(assigned: list[dict], rows: list[dict], focus: float) -> str:
    parts = []
    for row in rows:
        if row["heads"] < 2 or row["k"] < 2:
            continue
        mine = [a for a in assigned if a["variant"] == row["variant"] and a["k"] == row["k"]]
        distinct = [a["distinct"] for a in mine]
        parts.append(
            f"{mid_sentence(row['label'])} at k = {row['k']}: {', '.join(map(str, distinct))} distinct clues "
            f"(seeds {', '.join(str(a['seed']) for a in mine)})"
        )
    if not parts:
        return ""
    return (
        f"Different heads, different clues? Counting, per trained model, the clues that some head gives more "
        f"than {focus:g} of its weight on average over the test answers: " + "; ".join(parts) + "."
    )


def gap_headline(comparison: dict, labels: dict) -> str:
    """One line of the report's headline box: B's accuracy minus A's at every k, in points, with its CI."""
    gaps = []
    for gap in comparison["by_k"]:
        low, high = gap["diff_ci95"]
        ci = "" if math.isnan(low) or math.isnan(high) else f" [{100 * low:+.1f}, {100 * high:+.1f}]"
        gaps.append(f"k = {gap['k']}: {100 * gap['diff_mean']:+.1f}{ci}")
    return (
        f"{label(comparison['b'], labels)} against {label(comparison['a'], labels)}, accuracy at the answer in "
        f"points (paired by seed, 95% CI): {'; '.join(gaps)}."
    )


def success_headline(comparison: dict, labels: dict, threshold: float) -> str:
    """One line of the headline box: successes of B and A out of the paired seeds and the median
    paired gap in points, at every k."""
    at = [
        f"k = {g['k']}: {g['b_successes']} and {g['a_successes']} of {len(g['seeds'])}, {points(g['diff_median'])}"
        for g in comparison["by_k"]
    ]
    return (
        f"{label(comparison['b'], labels)} against {label(comparison['a'], labels)}, seeds that succeeded (accuracy "
        f">= {threshold_text(threshold)}) and the median gap in points (paired by seed): {'; '.join(at)}."
    )


def headline(summary: dict) -> dict[str, dict[str, float]]:
    """The spotlight study's files of reports/metrics/ (analysis/rendering/headline.py): `accuracy_pct/k{K}/VARIANT`
    (mean over seeds, with its CI) and `gap_points/B_vs_A/k{K}` (B's accuracy minus A's in points,
    paired by seed, with its CI). How many clues the heads focus on, and the k of each pair's
    largest gap, are in summary.json.

    With a success threshold (summary's success_accuracy), means of bimodal outcomes say little,
    so the files are instead `successes_of_{SEEDS}/k{K}/VARIANT` (the seeds that reached it) and
    `median_gap_points/B_vs_A/k{K}` (the median of B's accuracy minus A's, paired by seed, in
    points); the means and their CIs stay in summary.json."""
    if summary.get("success_accuracy") is not None:
        found = {
            f"successes_of_{len(row['seeds'])}/k{row['k']}/{row['variant']}": estimate(row["successes"])
            for row in summary["rows"]
        }
        for comparison in summary["comparisons"]:
            pair = f"{comparison['b']}_vs_{comparison['a']}"
            for gap in comparison["by_k"]:
                found[f"median_gap_points/{pair}/k{gap['k']}"] = estimate(gap["diff_median"], scale=100)
        return {name: numbers for name, numbers in found.items() if math.isfinite(numbers["estimate"])}
    found = {
        f"accuracy_pct/k{row['k']}/{row['variant']}": estimate(row["accuracy_mean"], row.get("accuracy_ci95"), 100)
        for row in summary["rows"]
    }
    for comparison in summary["comparisons"]:
        pair = f"{comparison['b']}_vs_{comparison['a']}"
        for gap in comparison["by_k"]:
            found[f"gap_points/{pair}/k{gap['k']}"] = estimate(gap["diff_mean"], gap.get("diff_ci95"), 100)
    return {name: numbers for name, numbers in found.items() if math.isfinite(numbers["estimate"])}


def accuracy_blocks(models: list[dict], rows: list[dict], ks: list[int], threshold: float | None, figure_dir: Path):
    """The accuracy section: its introduction, table and figure; with a success threshold, successes,
    medians and every seed instead of means with t-intervals."""
    levels = {r["k"]: {"chance": r["chance"], "one_clue_best": r["one_clue_best"]} for r in rows}
    values = round(levels[ks[0]]["one_clue_best"] / levels[ks[0]]["chance"])
    seeds = ", ".join(map(str, sorted({m["seed"] for m in models})))
    task = (
        f"Accuracy at the {models[0]['queries']:,} answer positions of the test split: the share of queries where "
        f"the model's most likely next token is the right answer, one token out of {values}^k. "
    )
    levels_text = (
        f"Chance is 1/{values}^k; a model that reads only one of the k clues can reach at most 1/{values}^(k-1). The "
        "task, and why a one-layer model with enough heads can solve it: README.md beside the study's params.yaml."
    )
    if threshold is None:
        lines = [
            {
                "label": mine[0]["label"],
                "k": [r["k"] for r in mine],
                "mean": [r["accuracy_mean"] for r in mine],
                "low": [r["accuracy_ci95"][0] for r in mine],
                "high": [r["accuracy_ci95"][1] for r in mine],
            }
            for mine in rows_by_variant(rows)
        ]
        return levels, [
            ("text", f"{task}Mean over seeds {seeds} with a 95% Student-t interval, cut to [0%, 100%]. {levels_text}"),
            ("table", accuracy_table(rows, ks)),
            (
                "figure",
                (
                    clue_figures.accuracy_by_clues(lines, levels, figure_dir / "accuracy_by_clues.png"),
                    "Accuracy at the answer against the number of clues k, one line per variant (mean over seeds, "
                    "95% CI); chance and the best a model reading one clue can do, dashed.",
                ),
            ),
        ]
    lines = [
        {
            "label": mine[0]["label"],
            "k": [r["k"] for r in mine],
            "median": [r["accuracy_median"] for r in mine],
            "per_seed": [r["accuracy"] for r in mine],
        }
        for mine in rows_by_variant(rows)
    ]
    return levels, [
        (
            "text",
            task + f"A training either learns this task or stalls, so each variant and k is given as the seeds that "
            f"succeeded (test accuracy at or above {threshold_text(threshold)}, report.success_accuracy), the median "
            f"over seeds {seeds} and every seed's value. A mean with a t-interval over a few such seeds would lie "
            "between the two outcomes and describe neither; it stays in summary.json. " + levels_text,
        ),
        ("table", outcome_table(rows, threshold)),
        ("text", levels_sentence(levels)),
        (
            "figure",
            (
                clue_figures.accuracy_per_seed(lines, levels, threshold, figure_dir / "accuracy_by_clues.png"),
                "Accuracy at the answer against the number of clues k: the median over seeds per variant (line) "
                f"and each seed (dots); the success threshold ({threshold_text(threshold)}), chance and the best a "
                "model reading one clue can do, dashed and dotted.",
            ),
        ),
    ]


def rows_by_variant(rows: list[dict]) -> list[list[dict]]:
    """The rows grouped by variant, in the study's order of variants."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    return [[r for r in rows if r["variant"] == variant] for variant in variants]


def spotlight_report(
    models: list[dict],
    variants: list[str],
    ks: list[int],
    focus: float,
    settings: dict,
    figure_dir: Path,
    ablations: dict[str, dict] | None = None,
    extras: list[dict] | None = None,
    answers: dict[str, dict] | None = None,
) -> tuple[list, dict]:
    """The report's blocks and its summary, from every model's metrics and clue attention
    (models: name, variant, seed, k, the metrics, attention: the layers of its attention file);
    ablations: the ablate stage's metrics/ablation/NAME.json by model name, for the models that
    have one; extras: report.extra's runs beside the grid, each {title, note, metrics, runs: {NAME:
    score metrics}} (analysis/sections/extra_runs.py); answers: the answers stage's split by model
    name, for the models that have one (analysis/sections/answer_types.py)."""
    labels = {str(key): value for key, value in settings.get("labels", {}).items()}
    threshold = success_threshold(settings)
    rows = accuracy_rows(models, variants, ks, labels, threshold)
    levels, accuracy = accuracy_blocks(models, rows, ks, threshold, figure_dir)
    blocks = [("title", settings["title"]), *accuracy]
    if settings.get("measured_time"):  # stated in params.yaml: a report never reads the clock
        blocks.insert(2, ("text", f"Time to regenerate the study, as measured: {settings['measured_time']}."))
    summary = {"rows": rows, "levels": {str(k): v for k, v in levels.items()}}
    if threshold is not None:
        summary["success_accuracy"] = threshold
    compare = [[str(v) for v in pair] for pair in settings.get("compare") or []]
    summary["comparisons"] = []
    for number, (a, b) in enumerate(compare):
        found = gaps(models, a, b, ks, threshold)
        if not found:
            continue
        video = settings.get("video_claim") if number == 0 else None
        if threshold is None:
            table = gap_table(found, labels)
            text, largest = gap_sentence(found, rows, labels, video)
        else:
            table = success_gap_table(found, labels)
            text, largest = success_gap_sentence(found, labels, video)
        blocks += [("heading", f"{label(b, labels)} against {label(a, labels)}"), ("table", table), ("text", text)]
        summary["comparisons"].append({"a": a, "b": b, "by_k": found, "largest": largest})
    if summary["comparisons"]:
        lines = [
            gap_headline(c, labels) if threshold is None else success_headline(c, labels, threshold)
            for c in summary["comparisons"]
        ]
        blocks.insert(1, ("headline", lines))
    if answers:
        split, summary["answer_types"] = answer_types.answer_type_blocks(models, answers, variants, ks, labels)
        blocks += split
    if extras:
        extra, summary["extra"] = extra_runs.extra_blocks(extras, threshold)
        blocks += extra
    cells = {}
    for variant in variants:
        for k in ks:
            first = [m for m in models if m["variant"] == variant and m["k"] == k]
            if first:
                cells[(variant, k)] = np.asarray(min(first, key=lambda m: m["seed"])["attention"][0]["share"])
    assigned = head_assignments(models, focus)
    blocks += [
        ("heading", "Where the heads look"),
        (
            "text",
            "From the query, in the only layer: the weight each head puts on each clue (the latest token of its "
            "type; the clue positions are known by construction). A clue is read by a head of its own at an "
            f"answer when some head puts more than {focus:g} of its weight on it: a head can do that for one "
            "token only, so a count above 1 means that different heads take different clues. Mean over seeds "
            "with a 95% interval; the largest weight on each clue is averaged over answers and seeds.",
        ),
        ("table", attention_table(rows)),
        (
            "figure",
            (
                clue_figures.clue_attention_grid(
                    cells,
                    variants,
                    {v: label(v, labels) for v in variants},
                    ks,
                    figure_dir / "clue_attention.png",
                    "Mean share of each head's attention on each clue (first seed; heads ordered by their clue)",
                ),
                "A heat map per variant (rows) and number of clues k (columns): the mean share of each head's "
                "attention from the query on each clue, the first seed's model, heads ordered by the clue they "
                "look at most.",
            ),
        ),
    ]
    sentence = assignment_sentence(assigned, rows, focus)
    if sentence:
        blocks.append(("text", sentence))
    summary["assignments"] = assigned
    if ablations:
        causal, summary["ablation"] = clue_ablation.ablation_section(
            models, ablations, labels, threshold, figure_dir / "ablation_drops.png"
        )
        blocks += causal
    return blocks, summary
