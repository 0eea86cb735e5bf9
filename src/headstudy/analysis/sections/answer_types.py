"""The grid's test answers split by type (the answers stage, analysis/measures/answer_types.py):
per number of clues and variant, how the answers where one recency slope must serve a recent and
an old clue fare against the others, seed by seed. Only where the answers stage ran and k has
conflict answers (k = 1 has none)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstudy.analysis.rendering.wording import label
from headstudy.analysis.sections.extra_runs import SPLIT_COLUMNS, answer_split

# A gap in points between conflict and other answers that a reader counts as one type lost more.
NOTABLE_POINTS = 10


def answer_type_rows(models: list[dict], answers: dict[str, dict], variants: list[str], ks: list[int], labels) -> list:
    """Per k and variant with a split: every seed's whole-answer accuracy, its accuracy on conflict
    answers and on the others, the points between them (others minus conflict), and within
    conflict answers the recent and the old clue's digit."""
    rows = []
    for k in ks:
        for variant in variants:
            group = sorted(
                (m for m in models if m["variant"] == variant and m["k"] == k and m["name"] in answers),
                key=lambda m: m["seed"],
            )
            splits = [answer_split(answers[m["name"]]) for m in group]
            if not splits or any(split["conflict_answers"] is None for split in splits):
                continue
            first = answers[group[0]["name"]]
            rows.append(
                {
                    "k": k,
                    "variant": variant,
                    "label": label(variant, labels),
                    "seeds": [m["seed"] for m in group],
                    "accuracy": [m["accuracy"] for m in group],
                    **{column: [split[column] for split in splits] for column in SPLIT_COLUMNS},
                    "conflict_share": first["conflict"]["answers"] / first["answers"],
                }
            )
    return rows


def points_lower(row: dict) -> list[float]:
    """Per seed, how many points the conflict answers are below the others."""
    return [
        100 * (other - conflict) for other, conflict in zip(row["other_answers"], row["conflict_answers"], strict=True)
    ]


def listed(values: list[float], scale: float = 100) -> str:
    return ", ".join(f"{scale * value:.0f}" for value in values)


def answer_type_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "k": [str(r["k"]) for r in rows],
            "Model": [r["label"] for r in rows],
            "Accuracy per seed, %": [listed(r["accuracy"]) for r in rows],
            "Conflict answers, %": [listed(r["conflict_answers"]) for r in rows],
            "Other answers, %": [listed(r["other_answers"]) for r in rows],
            f"Conflict >= {NOTABLE_POINTS} points lower": [
                f"{sum(gap >= NOTABLE_POINTS for gap in points_lower(r))} of {len(r['seeds'])}" for r in rows
            ],
        }
    )


def digit_table(rows: list[dict]) -> pd.DataFrame:
    """Within conflict answers, per seed: how often the recent and the old clue's digit are right
    (a table of its own, so that neither is wider than a page)."""
    return pd.DataFrame(
        {
            "k": [str(r["k"]) for r in rows],
            "Model": [r["label"] for r in rows],
            "Recent clue's digit, %": [listed(r["recent_digit"]) for r in rows],
            "Old clue's digit, %": [listed(r["old_digit"]) for r in rows],
        }
    )


def answer_type_blocks(models: list[dict], answers: dict[str, dict], variants, ks, labels) -> tuple[list, list]:
    """The section's heading, its note and its table; nothing where no model has a split."""
    rows = answer_type_rows(models, answers, variants, ks, labels)
    if not rows:
        return [], []
    shares = ", ".join(
        f"{100 * r['conflict_share']:.0f}% of the answers at k = {r['k']}" for r in {r["k"]: r for r in rows}.values()
    )
    seeds = ", ".join(map(str, rows[0]["seeds"]))
    note = (
        "The test answers of the grid's models split by type (the answers stage): conflict answers hold one clue "
        "at most 2 tokens before the query and another at least 10 back, where one recency slope cannot serve "
        f"both ({shares}); the others are the rest. Per seed ({seeds}), in percent: whole-answer "
        "accuracy and accuracy on each type (the first table), and within conflict answers how often the recent "
        "clue's digit and the old clue's are right (the second). A model that cannot serve both slopes loses "
        "mostly conflict answers, and within them the old clue's digit; so does one that has learned the recent "
        "clues and not yet the old ones, so a deficit alone does not tell a limit from a training under way. The "
        f"count column: seeds whose conflict answers are at least {NOTABLE_POINTS} points below the others."
    )
    summary = [
        {**{key: value for key, value in row.items() if key != "label"}, "points_lower": points_lower(row)}
        for row in rows
    ]
    for row in summary:
        row["median_points_lower"] = float(np.median(row["points_lower"]))
    return [
        ("heading", "Which answers the grid gets wrong"),
        ("text", note),
        ("table", answer_type_table(rows)),
        ("table", digit_table(rows)),
    ], summary
