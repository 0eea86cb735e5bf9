"""The spotlight study's figures: accuracy against the number of clues, and where each head
looks. Every error bar says in its legend what it is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from headstudy.analysis.figures.plotting import plt, save_figure


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
    return finish_accuracy_axes(figure, axes, levels, "Test accuracy: mean over seeds, bars 95% CI", path)


def accuracy_per_seed(lines: list[dict], levels: dict[int, dict], threshold: float, path: Path) -> Path:
    """One line per variant through the median accuracy over seeds at each number of clues k, and
    each seed's accuracy as a dot of the line's colour (bimodal outcomes: no band between the
    modes); the success threshold, chance and the one-clue ceiling as dashed and dotted lines.
    lines: {label, k: [...], median: [...], per_seed: [[...] per k]}; levels: k -> {chance,
    one_clue_best}."""
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    offsets = np.linspace(-0.15, 0.15, max(1, len(lines)))
    for offset, line in zip(offsets, lines, strict=False):
        k = np.asarray(line["k"], dtype=float)
        median = 100 * np.asarray(line["median"], dtype=float)
        (drawn,) = axes.plot(k + offset, median, marker="_", markersize=14, label=line["label"])
        for at, seeds in zip(k, line["per_seed"], strict=True):
            axes.plot(
                np.full(len(seeds), at + offset),
                100 * np.asarray(seeds),
                "o",
                color=drawn.get_color(),
                markersize=4,
                alpha=0.7,
                markeredgewidth=0,
            )
    axes.axhline(100 * threshold, color="grey", linestyle="-.", linewidth=1, label="success threshold")
    return finish_accuracy_axes(figure, axes, levels, "Test accuracy: median over seeds (line), each seed (dots)", path)


def finish_accuracy_axes(figure, axes, levels: dict[int, dict], title: str, path: Path) -> Path:
    """Chance and the one-clue ceiling at each k, the axes of accuracy against k, and the file."""
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
    axes.set_title(title)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, frameon=False)
    return save_figure(figure, path)


def ablation_drops(panels: list[dict], path: Path) -> Path:
    """A heat map per model: how far each clue's digit accuracy falls when each head is zeroed, in
    points, from 0 to the largest possible fall (100% to chance). panels: {title, drops: (heads,
    clues), chance}."""
    figure, grid = plt.subplots(
        1,
        len(panels),
        figsize=(2.6 * len(panels) + 1.5, 3.2),
        layout="constrained",
        squeeze=False,
    )
    image = None
    for axes, panel in zip(grid[0], panels, strict=True):
        drops = 100 * np.asarray(panel["drops"], dtype=float)
        image = axes.imshow(drops, vmin=0, vmax=100 * (1 - panel["chance"]), cmap="magma", aspect="auto")
        for (head, clue), value in np.ndenumerate(drops):
            shade = "white" if value < 40 else "black"
            axes.text(clue, head, f"{value:.0f}", ha="center", va="center", fontsize=7, color=shade)
        axes.set_xticks(range(drops.shape[1]), [chr(ord("a") + i) for i in range(drops.shape[1])], fontsize=7)
        axes.set_yticks(range(drops.shape[0]), [str(h) for h in range(drops.shape[0])], fontsize=7)
        axes.set_xlabel("clue's digit", fontsize=8)
        axes.set_ylabel("head zeroed", fontsize=8)
        axes.set_title(textwrap.fill(panel["title"], 28), fontsize=8)
    if image is not None:
        figure.colorbar(image, ax=grid, shrink=0.8, label="fall of the digit's accuracy, points")
    figure.suptitle("Each head zeroed in turn: how far each clue's digit falls", fontsize=10)
    return save_figure(figure, path, layout=False)


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
