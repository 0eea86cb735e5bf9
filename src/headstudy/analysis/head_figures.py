"""The inspect stage's figures: attention maps of one sentence, and every head's scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headstudy.analysis.plotting import plain_log_y, plt, save_figure


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
