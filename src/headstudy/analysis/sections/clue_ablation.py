"""The spotlight report's causal check, from the ablate stage's metrics/ablation/NAME.json (whose
numbers analysis/measures/ablation.py defines): per variant with more than one head and k, how many clues
have a reader of their own, mean over seeds; and, for a few chosen models, each clue's digit
accuracy with each head zeroed in turn, as a table per model and a heat map of the falls.

Only a few models are tabulated head by head, so that the report stays readable: for each variant
with more than one head, its model at the largest k ablated, of the first seed that succeeded (the
first seed when none did, or when no success threshold is set)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstudy.analysis.figures import clues as clue_figures
from headstudy.analysis.rendering.wording import label

# At most this many models get a table of their own; the variants with most heads first.
SHOWN_MODELS = 3


def clue_letters(clues: int) -> list[str]:
    return [chr(ord("a") + clue) for clue in range(clues)]


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def own_reader_rows(models: list[dict], ablations: dict[str, dict], labels: dict) -> list[dict]:
    """Per variant with more than one head and k (in the models' order): the clues with a reader
    of their own in each ablated seed's model, and their mean over those seeds."""
    rows = []
    for variant in dict.fromkeys(m["variant"] for m in models):
        for k in sorted({m["k"] for m in models if m["variant"] == variant}):
            group = sorted(
                (m for m in models if m["variant"] == variant and m["k"] == k and m["name"] in ablations),
                key=lambda m: m["seed"],
            )
            if not group or group[0]["heads"] < 2:
                continue
            own = [int(ablations[m["name"]]["own_readers"]) for m in group]
            rows.append(
                {
                    "variant": variant,
                    "label": label(variant, labels),
                    "k": k,
                    "heads": group[0]["heads"],
                    "seeds": [m["seed"] for m in group],
                    "own_readers": own,
                    "own_readers_mean": float(np.mean(own)),
                }
            )
    return rows


def chosen_models(models: list[dict], ablations: dict[str, dict], threshold: float | None) -> list[dict]:
    """The models tabulated head by head (see the module's docstring), the variants with most heads first."""
    chosen = []
    for variant in dict.fromkeys(m["variant"] for m in models):
        mine = [m for m in models if m["variant"] == variant and m["name"] in ablations and m["heads"] > 1]
        if not mine:
            continue
        largest = max(m["k"] for m in mine)
        at_largest = sorted((m for m in mine if m["k"] == largest), key=lambda m: m["seed"])
        succeeded = [m for m in at_largest if threshold is not None and m["accuracy"] >= threshold]
        chosen.append((succeeded or at_largest)[0])
    return sorted(chosen, key=lambda m: -m["heads"])[:SHOWN_MODELS]


def own_reader_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Model": [r["label"] for r in rows],
            "k": [str(r["k"]) for r in rows],
            "Clues with a reader of their own (mean over seeds)": [
                f"{r['own_readers_mean']:.2f} of {r['k']}" for r in rows
            ],
            "Per seed": [
                ", ".join(f"{own} (seed {seed})" for seed, own in zip(r["seeds"], r["own_readers"], strict=True))
                for r in rows
            ],
        }
    )


def head_table(ablation: dict) -> pd.DataFrame:
    """Rows: no head zeroed, each head zeroed, chance; columns: each clue's digit accuracy, the
    whole answer's accuracy, and the clues whose own reader the head is."""
    letters = clue_letters(ablation["clues"])
    owns = {
        head: [letters[r["clue"]] for r in ablation["reader"] if r["own"] and r["head"] == head]
        for head in range(len(ablation["ablated"]))
    }
    measured = [("none", ablation, "")] + [
        (f"head {row['head']}", row, ", ".join(owns[row["head"]])) for row in ablation["ablated"]
    ]
    table = {"Head zeroed": [name for name, _, _ in measured]}
    for clue, letter in enumerate(letters):
        table[f"Clue {letter}'s digit"] = [percent(row["digit_accuracy"][clue]) for _, row, _ in measured]
    table["Whole answer"] = [percent(row["answer_accuracy"]) for _, row, _ in measured]
    table["Own reader of"] = [own for _, _, own in measured]
    table["Head zeroed"].append("chance")
    for letter in letters:
        table[f"Clue {letter}'s digit"].append(percent(ablation["chance_digit"]))
    table["Whole answer"].append(percent(ablation["chance_digit"] ** ablation["clues"]))
    table["Own reader of"].append("")
    return pd.DataFrame(table)


def drops(ablation: dict) -> np.ndarray:
    """(heads, clues): each clue's digit accuracy unablated minus with the head zeroed."""
    clean = np.asarray(ablation["digit_accuracy"], dtype=float)
    return clean[None, :] - np.asarray([row["digit_accuracy"] for row in ablation["ablated"]], dtype=float)


def model_title(model: dict, labels: dict) -> str:
    return f"{label(model['variant'], labels)}, k = {model['k']}, seed {model['seed']} ({model['name']})"


def ablation_section(
    models: list[dict], ablations: dict[str, dict], labels: dict, threshold: float | None, figure: Path
) -> tuple[list, dict]:
    """The section's blocks and its part of summary.json. models: the study's, with name, variant,
    heads, k, seed and accuracy; ablations: metrics/ablation/NAME.json by model name."""
    rows = own_reader_rows(models, ablations, labels)
    shown = chosen_models(models, ablations, threshold)
    share = next(iter(ablations.values()))["drop_share"]
    blocks = [
        ("heading", "Which head reads which clue"),
        (
            "text",
            "The causal check of one head per clue (the ablate stage): in each model, each head's output is "
            "zeroed in turn and the test answers are scored again, one digit of the answer per clue (a digit's "
            "prediction is its most likely value, summing the answer tokens' probabilities). Zeroing a head takes "
            f"a clue's digit when the digit's accuracy falls at least {share:g} of the way from its unablated value "
            "to chance; a clue has a reader of its own when the head whose zeroing hurts its digit most takes "
            "that digit and no other. A model with one head per clue has k such clues; one head that spreads its "
            "weight over the clues has none.",
        ),
    ]
    if rows:
        blocks.append(("table", own_reader_table(rows)))
    for model in shown:
        failed = threshold is not None and model["accuracy"] < threshold
        blocks += [
            (
                "text",
                f"{model_title(model, labels)}, test accuracy {percent(model['accuracy'])}"
                + (" (no seed of this variant succeeded at this k)" if failed else "")
                + ": each clue's digit accuracy with no head zeroed, with each head zeroed, and at chance.",
            ),
            ("table", head_table(ablations[model["name"]])),
        ]
    if shown:
        panels = [
            {
                "title": model_title(model, labels),
                "drops": drops(ablations[model["name"]]),
                "chance": ablations[model["name"]]["chance_digit"],
            }
            for model in shown
        ]
        blocks.append(
            (
                "figure",
                (
                    clue_figures.ablation_drops(panels, figure),
                    "For the models tabulated above: how many points each clue's digit accuracy falls when each "
                    "head is zeroed (0 to the largest possible fall, from 100% to chance). One head per clue shows "
                    "as one bright cell per row and per column.",
                ),
            )
        )
    return blocks, {"drop_share": share, "own_readers": rows, "shown": [model["name"] for model in shown]}
