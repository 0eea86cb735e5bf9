"""The inspect stage's figures: attention maps of one sentence, every head's scores, and the
spotlight measure against its nulls."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headstudy.analysis.figures.plotting import legend_below, plain_log_y, plt, save_figure
from headstudy.analysis.measures.attention import distribution


def attention_maps(weights: np.ndarray, labels: list[str], titles: list[str], title: str, path: Path) -> Path:
    """One panel per head, two to a row so that they stay legible on a page: row = the token
    attending, column = the token attended to, colour = attention weight. Token labels on the
    outer edges only, so that no label runs into the next panel."""
    heads, length = weights.shape[0], weights.shape[-1]
    columns = min(heads, 2)
    rows = -(-heads // columns)
    side = max(3.2, 0.28 * length + 1.2)
    # Fixed gaps rather than tight_layout, which packs the panels until their tick labels touch.
    figure, axes = plt.subplots(
        rows,
        columns,
        figsize=(side * columns + 2.2, side * rows + 0.4),
        squeeze=False,
        gridspec_kw={"wspace": 0.12, "hspace": 0.15},
    )
    ticks = range(length)
    image = None
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(titles[head], fontsize=10)
        ax.set_xticks(ticks, labels if head + columns >= heads else [], rotation=90, fontsize=8)
        ax.set_yticks(ticks, labels if head % columns == 0 else [], fontsize=8)
        if head + columns >= heads:
            ax.set_xlabel("attended to")
        if head % columns == 0:
            ax.set_ylabel("attending")
    figure.suptitle(title)
    figure.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return save_figure(figure, path, layout=False, dpi=110, bbox_inches="tight")


def head_scores(rows: list[dict], path: Path) -> Path:
    """Per-head scores, one horizontal row per head (heads ordered within each model by mean
    attention distance, then averaged over seeds): mean over seeds, error bar = sd over seeds."""
    scores = {"previous_token": "previous token", "self": "self", "first_position": "first position"}
    labels = [
        f"variant {r['variant']}, layer {r['layer']}, " + (f"rank {r['rank']}" if r["heads"] > 1 else "only head")
        for r in rows
    ]
    positions = np.arange(len(rows))[::-1]
    height = 2.0 + 0.45 * len(rows)
    figure, (shares, ablation) = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    bar = 0.8 / len(scores)
    for index, (key, name) in enumerate(scores.items()):
        shares.barh(
            positions + (1 - index) * bar,
            [r[key]["mean"] for r in rows],
            bar,
            xerr=[r[key]["sd"] for r in rows],
            capsize=2,
            label=name,
        )
    shares.set_yticks(positions, labels, fontsize=8)
    shares.set_xlabel("mean attention weight\n(error bar: sd over seeds)")
    shares.set_title("Where each head's attention goes", fontsize=10)
    figure.legend(*shares.get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=3, frameon=False)
    ablation.barh(
        positions,
        [r["ablation_delta_ppl"]["mean"] for r in rows],
        xerr=[r["ablation_delta_ppl"]["sd"] for r in rows],
        capsize=3,
        color="tab:gray",
    )
    if all(r["ablation_delta_ppl"]["mean"] > 0 for r in rows):
        plain_log_y(ablation, "x")
        ablation.set_xlabel("test perplexity rise when zeroed\n(log scale; error bar: sd over seeds)")
    else:
        ablation.set_xlabel("test perplexity rise when zeroed\n(error bar: sd over seeds)")
    ablation.set_title("What each head is worth\n(zeroing a model's only head removes attention)", fontsize=10)
    for axes in (shares, ablation):
        axes.grid(True, axis="x", alpha=0.3)
    figure.tight_layout(rect=(0, 0.35 / height, 1, 1))
    return save_figure(figure, path, layout=False)


def model_attention_maps(
    maps: list[np.ndarray], head_scores: list[dict], labels: list[str], variant: str, seed: int, folder: Path
) -> list[Path]:
    """One figure per layer of one model's attention on a sentence (maps: (heads, T, T) per layer),
    its heads in rank order (head_scores: the model's ranked heads)."""
    drawn = []
    for layer, weights in enumerate(maps):
        order = sorted((r for r in head_scores if r["layer"] == layer), key=lambda r: r["rank"])
        drawn.append(
            attention_maps(
                weights[[r["head"] for r in order]],
                labels,
                [f"head {r['head']}: mean distance {r['distance']:.1f}" for r in order],
                f"Attention of variant {variant} (seed {seed}), layer {layer}, heads by mean distance",
                Path(folder) / f"attention_h{variant}_layer{layer}.png",
            )
        )
    return drawn


def null_box(axes, x: float, summary: dict, color: str, label: str | None) -> None:
    """A null's distribution at x: a line over its range, a box over its quartiles, a tick at the median."""
    axes.vlines(x, summary["min"], summary["max"], color=color, linewidth=1)
    axes.bar(x, summary["q75"] - summary["q25"], 0.16, bottom=summary["q25"], color=color, alpha=0.35, label=label)
    axes.hlines(summary["median"], x - 0.08, x + 0.08, color=color, linewidth=2)


def seed_dots(axes, x: float, values: list[float], label: str | None) -> None:
    """One dot per seed, spread a little sideways so that equal values stay visible."""
    offsets = np.linspace(-0.05, 0.05, len(values)) if len(values) > 1 else [0.0]
    axes.plot(np.add(x, offsets), values, "o", color="black", markersize=3.5, label=label)


def spotlight_nulls(spotlight: dict, fair: list[dict], layer: int, path: Path) -> Path:
    """A row per multi-head variant with a fair null. Left: at each threshold, each seed's
    coverage (dots) against the three nulls (box: quartiles, line: range, tick: median): unions of
    single heads, of heads from different models of the variant, and of one head per distance rank
    from different models. Right: the attention mass two heads share, pairs within one model (a
    dot per seed) against pairs of the same two ranks from different models (box)."""
    single = {row["threshold"]: row for row in spotlight.get("rows", []) if row["layer"] == layer}
    figure, axes = plt.subplots(len(fair), 2, figsize=(11, 3.6 * len(fair) + 0.6), squeeze=False)
    for (coverage, overlap), variant in zip(axes, fair, strict=True):
        rows = [row for row in variant["rows"] if row["layer"] == layer]
        for x, row in enumerate(rows):
            first = x == 0
            seed_dots(coverage, x - 0.3, row["multi_covered"], "each seed's own heads" if first else None)
            if row["threshold"] in single and single[row["threshold"]]["null_covered"]:
                unions = distribution(single[row["threshold"]]["null_covered"])
                null_box(coverage, x - 0.1, unions, "tab:gray", "single heads, 1-head models" if first else None)
            null_box(
                coverage, x + 0.1, row["cross_model"], "tab:blue", "any heads, different models" if first else None
            )
            null_box(
                coverage,
                x + 0.3,
                row["rank_matched"],
                "tab:orange",
                "one per rank, different models" if first else None,
            )
        coverage.set_xticks(range(len(rows)), [f"{row['threshold']:g}" for row in rows])
        coverage.set_xlabel("threshold of substantial weight")
        coverage.set_ylabel("positions covered per query")
        plain_log_y(coverage)
        coverage.set_title(
            f"Variant {variant['variant']}, layer {layer}: {variant['heads']} heads against unions of as many",
            fontsize=10,
        )
        legend_below(coverage)
        pairs = [row for row in variant["overlap"] if row["layer"] == layer]
        for x, row in enumerate(pairs):
            first = x == 0
            seed_dots(overlap, x - 0.12, row["within_by_seed"], "within one model (a dot per seed)" if first else None)
            null_box(overlap, x + 0.12, row["across"], "tab:blue", "same ranks, different models" if first else None)
        overlap.set_xticks(range(len(pairs)), [f"{row['ranks'][0]} and {row['ranks'][1]}" for row in pairs])
        overlap.set_xlabel("distance ranks of the two heads")
        overlap.set_ylabel("attention mass shared per query")
        overlap.set_ylim(bottom=0)
        overlap.set_title(f"Variant {variant['variant']}, layer {layer}: what two heads share", fontsize=10)
        legend_below(overlap)
        for panel in (coverage, overlap):
            panel.grid(True, axis="y", alpha=0.3)
    return save_figure(figure, path)
