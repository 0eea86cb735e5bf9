"""A learning-rate study's result: each variant's learning rate, chosen on validation perplexity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering.wording import label, mid_sentence


def final_validation(curves: pd.DataFrame) -> pd.DataFrame:
    """Each model's validation perplexity at its last step; per variant and learning rate, the
    geometric mean over seeds."""
    return np.exp(final_validation_per_seed(curves).groupby(["variant", "lr"]).mean()).unstack("lr")


def final_validation_per_seed(curves: pd.DataFrame) -> pd.Series:
    """Each model's log validation perplexity at its last step, indexed by (variant, lr, seed)."""
    last = curves.loc[curves.groupby(["variant", "lr", "seed"])["step"].idxmax()]
    return np.log(last.set_index(["variant", "lr", "seed"])["val_ppl"])


def shared_rate_section(
    curves: pd.DataFrame, pairs: list[list], lrs: list[float], labels: dict, figure_dir: Path
) -> tuple[list, dict]:
    """Each pair [A, B] of report.compare at every learning rate of the grid, where both trained
    at the same rate: the comparison that does not depend on how each variant's rate was chosen.
    Paired by seed; a log-ratio of final validation perplexity (below 0: B better)."""
    final = final_validation_per_seed(curves)
    trained = set(final.index.droplevel("seed"))
    ratios = {}
    for a, b in ((str(a), str(b)) for a, b in pairs):
        ratios[f"{label(b, labels)} against {label(a, labels)}"] = {
            lr: (final.loc[(b, lr)] - final.loc[(a, lr)]).dropna().tolist()
            for lr in lrs
            if (a, lr) in trained and (b, lr) in trained
        }
    if not ratios:
        return [], {}
    table = pd.DataFrame(
        {
            "B against A": list(ratios),
            **{
                f"lr {lr:g}": [
                    f"{math.expm1(np.mean(by_lr[lr])):+.1%}" if by_lr.get(lr) else "" for by_lr in ratios.values()
                ]
                for lr in lrs
            },
        }
    )
    blocks = [
        ("heading", "At a shared learning rate"),
        (
            "text",
            "Each comparison of report.compare at every learning rate of the grid, both variants trained at the "
            "same rate (relative change of the final validation perplexity per token, B against A, paired by "
            "seed; below 0: B better). Unlike the default study's comparisons, these do not depend on how each "
            "variant's rate was selected.",
        ),
        ("table", table),
        (
            "figure",
            (
                report_figures.log_ratio_by_learning_rate(ratios, figure_dir / "shared_learning_rates.png"),
                "B against A at each learning rate both trained at: the log-ratio of final validation "
                "perplexities, each seed a dot, a line through the seeds' means; below 0, B is better.",
            ),
        ),
    ]
    summary = {name: {f"{lr:g}": values for lr, values in by_lr.items()} for name, by_lr in ratios.items()}
    return blocks, {"at_shared_lr": summary}


def learning_rate_section(
    curves: pd.DataFrame, variants: list[str], lrs: list[float], labels: dict, seeds: list[int], figure_dir: Path
) -> tuple[list, dict]:
    """Each variant's learning rate: the grid value with the lowest validation perplexity at the
    last step (the test split is never looked at), whether it sits at an edge of the grid, and
    whether one learning rate suits every variant."""
    final = final_validation(curves).reindex(index=variants, columns=lrs)
    selected = {v: float(final.loc[v].idxmin()) for v in variants}
    edge = {v: selected[v] in (min(lrs), max(lrs)) for v in variants}
    runner_up = {v: float(final.loc[v].nsmallest(2).iloc[-1] / final.loc[v].min() - 1) for v in variants}
    table = pd.DataFrame(
        {
            "Model": [label(v, labels) for v in variants],
            **{f"lr {lr:g}": [f"{final.loc[v, lr]:.2f}" for v in variants] for lr in lrs},
            "Selected lr": [f"{selected[v]:g}" for v in variants],
            "Next best lr, worse by": [f"{runner_up[v]:+.1%}" for v in variants],
        }
    )
    sentences = [
        "Final validation perplexity per token (at the last step"
        + ("" if len(seeds) == 1 else f", geometric mean over seeds {', '.join(map(str, seeds))}")
        + ") for every "
        "variant and peak learning rate. Each variant's learning rate is the grid value with the lowest; the test "
        "split is never looked at."
    ]
    shared = set(selected.values())
    sentences.append(
        f"One learning rate, {selected[variants[0]]:g}, is best for every variant."
        if len(shared) == 1
        else "The best learning rate differs between variants: "
        + "; ".join(f"{mid_sentence(label(v, labels))} {selected[v]:g}" for v in variants)
        + "."
    )
    for v in variants:
        if edge[v]:
            side = "lowest" if selected[v] == min(lrs) else "highest"
            sentences.append(
                f"For {mid_sentence(label(v, labels))} the best is the {side} learning rate of the grid, "
                f"{selected[v]:g}: the optimum may lie beyond it, so extend the grid "
                f"{'below' if side == 'lowest' else 'above'} it."
            )
    if len(seeds) == 1:
        sentences.append(
            "One seed per cell: a difference smaller than the seed-to-seed spread is not resolved, and "
            "the last column says how close the runner-up is."
        )
    figure = report_figures.learning_rates(
        {label(v, labels): final.loc[v].to_dict() for v in variants},
        {label(v, labels): selected[v] for v in variants},
        figure_dir / "learning_rates.png",
    )
    chosen = pd.concat([curves[(curves["variant"] == v) & (curves["lr"] == selected[v])] for v in variants])
    blocks = [
        ("heading", "Selected learning rates"),
        ("text", sentences[0]),
        ("table", table),
        *[("text", s) for s in sentences[1:]],
        (
            "figure",
            (
                figure,
                "Final validation perplexity against the learning rate (log axis), one line per variant; "
                "each variant's selected rate circled.",
            ),
        ),
        (
            "figure",
            (
                report_figures.validation_curves(
                    chosen,
                    {v: f"{label(v, labels)}, lr {selected[v]:g}" for v in variants},
                    figure_dir / "validation_curves.png",
                ),
                "Validation perplexity against training tokens of each variant at its selected learning rate: "
                "the mean over seeds as a line, the band from the lowest to the highest seed.",
            ),
        ),
    ]
    summary = {
        "selected_lr": selected,
        "selected_val_ppl": {v: float(final.loc[v, selected[v]]) for v in variants},
        "selected_at_grid_edge": edge,
        "one_lr_for_all": len(shared) == 1,
        "lr_grid": [{"variant": v, "lr": lr, "final_val_ppl": float(final.loc[v, lr])} for v in variants for lr in lrs],
    }
    return blocks, summary
