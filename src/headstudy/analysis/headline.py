"""The study's headline numbers, flat and numeric, named to be read at a glance: what
reports/metrics.json holds for `dvc metrics show` and `dvc exp show`, and what the study's MLflow
run shows. Negative changes mean B is better than A."""

from __future__ import annotations

import math


def percent_changes(result: dict) -> dict:
    """A comparison's relative changes as percentages: per token, per word, and their CIs."""
    found = {}
    for unit, key in (("per_token", "relative"), ("per_word", "relative_per_word")):
        if key in result:
            found[unit] = 100 * result[key]
            low, high = result.get(f"{key}_ci95") or (result.get(f"{key}_ci95_low"), result.get(f"{key}_ci95_high"))
            found[f"{unit}_ci95_low"] = None if low is None else 100 * low
            found[f"{unit}_ci95_high"] = None if high is None else 100 * high
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


def report_metrics(summary: dict) -> dict[str, float]:
    """`test_ppl/VARIANT` (geometric mean over seeds); `change_pct/B_vs_A/per_token` and
    `per_word`, each with `_ci95_low` and `_ci95_high`; the 2 x 2's `contrast_pct/NAME/...`; a
    learning-rate study's `selected_lr/VARIANT`."""
    return numeric_leaves(
        {
            "test_ppl": {row["variant"]: row["test_ppl_mean"] for row in summary.get("rows", [])},
            "change_pct": {
                f"{c['variant_b']}_vs_{c['variant_a']}": percent_changes(c) for c in summary.get("comparisons", [])
            },
            "contrast_pct": {name: percent_changes(c) for name, c in (summary.get("contrasts") or {}).items()},
            "selected_lr": summary.get("selected_lr") or {},
        }
    )
