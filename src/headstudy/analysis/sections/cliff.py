"""The cliff diagnosis's report (studies/lr-cliff): each run's steps as the diagnose stage recorded
them, summarised into one row per run beside the learning-rate study's final validation
perplexities at the same rate, and a figure per quantity over the steps, one line per run."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from headstudy.analysis.figures.plotting import legend_below, plain_log_y, save_figure

# The quantities the diagnosis records, their figure's file name, axis label and caption.
QUANTITIES = {
    "loss": ("loss.png", "training loss (nats)", "Training loss per step, a running mean over {window} steps."),
    "grad_norm": (
        "grad_norm.png",
        "gradient norm (log)",
        "Global gradient norm at every step, measured before the optimizer step (and before clipping, "
        "in a clipping arm: the grey dotted line is the threshold).",
    ),
    "entropy": (
        "attention_entropy.png",
        "attention entropy (nats)",
        "Mean attention entropy over query positions of the probe batch, each head a line; the dashed "
        "line is uniform attention over the causal window, the most a head can spread.",
    ),
    "max_logit": (
        "max_logit.png",
        "largest attention logit",
        "The largest pre-softmax attention score q.k / sqrt(d) on the probe batch, each head a line.",
    ),
}


def head_columns(steps: pd.DataFrame, quantity: str) -> list[str]:
    """The per-head columns of `entropy` or `max_logit` (entropy_l0_h0, ...)."""
    return [column for column in steps.columns if column.startswith(f"{quantity}_l")]


def uniform_entropy(context: int) -> float:
    """Mean over query positions 1..T of the entropy of uniform attention over the t keys a
    causal head may see: the mean of ln t."""
    return float(np.mean(np.log(np.arange(1, context + 1))))


def reference_ppl(lr_summary: dict, variant: str, lr: float) -> float | None:
    """The learning-rate study's final validation perplexity of `variant` at `lr`, if it trained one."""
    for point in lr_summary.get("lr_grid", []):
        if str(point["variant"]) == variant and math.isclose(point["lr"], lr, rel_tol=1e-9):
            return point["final_val_ppl"]
    return None


def at_extreme(steps: pd.DataFrame, columns: list[str], largest: bool) -> tuple[float, int] | tuple[None, None]:
    """The extreme over every head and probe, and the step where it came first."""
    if not columns:
        return None, None
    values = steps[columns].max(axis=1) if largest else steps[columns].min(axis=1)
    values = values.dropna()
    if values.empty:
        return None, None
    row = values.idxmax() if largest else values.idxmin()
    return float(values[row]), int(steps.loc[row, "step"])


def run_summary(run: dict, steps: pd.DataFrame, lr_summary: dict, compare_variants: list[str]) -> dict:
    """One run's numbers: how it ended, its largest gradient and where, how often clipping acted,
    the lowest head entropy and the largest logit with their steps, and the learning-rate
    study's final validation perplexity of each of `compare_variants` at the same rate."""
    norms = steps["grad_norm"].dropna()
    peak_row = norms.idxmax() if not norms.empty else None
    clip = run.get("clip_grad_norm")
    lowest_entropy, lowest_entropy_step = at_extreme(steps, head_columns(steps, "entropy"), largest=False)
    largest_logit, largest_logit_step = at_extreme(steps, head_columns(steps, "max_logit"), largest=True)
    return {
        "name": run["name"],
        "arm": run["arm"],
        "variant": str(run["variant"]),
        "lr": run["lr"],
        "clip_grad_norm": clip,
        "final_val_ppl": run["final_val_ppl"],
        "reference_val_ppl": {variant: reference_ppl(lr_summary, variant, run["lr"]) for variant in compare_variants},
        "grad_norm_median": float(norms.median()) if not norms.empty else None,
        "grad_norm_peak": float(norms[peak_row]) if peak_row is not None else None,
        "grad_norm_peak_step": int(steps.loc[peak_row, "step"]) if peak_row is not None else None,
        "clipped_fraction": float((norms > clip).mean()) if clip is not None and not norms.empty else None,
        "entropy_lowest": lowest_entropy,
        "entropy_lowest_step": lowest_entropy_step,
        "max_logit_largest": largest_logit,
        "max_logit_largest_step": largest_logit_step,
    }


def number(value, digits: int = 2) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def summary_table(rows: list[dict], labels: dict[str, str]) -> pd.DataFrame:
    """A row per run: its final validation perplexity beside the learning-rate study's at the
    same rate, then what the steps showed."""
    table = []
    for row in rows:
        line = {
            "Run": row["name"],
            "lr": f"{row['lr']:g}",
            "Clipping": "none" if row["clip_grad_norm"] is None else f"norm {row['clip_grad_norm']:g}",
            "Final validation ppl": number(row["final_val_ppl"]),
        }
        for variant, ppl in row["reference_val_ppl"].items():
            line[f"lr-tuning: {labels.get(variant, variant)}"] = number(ppl)
        line.update(
            {
                "Grad norm, median": number(row["grad_norm_median"], 3),
                "Grad norm, peak (step)": f"{number(row['grad_norm_peak'], 3)} ({row['grad_norm_peak_step']})",
                "Steps clipped": "" if row["clipped_fraction"] is None else f"{100 * row['clipped_fraction']:.1f}%",
                "Lowest entropy (step)": f"{number(row['entropy_lowest'], 3)} ({row['entropy_lowest_step']})",
                "Largest logit (step)": f"{number(row['max_logit_largest'])} ({row['max_logit_largest_step']})",
            }
        )
        table.append(line)
    return pd.DataFrame(table)


def run_labels(runs: list[dict]) -> dict[str, str]:
    """`lr 0.012, plain`; with several variants in the study, the variant first."""
    several = len({str(run["variant"]) for run in runs}) > 1
    return {run["name"]: (f"{run['variant']}, " if several else "") + f"lr {run['lr']:g}, {run['arm']}" for run in runs}


def run_styles(runs: list[dict]) -> dict[str, tuple[str, str]]:
    """(colour, line style) of each run: a colour per variant and learning rate, a line style per
    arm, so that two arms that trained alike still show both lines."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = list(dict.fromkeys((str(run["variant"]), run["lr"]) for run in runs))
    arms = list(dict.fromkeys(run["arm"] for run in runs))
    dashes = ["-", "--", ":", "-."]
    return {
        run["name"]: (
            colours[models.index((str(run["variant"]), run["lr"])) % len(colours)],
            dashes[arms.index(run["arm"]) % len(dashes)],
        )
        for run in runs
    }


def quantity_figure(
    quantity: str, runs: list[dict], steps: dict[str, pd.DataFrame], folder: Path, window: int, context: int
) -> tuple[Path, str]:
    """One panel: `quantity` against steps, one line per run (per head, for the attention)."""
    file_name, label, caption = QUANTITIES[quantity]
    figure, axes = plt.subplots(figsize=(7, 4))
    styles, labels = run_styles(runs), run_labels(runs)
    for run in runs:
        table = steps[run["name"]]
        colour, style = styles[run["name"]]
        if quantity in ("loss", "grad_norm"):
            series = table[["step", quantity]].dropna()
            values = series[quantity].rolling(window, min_periods=1).mean() if quantity == "loss" else series[quantity]
            axes.plot(series["step"], values, color=colour, linestyle=style, linewidth=0.8, label=labels[run["name"]])
        else:
            for head, column in enumerate(head_columns(table, quantity)):
                series = table[["step", column]].dropna()
                axes.plot(
                    series["step"],
                    series[column],
                    color=colour,
                    linestyle=style,
                    linewidth=1,
                    marker=".",
                    markersize=3,
                    label=labels[run["name"]] if head == 0 else None,
                )
    if quantity == "entropy":
        axes.axhline(uniform_entropy(context), color="grey", linestyle="--", linewidth=1)
        axes.set_ylim(bottom=0)
    if quantity == "grad_norm":
        for threshold in sorted({run["clip_grad_norm"] for run in runs if run.get("clip_grad_norm") is not None}):
            axes.axhline(threshold, color="grey", linestyle=":", linewidth=1)
        plain_log_y(axes)
    axes.set_xlabel("training step")
    axes.set_ylabel(label)
    axes.grid(alpha=0.3)
    legend_below(axes)
    path = save_figure(figure, folder / file_name)
    return path, caption.format(window=window)


def validation_figure(runs: list[dict], folder: Path) -> tuple[Path, str]:
    figure, axes = plt.subplots(figsize=(7, 4))
    styles, labels = run_styles(runs), run_labels(runs)
    for run in runs:
        colour, style = styles[run["name"]]
        curve = np.array(run["validation_curve"], dtype=float).reshape(-1, 2)
        axes.plot(
            curve[:, 0],
            curve[:, 1],
            color=colour,
            linestyle=style,
            marker="o",
            markersize=3,
            linewidth=1,
            label=labels[run["name"]],
        )
    plain_log_y(axes)
    axes.set_xlabel("training step")
    axes.set_ylabel("validation perplexity (log)")
    axes.grid(alpha=0.3)
    legend_below(axes)
    path = save_figure(figure, folder / "validation_curves.png")
    return path, "Validation perplexity of each run at every validation, as the training recorded it."
