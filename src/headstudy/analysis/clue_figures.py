"""The spotlight study's figures: accuracy against the number of clues, and where each head
looks. Every error bar says in its legend what it is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from headstudy.analysis.plotting import plt, save_figure


def accuracy_by_clues(lines: list[dict], levels: dict[int, dict], path: Path) -> Path:
    """One line per variant: mean accuracy over seeds at each number of clues k, with its 95% CI
    (or the seeds' range when there is no interval); chance and the one-clue ceiling as dashed
    lines. lines: {label, k: [...], mean: [...], low: [...], high: [...]}; levels: k -> {chance,
    one_clue_best}."""
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    offsets = np.linspace(-0.12, 0.12, max(1, len(lines)))
    for offset, line in zip(offsets, lines, strict=False):
        k = np.asarray(line["k"], dtype=float)
        mean, low, high = (np.asarray(line[key], dtype=float) for key in ("mean", "low", "high"))
        bars = np.where(np.isnan(low), 0, [mean - low, high - mean]) if len(k) else None
        axes.errorbar(
            k + offset,
            100 * mean,
            yerr=None if bars is None else 100 * bars,
            marker="o",
            capsize=4,
            label=line["label"],
        )
    ks = sorted(levels)
    axes.plot(
        ks, [100 * levels[k]["one_clue_best"] for k in ks], "k--", linewidth=1, label="best reachable from one clue"
    )
    axes.plot(ks, [100 * levels[k]["chance"] for k in ks], "k:", linewidth=1, label="chance")
    axes.set_xticks(ks)
    axes.set_xlabel("clues the answer needs (k)")
    axes.set_ylabel("accuracy at the answer positions")
    axes.yaxis.set_major_formatter(PercentFormatter())
    axes.set_ylim(0, 102)
    axes.grid(True, alpha=0.3)
    axes.set_title("Test accuracy: mean over seeds, bars 95% CI")
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, frameon=False)
    return save_figure(figure, path)


def clue_attention_grid(
    cells: dict[tuple[str, int], np.ndarray],
    variants: list[str],
    labels: dict[str, str],
    ks: list[int],
    path: Path,
    title: str,
) -> Path:
    """A heat map per (variant, k): the mean share of each head's attention from the query on
    each clue, heads ordered by the clue they look at most. cells[(variant, k)]: (heads, k)."""
    figure, grid = plt.subplots(
        len(variants),
        len(ks),
        figsize=(2.3 * len(ks) + 1.5, 1.6 * len(variants) + 1),
        layout="constrained",
        squeeze=False,
    )
    image = None
    for row, variant in enumerate(variants):
        for column, k in enumerate(ks):
            axes = grid[row][column]
            share = cells.get((variant, k))
            if share is None:
                axes.axis("off")
                continue
            share = np.asarray(share)[np.lexsort((-share.max(1), share.argmax(1)))]
            image = axes.imshow(share, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for (head, clue), value in np.ndenumerate(share):
                axes.text(
                    clue,
                    head,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if value < 0.6 else "black",
                )
            axes.set_xticks(range(share.shape[1]), [chr(ord("a") + i) for i in range(share.shape[1])], fontsize=7)
            axes.set_yticks(range(share.shape[0]), [str(h) for h in range(share.shape[0])], fontsize=6)
            if row == 0:
                axes.set_title(f"k = {k}", fontsize=9)
            if column == 0:
                axes.set_ylabel(f"{textwrap.fill(labels.get(variant, variant), 16)}\n(head)", fontsize=8)
            if row == len(variants) - 1:
                axes.set_xlabel("clue", fontsize=8)
    if image is not None:
        figure.colorbar(image, ax=grid, shrink=0.6, label="share of the head's weight")
    figure.suptitle(title, fontsize=10)
    return save_figure(figure, path, layout=False)
