"""The study's headline numbers, named to be read at a glance. Two shapes of the same numbers:

- reports/metrics/, for `dvc metrics show` and `dvc exp show`: one small file per number of the
  answer (`change_pct/4_vs_1.json`), each holding its `estimate` and, where there is one, its
  interval as `lower` and `upper`. A change's estimate is the mean over seeds with its 95% t CI,
  or, where the seeds' differences are not normal, the median with the sign test's
  distribution-free interval (its coverage, 93.8% with 5 seeds, is in the report), as the
  report's verdict states it. DVC tabulates a row per file and a column per key, so the table
  keeps three columns however many variants and comparisons a study has.
- report_metrics, flat (`change_pct/4_vs_1/per_token_ci95_lower`, or `..._interval_lower` for a
  median's), for the study's MLflow run: the comparisons first, as the report's headline gives
  them, each lower bound before its upper one.

Negative changes mean B is better than A."""

from __future__ import annotations

import math
from pathlib import Path

from headstudy.common.files import staged_folder, write_json


def percent_changes(result: dict) -> dict:
    """A comparison's relative changes as percentages: per token, per word, and their CIs. Where
    the seeds' differences are not normal (`normal` False), the median's changes with the sign
    test's distribution-free interval (`_interval_lower`, `_interval_upper`: its coverage is below
    95% with few seeds, so it is no `ci95`): the verdict's summary, since no 95% interval exists
    there without assuming normality."""
    median = result.get("normal") is False
    source, interval = (result["median"], "interval") if median else (result, "ci95")
    found = {}
    for unit, key in (("per_token", "relative"), ("per_word", "relative_per_word")):
        if key in source:
            found[unit] = 100 * source[key]
            low, high = source.get(f"{key}_ci95") or (source.get(f"{key}_ci95_low"), source.get(f"{key}_ci95_high"))
            found[f"{unit}_{interval}_lower"] = None if low is None else 100 * low
            found[f"{unit}_{interval}_upper"] = None if high is None else 100 * high
    return found


def numeric_leaves(tree: dict) -> dict[str, float]:
    """Every finite number in nested dicts, named by its path (`change_pct/4_vs_1/per_token`);
    lists, booleans, text and missing values are left out."""
    found: dict[str, float] = {}

    def walk(node, name: str) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                walk(child, f"{name}/{key}" if name else str(key))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node):
            found[name] = float(node)

    walk(tree, "")
    return found


def answered(summary: dict, key: str):
    """The summary's comparisons or contrasts, none where the models are undertrained (the report
    says why, in its `no_answer`): a number with a CI there would read as an answer."""
    return [] if summary.get("no_answer") else summary.get(key) or []


def report_metrics(summary: dict) -> dict[str, float]:
    """In the order a run's page lists them: `change_pct/B_vs_A/per_token` and `per_word`, each
    with `_ci95_lower` and `_ci95_upper`, in the headline's order; the 2 x 2's
    `contrast_pct/NAME/...`; `test_ppl/VARIANT` (geometric mean over seeds); a learning-rate
    study's `selected_lr/VARIANT`. No change or contrast where the models are undertrained."""
    return numeric_leaves(
        {
            "change_pct": {
                f"{c['variant_b']}_vs_{c['variant_a']}": percent_changes(c) for c in answered(summary, "comparisons")
            },
            "contrast_pct": {name: percent_changes(c) for name, c in (answered(summary, "contrasts") or {}).items()},
            "test_ppl": {row["variant"]: row["test_ppl_mean"] for row in summary.get("rows", [])},
            "selected_lr": summary.get("selected_lr") or {},
        }
    )


def estimate(value: float, ci95=None, scale: float = 1.0) -> dict[str, float]:
    """One file of reports/metrics/: `estimate` and, when both ends of its interval are finite,
    `lower` and `upper`, each times scale."""
    found = {"estimate": scale * value}
    low, high = ci95 if ci95 is not None else (None, None)
    if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
        found.update(lower=scale * low, upper=scale * high)
    return found


def per_token(result: dict) -> dict[str, float]:
    """A comparison's per-token change in percent, as a file of reports/metrics/: the mean and its
    95% t CI, or where the seeds' differences are not normal the median and its interval."""
    changes = percent_changes(result)
    interval = "ci95" if "per_token_ci95_lower" in changes else "interval"
    return estimate(
        changes["per_token"], (changes.get(f"per_token_{interval}_lower"), changes.get(f"per_token_{interval}_upper"))
    )


def metric_files(summary: dict) -> dict[str, dict[str, float]]:
    """reports/metrics/ of a report's summary, by name (the file's path without `.json`):
    `test_ppl/VARIANT` (geometric mean over seeds and its CI); `change_pct/B_vs_A` and the 2 x 2's
    `contrast_pct/NAME`, per token in percent with their CIs (none where the models are
    undertrained); a learning-rate study's `selected_lr/VARIANT`. Per-word changes stay in
    summary.json, the report and MLflow."""
    files = {
        f"test_ppl/{row['variant']}": estimate(row["test_ppl_mean"], row.get("test_ppl_ci95"))
        for row in summary.get("rows", [])
    }
    files.update(
        {f"change_pct/{c['variant_b']}_vs_{c['variant_a']}": per_token(c) for c in answered(summary, "comparisons")}
    )
    files.update({f"contrast_pct/{name}": per_token(c) for name, c in (answered(summary, "contrasts") or {}).items()})
    files.update({f"selected_lr/{variant}": estimate(lr) for variant, lr in (summary.get("selected_lr") or {}).items()})
    return {name: numbers for name, numbers in files.items() if math.isfinite(numbers["estimate"])}


def write_metric_files(folder: Path, files: dict[str, dict[str, float]]) -> None:
    """The folder whole, NAME.json per file: a number the study no longer has leaves no file behind."""
    with staged_folder(folder) as staging:
        for name, numbers in files.items():
            write_json(staging / f"{name}.json", numbers)
