"""The report stage's figures, as PNG files. Every error bar and band says in its legend what it is."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from headstudy.analysis.figures.plotting import MILLIONS, PERCENT, PLAIN, legend_below, plain_log_y, plt, save_figure


def validation_curves(curves: pd.DataFrame, labels: dict[str, str], path: Path) -> Path:
    """Validation perplexity against training tokens per variant: mean over seeds as a line,
    the band from the lowest to the highest seed."""
    figure, axes = plt.subplots(figsize=(7, 5.2))
    banded = False
    for variant, label in labels.items():
        group = curves[curves["variant"] == variant]
        by_tokens = group.groupby("tokens")["val_ppl"]
        mean = by_tokens.mean()
        seeds = group["seed"].nunique()
        (line,) = axes.plot(
            mean.index,
            mean.values,
            marker="o",
            markersize=3,
            label=label + (f" (mean of {seeds} seeds)" if seeds > 1 else ""),
        )
        if seeds > 1:
            banded = True
            axes.fill_between(
                mean.index, by_tokens.min().values, by_tokens.max().values, alpha=0.2, color=line.get_color()
            )
    if banded:
        axes.fill_between([], [], [], color="gray", alpha=0.2, label="band: lowest to highest seed")
    plain_log_y(axes)
    axes.xaxis.set_major_formatter(MILLIONS)
    axes.set_xlabel("training tokens (millions)")
    axes.set_ylabel("validation perplexity per token (log scale)")
    axes.grid(True, which="major", alpha=0.3)
    legend_below(axes)
    axes.set_title("Validation perplexity during training")
    return save_figure(figure, path)


def test_perplexity(rows: list[dict], path: Path) -> Path:
    """Geometric-mean test perplexity per variant with its 95% CI, on an axis that spans the
    results (not from 0, where differences of a few percent vanish); each seed as a dot, and the
    dots of one seed joined across variants, since the comparisons are paired by seed."""
    figure, axes = plt.subplots(figsize=(max(7.0, 1.5 * len(rows)), 4.8))
    positions = np.arange(len(rows))
    means = np.array([r["test_ppl_mean"] for r in rows])
    lows = np.array([r["test_ppl_ci95"][0] for r in rows])
    highs = np.array([r["test_ppl_ci95"][1] for r in rows])
    seeds = sorted({s for r in rows for s in r["seeds"]})
    for seed in seeds:
        points = [
            (x, dict(zip(r["seeds"], r["test_ppl"], strict=False))[seed])
            for x, r in zip(positions, rows, strict=False)
            if seed in r["seeds"]
        ]
        axes.plot(*zip(*points, strict=False), color="gray", linewidth=0.7, marker="o", markersize=3, alpha=0.8)
    axes.plot([], [], color="gray", linewidth=0.7, marker="o", markersize=3, label="one seed (joined across variants)")
    if np.isnan(lows).any():
        axes.scatter(positions + 0.12, means, color="black", marker="D", zorder=3, label="geometric mean over seeds")
    else:
        axes.errorbar(
            positions + 0.12,
            means,
            yerr=[means - lows, highs - means],
            fmt="D",
            color="black",
            capsize=5,
            zorder=3,
            label="geometric mean over seeds, 95% CI",
        )
    axes.set_xticks(
        positions, [f"{textwrap.fill(r['label'], 16)}\n{r['params']:,} parameters" for r in rows], fontsize=8
    )
    axes.set_xlim(-0.5, len(rows) - 0.5)
    axes.yaxis.set_major_formatter(PLAIN)
    axes.set_ylabel("test perplexity per token")
    axes.grid(True, axis="y", alpha=0.3)
    axes.set_title("Test perplexity (the axis spans the results, not from 0)")
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    return save_figure(figure, path)


def forest_point(row: dict, suffix: str) -> tuple[float, float, float, bool]:
    """A row's estimate and interval as relative changes, and whether they are the median's: a
    row whose seeds' differences are not normal (`normal` False) is drawn as its verdict states
    it, by the median and its distribution-free interval, not by the mean that no summary is."""
    robust = row.get("normal") is False
    numbers = row["median"] if robust else row
    low, high = numbers[f"log_ratio{suffix}_ci95"]
    return math.expm1(numbers[f"log_ratio{suffix}"]), math.expm1(low), math.expm1(high), robust


def forest(rows: list[dict], path: Path, reference_label: str | None = None) -> Path:
    """One row per comparison of B against A: the relative change in perplexity with its 95%
    CI, per token on the left and per word on the right (the same log-ratio in two units); a
    square where the seeds' differences are not normal: the median and its distribution-free
    interval (forest_point). A row's `reference` (a log-ratio, e.g. the course chapter's) is
    drawn as an open diamond; rows of kind 'exploratory' are drawn hollow. With no rows, the
    figure says so."""
    if not rows:
        figure, axes = plt.subplots(figsize=(6, 1.2))
        axes.axis("off")
        axes.text(0.5, 0.5, "No comparison in this study", ha="center", va="center")
        return save_figure(figure, path)
    height = 1.5 + 0.5 * len(rows)
    figure, panels = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    positions = np.arange(len(rows))[::-1]
    for axes, suffix, unit in ((panels[0], "", "per token"), (panels[1], "_per_word", "per word")):
        for y, row, above in zip(positions, rows, [None, *rows], strict=False):
            if above is not None and ("kind" in row) != ("kind" in above):  # paired rows, then pooled ones
                axes.axhline(y + 0.5, color="gray", linewidth=0.6, linestyle=":")
            estimate, low, high, robust = forest_point(row, suffix)
            hollow = row.get("kind") == "exploratory"
            if not math.isnan(low):
                axes.plot([100 * low, 100 * high], [y, y], color="black", linewidth=1.5)
            marker = "s" if robust else "o"
            axes.plot(100 * estimate, y, marker, color="black", markerfacecolor="white" if hollow else "black")
            if row.get("reference") is not None:
                axes.plot(100 * math.expm1(row["reference"]), y, "D", color="tab:red", markerfacecolor="none")
        axes.axvline(0, color="gray", linewidth=0.8)
        axes.xaxis.set_major_formatter(PERCENT)
        axes.set_xlabel(f"perplexity of B / perplexity of A - 1, {unit}")
        axes.grid(True, axis="x", alpha=0.3)
        axes.set_title(f"B against A, {unit} (negative: B is better)", fontsize=10)
    panels[0].set_yticks(positions, [row["label"] for row in rows], fontsize=8)
    panels[0].plot([], [], "o", color="black", label="estimate and 95% CI")
    if any(row.get("normal") is False for row in rows):
        panels[0].plot([], [], "s", color="black", label="median and its interval (differences not normal)")
    if any(row.get("kind") == "exploratory" for row in rows):
        panels[0].plot([], [], "o", color="black", markerfacecolor="white", label="exploratory (not pre-stated)")
    if reference_label and any(row.get("reference") is not None for row in rows):
        panels[0].plot([], [], "D", color="tab:red", markerfacecolor="none", label=reference_label)
    handles, labels = panels[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels), frameon=False)
    figure.tight_layout(rect=(0, 0.35 / height, 1, 1))
    return save_figure(figure, path, layout=False)


def budget_evidence(curves: dict[str, pd.DataFrame], gap: pd.Series, budget_tokens: int | None, path: Path) -> Path:
    """The long runs: validation perplexity against tokens, and the relative gap between them,
    with this study's budget marked (when given)."""
    figure, (ppl, relative) = plt.subplots(1, 2, figsize=(11, 4.6))
    for label, curve in curves.items():
        ppl.plot(curve["tokens"], curve["val_ppl"], marker="o", markersize=2, label=label)
    plain_log_y(ppl)
    ppl.set_ylabel("validation perplexity per token (log scale)")
    ppl.set_title("One long run per head count")
    relative.plot(gap.index, 100 * gap.values, marker="o", markersize=2, color="tab:purple", label=gap.name)
    relative.axhline(0, color="gray", linewidth=0.8)
    relative.yaxis.set_major_formatter(PERCENT)
    relative.set_ylabel("relative gap in validation perplexity")
    relative.set_title("Relative gap in validation perplexity")
    for axes in (ppl, relative):
        if budget_tokens is not None:
            axes.axvline(budget_tokens, color="tab:red", linestyle="--", label="this study's budget")
        axes.xaxis.set_major_formatter(MILLIONS)
        axes.set_xlabel("training tokens (millions)")
        axes.grid(True, alpha=0.3)
        legend_below(axes, columns=1)
    return save_figure(figure, path)


def gap_by_training_length(gaps: dict[str, dict[str, tuple]], path: Path) -> Path:
    """One panel per comparison: at each budget, the paired gap in validation perplexity along
    its run (mean over seeds, 95% CI band) and the paired gap in test perplexity at its end
    (95% CI bar), as relative changes. `gaps` maps a comparison's title to, per budget,
    (tokens, gap along the run with log_ratio/low/high by tokens, paired_difference of test)."""
    figure, panels = plt.subplots(1, len(gaps), figsize=(7 * len(gaps), 5.2), squeeze=False)
    for axes, (title, budgets) in zip(panels[0], gaps.items(), strict=True):
        for tokens, along, test in budgets.values():
            (line,) = axes.plot(
                along.index,
                100 * np.expm1(along["log_ratio"]),
                marker="o",
                markersize=2,
                label=f"validation, the run of {tokens / 1e6:.1f} M tokens (mean of seeds)",
            )
            axes.fill_between(
                along.index,
                100 * np.expm1(along["low"]),
                100 * np.expm1(along["high"]),
                alpha=0.2,
                color=line.get_color(),
            )
            low, high = test["relative_ci95"]
            axes.errorbar(
                [tokens],
                [100 * test["relative"]],
                yerr=[[100 * (test["relative"] - low)], [100 * (high - test["relative"])]],
                fmt="s",
                color=line.get_color(),
                capsize=4,
                label=f"test, end of the run of {tokens / 1e6:.1f} M tokens",
            )
        axes.fill_between([], [], [], color="gray", alpha=0.2, label="band and bars: 95% CI over seeds, paired")
        axes.axhline(0, color="gray", linewidth=0.8)
        axes.yaxis.set_major_formatter(PERCENT)
        axes.xaxis.set_major_formatter(MILLIONS)
        axes.set_xlabel("training tokens (millions)")
        axes.set_ylabel("relative change in perplexity")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        legend_below(axes, columns=1)
    return save_figure(figure, path)


def sweep(
    rows: list[dict],
    against_one: dict[int, tuple[float, float, float]],
    reference: dict[int, float],
    reference_label: str,
    path: Path,
) -> Path:
    """Left: test perplexity against head count at fixed width, with 95% CIs over seeds. Right:
    each head count against one head as a relative change, with the pooled 95% CI, beside a
    published row (`reference`: log-ratios against one head, in its own unit)."""
    figure, (level, relative) = plt.subplots(1, 2, figsize=(11, 4.6))
    heads = np.array([r["heads"] for r in rows])
    means = np.array([r["test_ppl_mean"] for r in rows])
    lows = np.array([r["test_ppl_ci95"][0] for r in rows])
    highs = np.array([r["test_ppl_ci95"][1] for r in rows])
    level.errorbar(
        heads,
        means,
        yerr=[means - lows, highs - means],
        marker="o",
        capsize=5,
        label="geometric mean over seeds, 95% CI",
    )
    for row in rows:
        level.scatter([row["heads"]] * len(row["test_ppl"]), row["test_ppl"], color="black", s=10, zorder=3)
    level.scatter([], [], color="black", s=10, label="one seed")
    level.yaxis.set_major_formatter(PLAIN)
    level.set_ylabel("test perplexity per token")
    level.set_title("Head-count sweep at fixed width")
    counts = sorted(against_one)
    values = np.array([[100 * math.expm1(v) for v in against_one[h]] for h in counts])
    relative.errorbar(
        counts,
        values[:, 0],
        yerr=[values[:, 0] - values[:, 1], values[:, 2] - values[:, 0]],
        marker="o",
        capsize=5,
        label="this sweep, per token: pooled 95% CI",
    )
    shared = sorted(reference)
    relative.plot(
        shared,
        [100 * math.expm1(reference[h]) for h in shared],
        "D--",
        color="tab:red",
        markerfacecolor="none",
        label=reference_label,
    )
    relative.axhline(0, color="gray", linewidth=0.8)
    relative.yaxis.set_major_formatter(PERCENT)
    relative.set_ylabel("perplexity against 1 head, relative")
    relative.set_title("Against one head")
    for axes in (level, relative):
        axes.set_xscale("log", base=2)
        axes.set_xticks(sorted({*heads, *shared}), [str(h) for h in sorted({*heads, *shared})])
        axes.xaxis.set_minor_formatter(NullFormatter())
        axes.set_xlabel("attention heads (they split the same width)")
        axes.grid(True, alpha=0.3)
        legend_below(axes, columns=1)
    return save_figure(figure, path)


def learning_rates(final: dict[str, dict[float, float]], selected: dict[str, float], path: Path) -> Path:
    """Final validation perplexity against learning rate on a log axis, one line per variant
    (`final`: label -> lr -> perplexity), each variant's selected learning rate circled."""
    figure, axes = plt.subplots(figsize=(7, 5))
    grid = sorted({lr for by_lr in final.values() for lr in by_lr})
    for label, by_lr in final.items():
        lrs = sorted(by_lr)
        (line,) = axes.plot(lrs, [by_lr[lr] for lr in lrs], marker="o", markersize=4, label=label)
        axes.plot(
            selected[label], by_lr[selected[label]], "o", markersize=11, markerfacecolor="none", color=line.get_color()
        )
    axes.plot([], [], "o", markersize=11, markerfacecolor="none", color="gray", label="selected (lowest)")
    axes.set_xscale("log")
    axes.set_xticks(grid, [f"{lr:g}" for lr in grid])
    axes.xaxis.set_minor_formatter(NullFormatter())
    plain_log_y(axes)
    axes.set_xlabel("peak learning rate (log scale)")
    axes.set_ylabel("final validation perplexity per token (log scale)")
    axes.set_title("Learning rate per variant")
    axes.grid(True, which="major", alpha=0.3)
    legend_below(axes)
    return save_figure(figure, path)


def log_ratio_by_learning_rate(ratios: dict[str, dict[float, list[float]]], path: Path) -> Path:
    """B against A at each learning rate both trained at (`ratios`: comparison -> lr -> the
    seeds' log-ratios of final validation perplexity): one line through the seeds' means per
    comparison, each seed a dot."""
    figure, axes = plt.subplots(figsize=(7, 5))
    grid = sorted({lr for by_lr in ratios.values() for lr in by_lr})
    for name, by_lr in ratios.items():
        lrs = sorted(by_lr)
        (line,) = axes.plot(lrs, [np.mean(by_lr[lr]) for lr in lrs], marker="o", markersize=4, label=name)
        for lr in lrs:
            axes.plot([lr] * len(by_lr[lr]), by_lr[lr], ".", color=line.get_color(), alpha=0.6)
    axes.axhline(0, color="gray", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_xticks(grid, [f"{lr:g}" for lr in grid])
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("peak learning rate of both (log scale)")
    axes.set_ylabel("log-ratio of final validation perplexity\n(below 0: B better)")
    axes.set_title("B against A at a shared learning rate")
    axes.grid(True, which="major", alpha=0.3)
    legend_below(axes, columns=1)
    return save_figure(figure, path)
