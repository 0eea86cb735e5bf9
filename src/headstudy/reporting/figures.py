"""The report's figures, as PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no screen needed
import matplotlib.pyplot as plt
import pandas as pd


def validation_curves(curves: pd.DataFrame, path: Path) -> Path:
    """Validation perplexity against training tokens: mean over seeds, band from min to max."""
    figure, axes = plt.subplots(figsize=(6.4, 4))
    for heads, group in curves.groupby("heads"):
        by_tokens = group.groupby("tokens")["val_ppl"]
        mean = by_tokens.mean()
        seeds = group["seed"].nunique()
        axes.plot(mean.index, mean.values, marker="o", markersize=3,
                  label=f"{heads} head{'s' if heads > 1 else ''} (mean of {seeds} seeds)")
        axes.fill_between(mean.index, by_tokens.min().values, by_tokens.max().values, alpha=0.2)
    axes.set_xlabel("training tokens")
    axes.set_ylabel("validation perplexity (per token)")
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    axes.set_title("Validation perplexity during training (band: min to max over seeds)")
    return save(figure, path)


def test_perplexity(rows: list[dict], baselines: dict, path: Path) -> Path:
    """Mean test perplexity per head count with its 95% CI; parameters in the labels."""
    figure, axes = plt.subplots(figsize=(6.4, 4))
    labels = [f"{r['heads']} head{'s' if r['heads'] > 1 else ''}\n{r['params']:,} params" for r in rows]
    means = [r["test_ppl_mean"] for r in rows]
    errors = [
        [m - r["test_ppl_ci95"][0] for m, r in zip(means, rows)],
        [r["test_ppl_ci95"][1] - m for m, r in zip(means, rows)],
    ]
    axes.bar(labels, means, yerr=errors, capsize=6, color="tab:blue", alpha=0.8)
    for row, label in zip(rows, labels):
        axes.scatter([label] * len(row["test_ppl"]), row["test_ppl"], color="black", s=12, zorder=3)
    bigram = baselines["bigram"]["test_ppl"]
    axes.axhline(bigram, color="tab:red", linestyle="--", label=f"bigram baseline ({bigram:.1f})")
    axes.set_ylabel("test perplexity (per token)")
    axes.set_title("Test perplexity: mean, 95% CI over seeds, each seed as a dot")
    axes.legend()
    return save(figure, path)


def save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def attention_maps(weights, labels: list[str], title: str, path: Path) -> Path:
    """One panel per head: row = the token attending, column = the token attended to."""
    heads = weights.shape[0]
    figure, axes = plt.subplots(1, heads, figsize=(3.6 * heads + 0.6, 4.2), squeeze=False)
    ticks = range(len(labels))
    for head, ax in enumerate(axes[0]):
        ax.imshow(weights[head], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"head {head}")
        ax.set_xticks(ticks, labels, rotation=90, fontsize=7)
        ax.set_yticks(ticks, labels if head == 0 else [], fontsize=7)
    figure.suptitle(f"Attention maps, {title}")
    return save(figure, path)


def head_scores(rows: list[dict], path: Path) -> Path:
    """Per-head scores grouped by model, mean over seeds with the sd as error bar."""
    scores = {"previous_token": "previous token", "self": "self", "first_position": "first position"}
    figure, (shares, ablation) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    labels = [f"{r['heads']}h · L{r['layer']} H{r['head']}" for r in rows]
    width = 0.8 / len(scores)
    for index, (key, name) in enumerate(scores.items()):
        positions = [i + (index - 1) * width for i in range(len(rows))]
        shares.bar(positions, [r[key]["mean"] for r in rows], width, yerr=[r[key]["sd"] for r in rows],
                   capsize=2, label=name)
    shares.set_xticks(range(len(rows)), labels, rotation=45, ha="right")
    shares.set_ylabel("mean attention weight")
    shares.set_title("Where each head's attention goes")
    shares.legend()
    ablation.bar(labels, [r["ablation_delta_ppl"]["mean"] for r in rows],
                 yerr=[r["ablation_delta_ppl"]["sd"] for r in rows], capsize=3, color="tab:gray")
    ablation.set_xticks(range(len(rows)), labels, rotation=45, ha="right")
    ablation.set_ylabel("test perplexity rise when zeroed")
    ablation.set_yscale("log")
    title = "What each head is worth"
    if any(r["heads"] == 1 for r in rows):
        title += "\n(1 head: zeroing it removes attention altogether)"
    ablation.set_title(title)
    return save(figure, path)
