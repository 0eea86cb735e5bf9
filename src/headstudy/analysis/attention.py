"""What each attention head follows, what it is worth, and whether several heads look at more
places than one: the inspect stage's measures, on a stream of test tokens.

For every layer and head: where its attention goes (previous token, itself, the first position),
how far and how thinly it spreads, and how much test perplexity rises when its output is zeroed.
Head numbers are arbitrary in each trained model, so heads are ordered within each model by mean
attention distance (rank 0 = the most local) before anything is averaged over seeds. Per layer,
the spotlight measures: how many distinct positions get substantial weight from at least one
head, and how many distinct top-1 targets the heads pick; and, as their null, the same coverage
for the union of k independently trained single heads on the same windows, over a sweep of
thresholds. The weights come from the model's own forward pass (analysis/capture.py).
"""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import torch
from omegaconf import DictConfig

from headstudy.analysis.capture import capturing
from headstudy.analysis.perplexity import perplexity, stream_nll
from headstudy.analysis.statistics import against_null, union_combinations
from headstudy.weights.batches import stream_batches
from headstudy.weights.model import Decoder

SCORES = ("previous_token", "self", "first_position", "distance", "entropy", "uniform_entropy")
SPOTLIGHT = ("covered_positions", "distinct_top1")
# The spotlight verdict should not hinge on one threshold of "substantial" weight.
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5)
ORDER_KEY = "distance"


def attention_scores(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-head sums over query positions t >= 1 (position 0 can only attend to itself) of
    each score, and the number of positions summed: weights is (batch, heads, T, T)."""
    length = weights.shape[-1]
    t = torch.arange(1, length)
    rows = weights[:, :, 1:, :]  # (B, H, T-1, T): query positions 1..T-1
    distance = (t[:, None] - torch.arange(length)[None, :]).clamp(min=0).to(weights.dtype)
    entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1)
    return {
        "previous_token": rows[:, :, torch.arange(length - 1), t - 1].sum((0, 2)),
        "self": rows[:, :, torch.arange(length - 1), t].sum((0, 2)),
        "first_position": rows[:, :, :, 0].sum((0, 2)),
        "distance": (rows * distance).sum(-1).sum((0, 2)),
        "entropy": entropy.sum((0, 2)),
        "uniform_entropy": torch.log(t.to(weights.dtype) + 1).sum().expand(weights.shape[1]) * weights.shape[0],
        "positions": torch.tensor(float(weights.shape[0] * (length - 1))),
    }


def spotlight_scores(weights: torch.Tensor, substantial: float) -> dict[str, torch.Tensor]:
    """Sums over query positions t >= 1 of one layer's heads taken together: the number of distinct
    positions that get more than `substantial` weight from at least one head, and the number of
    distinct positions the heads put their largest weight on. weights is (B, H, T, T)."""
    rows = weights[:, :, 1:, :]  # (B, H, T-1, T)
    covered = (rows > substantial).any(dim=1).sum(-1)  # (B, T-1)
    top1 = rows.argmax(-1)  # (B, H, T-1)
    distinct = (top1[:, :, None, :] == torch.arange(weights.shape[-1])[None, None, :, None]).any(1).sum(1)
    return {
        "covered_positions": covered.sum().float(),
        "distinct_top1": distinct.sum().float(),
        "positions": torch.tensor(float(rows.shape[0] * rows.shape[2])),
    }


@torch.no_grad()
def attention_measures(
    model: Decoder, tokens: np.ndarray, batch_size: int, substantial: float
) -> tuple[list[dict], list[dict]]:
    """Mean scores per (layer, head), and the spotlight measures per layer, over every query
    position t >= 1 of the stream."""
    model.eval()
    layers = model.attention_layers
    head_totals: list[dict] = [{} for _ in layers]
    layer_totals: list[dict] = [{} for _ in layers]
    with capturing(model):
        for inputs, _ in stream_batches(tokens, model.config.context, batch_size):
            if inputs.shape[1] < 2:
                continue
            model(inputs)
            for heads_total, layer_total, layer in zip(head_totals, layer_totals, layers, strict=False):
                for total, scores in (
                    (heads_total, attention_scores(layer.captured_weights)),
                    (layer_total, spotlight_scores(layer.captured_weights, substantial)),
                ):
                    for key, value in scores.items():
                        total[key] = total.get(key, 0) + value
    head_rows, layer_rows = [], []
    for layer_index, (heads_total, layer_total) in enumerate(zip(head_totals, layer_totals, strict=False)):
        positions = heads_total.pop("positions")
        for head in range(model.config.n_heads):
            head_rows.append(
                {
                    "layer": layer_index,
                    "head": head,
                    **{key: float(value[head] / positions) for key, value in heads_total.items()},
                }
            )
        positions = layer_total.pop("positions")
        layer_rows.append(
            {"layer": layer_index, **{key: float(value / positions) for key, value in layer_total.items()}}
        )
    return head_rows, layer_rows


@torch.no_grad()
def ablation_ppl(model: Decoder, tokens: np.ndarray, batch_size: int, layer: int, head: int) -> float:
    attention = model.attention_layers[layer]
    mask = torch.ones(model.config.n_heads)
    mask[head] = 0.0
    attention.head_mask = mask
    try:
        return perplexity(*stream_nll(model, tokens, batch_size))
    finally:
        attention.head_mask = None


def role(row: dict, roles: DictConfig) -> str:
    for name, rule in roles.items():
        if row[rule.score]["mean"] > rule.above:
            return name
    return "mixed"


def mean_sd(values) -> dict:
    values = np.asarray(values, dtype=float)
    return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0}


def rank_heads(head_rows: list[dict], key: str = ORDER_KEY) -> list[dict]:
    """One model's heads with their `rank` within their layer by `key`, smallest first: the
    label under which heads of different seeds are averaged (head 2 of one seed has nothing to do
    with head 2 of another)."""
    ranked = []
    for layer in sorted({row["layer"] for row in head_rows}):
        in_layer = sorted((row for row in head_rows if row["layer"] == layer), key=lambda row: (row[key], row["head"]))
        ranked += [{**row, "rank": rank} for rank, row in enumerate(in_layer)]
    return ranked


def over_seeds(per_model: list[dict], key: str, group_by: tuple[str, ...], measures: tuple[str, ...]) -> list[dict]:
    """Mean and sd over the study's seeds, per group (e.g. variant, layer, rank); for head rows,
    which head of each seed's model is in the group."""
    groups: dict[tuple, list[dict]] = {}
    for model in per_model:
        for row in model[key]:
            row = {**row, "variant": model["variant"], "heads": model["heads"], "seed": model["seed"]}
            groups.setdefault(tuple(row[g] for g in group_by), []).append(row)
    return [
        {
            **dict(zip(group_by, group, strict=False)),
            "heads": rows[0]["heads"],
            "seeds": [r["seed"] for r in rows],
            **({"head_by_seed": [r["head"] for r in rows]} if "head" in rows[0] else {}),
            **{m: mean_sd([r[m] for r in rows]) for m in measures},
        }
        for group, rows in groups.items()
    ]


@torch.no_grad()
def union_coverage(
    models: list[Decoder],
    groups: list[tuple[int, ...]],
    tokens: np.ndarray,
    batch_size: int,
    thresholds: tuple[float, ...],
) -> np.ndarray:
    """(groups, layers, thresholds): per query position t >= 1, the mean number of positions that
    get more than the threshold from at least one head of at least one model of the group, every
    model reading the same windows."""
    context, layers = models[0].config.context, models[0].config.n_layers
    if any((m.config.context, m.config.n_layers) != (context, layers) for m in models):
        raise ValueError("union_coverage: every model must have the same context and number of layers")
    totals = np.zeros((len(groups), layers, len(thresholds)))
    queries = 0
    with ExitStack() as stack:
        captured = [stack.enter_context(capturing(model.eval())) for model in models]
        for inputs, _ in stream_batches(tokens, context, batch_size):
            if inputs.shape[1] < 2:
                continue
            for model in models:
                model(inputs)
            queries += inputs.shape[0] * (inputs.shape[1] - 1)
            for layer in range(layers):
                rows = [attention[layer].captured_weights[:, :, 1:, :] for attention in captured]  # (B, H, T-1, T)
                for column, threshold in enumerate(thresholds):
                    above = [(weights > threshold).any(dim=1) for weights in rows]  # per model (B, T-1, T)
                    for index, group in enumerate(groups):
                        union = torch.stack([above[member] for member in group]).any(dim=0)
                        totals[index, layer, column] += union.sum().item()
    return totals / queries


def spotlight_null(
    loaded: list[dict], multi: str, tokens: np.ndarray, batch_size: int, thresholds: tuple[float, ...]
) -> dict:
    """The coverage of each seed of the `multi` variant (k heads) against its null: the union of
    k single heads trained independently (every model of the study with one head, taken k at a
    time in every combination), at each threshold. With fewer than k single-head models the null
    is the union of all of them, which lies below the k-head null."""
    multis = [i for i, m in enumerate(loaded) if m["variant"] == multi]
    singles = [i for i, m in enumerate(loaded) if m["heads"] == 1]
    if not multis or not singles:
        return {}
    k = loaded[multis[0]]["heads"]
    members = multis + singles  # groups below index into this list
    unions = [tuple(len(multis) + j for j in combo) for combo in union_combinations(len(singles), k)]
    groups = [(i,) for i in range(len(members))] + unions
    coverage = union_coverage([loaded[i]["model"] for i in members], groups, tokens, batch_size, thresholds)
    rows = []
    for layer in range(coverage.shape[1]):
        for column, threshold in enumerate(thresholds):
            observed = coverage[: len(multis), layer, column]
            alone = coverage[len(multis) : len(multis) + len(singles), layer, column]
            null = coverage[len(multis) + len(singles) :, layer, column]
            rows.append(
                {
                    "layer": layer,
                    "threshold": threshold,
                    "multi_covered": observed.tolist(),
                    "single_covered": alone.tolist(),
                    "null_covered": null.tolist(),
                    "null_mean": float(null.mean()),
                    "null_min": float(null.min()),
                    "null_max": float(null.max()),
                    "position": against_null(observed, null, complete=len(singles) >= k),
                }
            )
    return {
        "multi": multi,
        "heads": k,
        "multi_seeds": [loaded[i]["seed"] for i in multis],
        "singles": [{"variant": loaded[i]["variant"], "seed": loaded[i]["seed"]} for i in singles],
        "null_heads": min(k, len(singles)),
        "null_unions": len(unions),
        "complete": len(singles) >= k,
        "rows": rows,
    }


def measure_model(model: Decoder, tokens: np.ndarray, batch_size: int, substantial: float) -> dict:
    """One trained model on the stream: its perplexity, every head's scores with the perplexity
    rise when it is zeroed and its rank in its layer, and the spotlight measures per layer."""
    intact = perplexity(*stream_nll(model, tokens, batch_size))
    heads, layers = attention_measures(model, tokens, batch_size, substantial)
    for row in heads:
        row["ablation_delta_ppl"] = ablation_ppl(model, tokens, batch_size, row["layer"], row["head"]) - intact
    return {"test_ppl": intact, "head_scores": rank_heads(heads), "layers": layers}


def head_rows(per_model: list[dict], roles: DictConfig) -> list[dict]:
    """Every head's scores averaged over seeds by (variant, layer, rank), each named for its role."""
    rows = over_seeds(per_model, "head_scores", ("variant", "layer", "rank"), (*SCORES, "ablation_delta_ppl"))
    for row in rows:
        row["role"] = role(row, roles)
    return rows


def layer_rows(per_model: list[dict]) -> list[dict]:
    """The spotlight measures averaged over seeds by (variant, layer)."""
    return over_seeds(per_model, "layers", ("variant", "layer"), SPOTLIGHT)


def null_thresholds(substantial: float) -> tuple[float, ...]:
    """The thresholds of the null's sweep, the study's own among them."""
    return tuple(sorted({*THRESHOLDS, substantial}))


@torch.no_grad()
def sentence_maps(model: Decoder, ids: list[int]) -> list[np.ndarray]:
    """(heads, T, T) attention of every layer on one sentence."""
    with capturing(model) as layers:
        model(torch.tensor([ids[: model.config.context]]))
        return [layer.captured_weights[0].numpy() for layer in layers]
