"""The reports' figures, as PNG files. Every error bar and band says in its legend what it is."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no screen needed
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

PLAIN = FuncFormatter(lambda value, _: f"{value:g}")
MILLIONS = FuncFormatter(lambda value, _: f"{value / 1e6:g}")


def plain_log_y(axes) -> None:
    """Log scale with plain tick labels (20, 30, 50), never 2x10^1."""
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
    axes.yaxis.set_major_formatter(PLAIN)
    axes.yaxis.set_minor_formatter(NullFormatter())


def save(figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def validation_curves(curves: pd.DataFrame, labels: dict[str, str], path: Path) -> Path:
    """Validation perplexity against training tokens per variant: mean over seeds as a line,
    the band from the lowest to the highest seed."""
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for variant, label in labels.items():
        group = curves[curves["variant"] == variant]
        by_tokens = group.groupby("tokens")["val_ppl"]
        mean = by_tokens.mean()
        seeds = group["seed"].nunique()
        axes.plot(mean.index, mean.values, marker="o", markersize=3, label=f"{label}: mean of {seeds} seeds")
        if seeds > 1:
            axes.fill_between(mean.index, by_tokens.min().values, by_tokens.max().values, alpha=0.2,
                              label=f"{label}: lowest to highest seed")
    plain_log_y(axes)
    axes.xaxis.set_major_formatter(MILLIONS)
    axes.set_xlabel("training tokens (millions)")
    axes.set_ylabel("validation perplexity per token (log scale)")
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title("Validation perplexity during training")
    return save(figure, path)


def test_perplexity(rows: list[dict], bigram: float, path: Path) -> Path:
    """Geometric-mean test perplexity per variant with its 95% CI; each seed as a dot."""
    figure, axes = plt.subplots(figsize=(7, 4.2))
    labels = [f"{r['label']}\n{r['params']:,} parameters" for r in rows]
    means = np.array([r["test_ppl_mean"] for r in rows])
    lows = np.array([r["test_ppl_ci95"][0] for r in rows])
    highs = np.array([r["test_ppl_ci95"][1] for r in rows])
    axes.bar(labels, means, color="tab:blue", alpha=0.7, label="geometric mean over seeds")
    if not np.isnan(lows).any():
        axes.errorbar(labels, means, yerr=[means - lows, highs - means], fmt="none", ecolor="black",
                      capsize=6, label="95% CI over seeds")
    for row, label in zip(rows, labels):
        axes.scatter([label] * len(row["test_ppl"]), row["test_ppl"], color="black", s=12, zorder=3)
    axes.scatter([], [], color="black", s=12, label="one seed")
    axes.axhline(bigram, color="tab:red", linestyle="--", label=f"bigram baseline ({bigram:.1f})")
    axes.yaxis.set_major_formatter(PLAIN)
    axes.set_ylabel("test perplexity per token")
    axes.set_title("Test perplexity")
    axes.legend(fontsize=8, loc="lower right")
    return save(figure, path)


def budget_evidence(curves: dict[str, pd.DataFrame], gap: pd.Series, budget_tokens: int, path: Path) -> Path:
    """The long runs: validation perplexity against tokens, and the relative gap between them,
    with the default study's budget marked."""
    figure, (ppl, relative) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, curve in curves.items():
        ppl.plot(curve["tokens"], curve["val_ppl"], marker="o", markersize=2, label=label)
    plain_log_y(ppl)
    ppl.set_ylabel("validation perplexity per token (log scale)")
    ppl.set_title("One long run per head count")
    relative.plot(gap.index, 100 * gap.values, marker="o", markersize=2, color="tab:purple")
    relative.axhline(0, color="gray", linewidth=0.8)
    relative.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:+g}%"))
    relative.set_ylabel(f"{gap.name}, relative")
    relative.set_title("Relative gap in validation perplexity")
    for axes in (ppl, relative):
        axes.axvline(budget_tokens, color="tab:red", linestyle="--", label="default study's budget")
        axes.xaxis.set_major_formatter(MILLIONS)
        axes.set_xlabel("training tokens (millions)")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    return save(figure, path)


def sweep(rows: list[dict], bigram: float, path: Path) -> Path:
    """Test perplexity against head count at fixed width, with 95% CIs over seeds."""
    figure, axes = plt.subplots(figsize=(7, 4.2))
    heads = np.array([r["heads"] for r in rows])
    means = np.array([r["test_ppl_mean"] for r in rows])
    lows = np.array([r["test_ppl_ci95"][0] for r in rows])
    highs = np.array([r["test_ppl_ci95"][1] for r in rows])
    axes.errorbar(heads, means, yerr=[means - lows, highs - means], marker="o", capsize=5,
                  label="geometric mean over seeds, 95% CI")
    for row in rows:
        axes.scatter([row["heads"]] * len(row["test_ppl"]), row["test_ppl"], color="black", s=10, zorder=3)
    axes.scatter([], [], color="black", s=10, label="one seed")
    axes.axhline(bigram, color="tab:red", linestyle="--", label=f"bigram baseline ({bigram:.1f})")
    axes.set_xscale("log", base=2)
    axes.set_xticks(heads, [str(h) for h in heads])
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("attention heads (they split the same width)")
    axes.yaxis.set_major_formatter(PLAIN)
    axes.set_ylabel("test perplexity per token")
    axes.set_title("Head-count sweep at fixed width")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return save(figure, path)


def attention_maps(weights: np.ndarray, labels: list[str], title: str, path: Path) -> Path:
    """One panel per head, two to a row so that they stay legible on a page: row = the token
    attending, column = the token attended to, colour = attention weight."""
    heads, length = weights.shape[0], weights.shape[-1]
    columns = min(heads, 2)
    rows = -(-heads // columns)
    side = max(3.2, 0.28 * length + 1.2)
    figure, axes = plt.subplots(rows, columns, figsize=(side * columns + 1.2, side * rows + 0.6), squeeze=False)
    ticks = range(length)
    image = None
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"head {head}")
        ax.set_xticks(ticks, labels, rotation=90, fontsize=8)
        ax.set_yticks(ticks, labels, fontsize=8)
        ax.set_xlabel("attended to")
        if head % columns == 0:
            ax.set_ylabel("attending")
    figure.suptitle(title)
    figure.tight_layout()
    figure.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def head_scores(rows: list[dict], path: Path) -> Path:
    """Per-head scores grouped by model: mean over seeds, error bar = sd over seeds."""
    scores = {"previous_token": "previous token", "self": "self", "first_position": "first position"}
    figure, (shares, ablation) = plt.subplots(2, 1, figsize=(max(7, 0.7 * len(rows) + 3), 8))
    labels = [f"variant {r['variant']}\nL{r['layer']} H{r['head']}" for r in rows]
    width = 0.8 / len(scores)
    for index, (key, name) in enumerate(scores.items()):
        positions = [i + (index - 1) * width for i in range(len(rows))]
        shares.bar(positions, [r[key]["mean"] for r in rows], width, yerr=[r[key]["sd"] for r in rows],
                   capsize=2, label=f"{name} (error bar: sd over seeds)")
    shares.set_xticks(range(len(rows)), labels, fontsize=8)
    shares.set_ylabel("mean attention weight")
    shares.set_title("Where each head's attention goes")
    shares.legend(fontsize=8)
    ablation.bar(range(len(rows)), [r["ablation_delta_ppl"]["mean"] for r in rows],
                 yerr=[r["ablation_delta_ppl"]["sd"] for r in rows], capsize=3, color="tab:gray",
                 label="mean over seeds; error bar: sd over seeds")
    ablation.set_xticks(range(len(rows)), labels, fontsize=8)
    if all(r["ablation_delta_ppl"]["mean"] > 0 for r in rows):
        plain_log_y(ablation)
        ablation.set_ylabel("test perplexity rise when zeroed (log scale)")
    else:
        ablation.set_ylabel("test perplexity rise when zeroed")
    ablation.set_title("What each head is worth\n(zeroing the only head of a model removes attention altogether)")
    ablation.legend(fontsize=8)
    return save(figure, path)
