"""Runs beside the study's grid, listed in its report (report.extra): each a folder of the score
stage's metrics files, NAME.json, from another pipeline (a learning-rate check, a longer budget for
the seeds that failed). One table per folder, a row per model sorted by name: its heads, seed, k,
learning rate (when the name has one, as formats/names.py writes it: `h1-lr0.01-k3-s0`), test
accuracy and, given report.success_accuracy, whether it succeeded; where the answers stage ran
(answers/NAME.json in the folder), the accuracy on conflict answers (a clue recent, another old)
and on the others, and within conflict answers that of the recent and the old clue's digit.

    report:
      extra:
        - {title: Learning-rate check, metrics: lr-check/metrics, note: seed 0 at three rates, k = 3}

`metrics` is relative to the study's folder; the spotlight stage's deps in dvc.yaml list it."""

from __future__ import annotations

import re

import pandas as pd

from headstudy.common.errors import ConfigError

# The score metrics a row needs.
NEEDED = ("heads", "seed", "clues", "accuracy")
# The answers stage's columns: conflict answers hold a clue at most 2 tokens before the query and
# another at least 10 back (analysis/measures/answer_types.py).
SPLIT_COLUMNS = {
    "conflict_answers": "Conflict answers",
    "other_answers": "Other answers",
    "recent_digit": "Recent clue's digit (conflict)",
    "old_digit": "Old clue's digit (conflict)",
}
LEARNING_RATE = re.compile(r"-lr(\d[\d.]*(?:e[+-]?\d+)?)-")


def extra_settings(settings: dict) -> list[dict]:
    """report.extra, each entry with a title, a metrics folder and an optional note (their types
    checked by configure, settings/schema.py); [] when absent."""
    return settings.get("extra") or []


def check_runs(index: int, folder: str, runs: dict[str, dict]) -> None:
    """A folder of report.extra must hold score metrics files, each with the numbers a row needs."""
    if not runs:
        raise ConfigError(
            f"report.extra[{index}].metrics in params.yaml: {folder} holds no score metrics files (NAME.json)"
        )
    for name, metrics in runs.items():
        missing = [key for key in NEEDED if not isinstance(metrics, dict) or key not in metrics]
        if missing:
            raise ConfigError(
                f"report.extra[{index}].metrics in params.yaml: {folder}/{name}.json lacks {', '.join(missing)}: "
                "expected the score stage's metrics files"
            )


def learning_rate(name: str) -> float | None:
    found = LEARNING_RATE.search(name)
    return None if found is None else float(found[1])


def answer_split(answers: dict | None) -> dict:
    """A row's columns from the answers stage's split (analysis/measures/answer_types.py), {} without one."""
    if answers is None:
        return {}
    conflict = answers["conflict"]
    return {
        "conflict_answers": conflict["accuracy"],
        "other_answers": answers["other"]["accuracy"],
        "recent_digit": conflict["recent_digit"],
        "old_digit": conflict["old_digit"],
    }


def extra_rows(runs: dict[str, dict], threshold: float | None, answers: dict[str, dict] | None = None) -> list[dict]:
    """A row per model, sorted by name; answers: the answers stage's split by name, where it ran."""
    answers = answers or {}
    return [
        {
            "name": name,
            "heads": metrics["heads"],
            "seed": metrics["seed"],
            "k": metrics["clues"],
            "lr": learning_rate(name),
            "accuracy": metrics["accuracy"],
            **({} if threshold is None else {"success": bool(metrics["accuracy"] >= threshold)}),
            **answer_split(answers.get(name)),
        }
        for name, metrics in sorted(runs.items())
    ]


def extra_table(rows: list[dict], threshold: float | None) -> pd.DataFrame:
    table = {
        "Model": [r["name"] for r in rows],
        "Heads": [str(r["heads"]) for r in rows],
        "Seed": [str(r["seed"]) for r in rows],
        "k": [str(r["k"]) for r in rows],
    }
    if any(r["lr"] is not None for r in rows):
        table["Learning rate"] = ["" if r["lr"] is None else f"{r['lr']:g}" for r in rows]
    table["Accuracy"] = [f"{100 * r['accuracy']:.1f}%" for r in rows]
    if threshold is not None:
        table[f"Succeeded (>= {100 * threshold:g}%)"] = ["yes" if r["success"] else "no" for r in rows]
    for column, heading in SPLIT_COLUMNS.items():
        if any(column in r for r in rows):
            table[heading] = [percent(r.get(column)) for r in rows]
    return pd.DataFrame(table)


def percent(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.1f}%"


def extra_blocks(extras: list[dict], threshold: float | None) -> tuple[list, list[dict]]:
    """A heading, its note and a table per extra; extras: {title, metrics, note, runs: {NAME: metrics},
    answers: {NAME: split}}."""
    blocks, summary = [], []
    for extra in extras:
        rows = extra_rows(extra["runs"], threshold, extra.get("answers"))
        blocks.append(("heading", extra["title"]))
        note = (extra.get("note") or "").strip()
        said = note if not note or note.endswith((".", "!", "?")) else note + "."
        source = f"Score metrics from {extra['metrics']}/" + (
            f", the split by answer type from {extra['metrics']}/answers/." if extra.get("answers") else "."
        )
        blocks.append(("text", (said + " " if said else "") + source))
        blocks.append(("table", extra_table(rows, threshold)))
        summary.append({"title": extra["title"], "metrics": extra["metrics"], "note": note, "rows": rows})
    return blocks, summary
