"""What each attention head follows, what it is worth, and whether several heads look at more
places than one: the inspect stage's measures, on a stream of test tokens.

For every layer and head: where its attention goes (previous token, itself, the first position),
how far and how thinly it spreads, and how much test perplexity rises when its output is zeroed.
Head numbers are arbitrary in each trained model, so heads are ordered within each model by mean
attention distance (rank 0 = the most local) before anything is averaged over seeds. Per layer,
the spotlight measures: how many distinct positions get substantial weight from at least one
head, and how many distinct top-1 targets the heads pick; and, as their null, the same coverage
for the union of k independently trained single heads on the same windows, over a sweep of
thresholds. That null is weak (lone, wider heads that all look alike), so the fair null builds
its unions from the multi-head models themselves: k heads from k different models (any head, or
one head of each distance rank), beside the attention mass that two heads share, within one
model against across models. The weights come from the model's own forward pass
(analysis/measures/capture.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import DictConfig

from headstudy.analysis.measures.capture import capturing
from headstudy.analysis.measures.perplexity import perplexity, stream_nll
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


@dataclass
class Coverage:
    """One model over the whole stream: which cells (window, query t >= 1, position) get more than
    each threshold from at least one head of a layer, as bits packed batch by batch, (layers,
    thresholds, bytes), and how many query positions they span. Every model of a study reads the
    same windows in the same batches, so the cells line up bit for bit between models."""

    queries: int
    packed: np.ndarray


@torch.no_grad()
def attention_measures(
    model: Decoder, tokens: np.ndarray, batch_size: int, substantial: float, thresholds: tuple[float, ...] = ()
) -> tuple[list[dict], list[dict], Coverage]:
    """Mean scores per (layer, head), and the spotlight measures per layer, over every query
    position t >= 1 of the stream; and, from the same pass, the cells each layer covers at each
    of the thresholds (for the single-head null)."""
    model.eval()
    layers = model.attention_layers
    head_totals: list[dict] = [{} for _ in layers]
    layer_totals: list[dict] = [{} for _ in layers]
    cells: list[list[list[np.ndarray]]] = [[[] for _ in thresholds] for _ in layers]
    queries = 0
    with capturing(model):
        for inputs, _ in stream_batches(tokens, model.config.context, batch_size):
            if inputs.shape[1] < 2:
                continue
            model(inputs)
            queries += inputs.shape[0] * (inputs.shape[1] - 1)
            for per_layer, layer in zip(cells, layers, strict=True):
                rows = layer.captured_weights[:, :, 1:, :]
                for per_threshold, threshold in zip(per_layer, thresholds, strict=True):
                    per_threshold.append(np.packbits((rows > threshold).any(dim=1).numpy().ravel()))
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
    packed = np.array(
        [[np.concatenate(per_threshold) for per_threshold in per_layer] for per_layer in cells]
        if thresholds
        else np.zeros((len(layers), 0, 0)),
        dtype=np.uint8,
    )
    return head_rows, layer_rows, Coverage(queries, packed)


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
def captured_windows(models: list, tokens: np.ndarray, batch_size: int) -> Iterator[list[list[torch.Tensor]]]:
    """The loop over the test windows that the fair null runs, several models at once: every model
    reads the same windows; per batch, each model's attention weights per layer at query positions
    t >= 1, (B, H, T-1, T)."""
    context, layers = models[0].config.context, models[0].config.n_layers
    if any((m.config.context, m.config.n_layers) != (context, layers) for m in models):
        raise ValueError("the union measures need models of the same context and number of layers")
    with ExitStack() as stack:
        captured = [stack.enter_context(capturing(model.eval())) for model in models]
        for inputs, _ in stream_batches(tokens, context, batch_size):
            if inputs.shape[1] < 2:
                continue
            for model in models:
                model(inputs)
            yield [
                [attention[layer].captured_weights[:, :, 1:, :] for layer in range(layers)] for attention in captured
            ]


# The single-head null counts every union from a histogram over 2**n patterns: past this many
# single-head models the histogram (8 bytes a pattern, per layer and threshold) outgrows memory.
MOST_SINGLES = 22


def subset_sums(counts: np.ndarray) -> np.ndarray:
    """For counts indexed by a bit pattern (length 2**n): at each pattern S, the sum of the counts
    of every pattern inside S (its subsets), in n passes."""
    sums = counts.copy()
    for bit in range(len(sums).bit_length() - 1):
        pairs = sums.reshape(-1, 2, 1 << bit)
        pairs[:, 1, :] += pairs[:, 0, :]
    return sums


def union_counts_from_patterns(patterns: np.ndarray, unions: list[tuple[int, ...]]) -> np.ndarray:
    """patterns[S]: how many cells are covered by exactly the members in bit pattern S. For each
    union, the cells at least one of its members covers: all cells but those whose pattern lies
    inside the union's complement."""
    full = len(patterns) - 1
    outside = subset_sums(patterns)
    masks = np.array([sum(1 << member for member in union) for union in unions], dtype=np.int64)
    return outside[full] - outside[full ^ masks]


def pattern_counts(masks: list[np.ndarray], chunk: int = 1 << 20) -> np.ndarray:
    """For packed masks of n members over the same cells: how many cells have each of the 2**n
    patterns of which members cover them (padding bits, zero in every mask, count as pattern 0)."""
    counts = np.zeros(1 << len(masks), dtype=np.int64)
    for start in range(0, len(masks[0]), chunk):
        pattern = np.zeros(8 * len(masks[0][start : start + chunk]), dtype=np.int64)
        for bit, mask in enumerate(masks):
            pattern |= np.unpackbits(mask[start : start + chunk]).astype(np.int64) << bit
        counts += np.bincount(pattern, minlength=len(counts))
    return counts


def spotlight_null(loaded: list[dict], multi: str, thresholds: tuple[float, ...]) -> dict:
    """The coverage of each seed of the `multi` variant (k heads) against its null: the union of
    k single heads trained independently (every model of the study with one head, taken k at a
    time in every combination), at each threshold. With fewer than k single-head models the null
    is the union of all of them, which lies below the k-head null. From each model's Coverage at
    these thresholds; every union is counted exactly, from how many cells have each pattern of
    which single heads cover them: a union covers the cells whose pattern meets it."""
    multis = [i for i, m in enumerate(loaded) if m["variant"] == multi]
    singles = [i for i, m in enumerate(loaded) if m["heads"] == 1]
    if not multis or not singles:
        return {}
    if len(singles) > MOST_SINGLES:
        raise ValueError(
            f"the single-head null counts unions of at most {MOST_SINGLES} single-head models; the study has "
            f"{len(singles)}"
        )
    k = loaded[multis[0]]["heads"]
    members = multis + singles
    packed = [loaded[i]["coverage"].packed for i in members]
    queries = loaded[multis[0]]["coverage"].queries
    layers = packed[0].shape[0]
    unions = union_combinations(len(singles), k)
    alone = np.array([np.bitwise_count(cells).sum(axis=-1, dtype=np.int64) for cells in packed])
    null = np.array(
        [
            [
                union_counts_from_patterns(
                    pattern_counts([cells[layer, column] for cells in packed[len(multis) :]]), unions
                )
                for column in range(len(thresholds))
            ]
            for layer in range(layers)
        ]
    ).transpose(2, 0, 1)
    coverage = np.concatenate([alone, null]) / queries
    rows = []
    for layer in range(layers):
        for column, threshold in enumerate(thresholds):
            observed = coverage[: len(multis), layer, column]
            single = coverage[len(multis) : len(members), layer, column]
            union = coverage[len(members) :, layer, column]
            rows.append(
                {
                    "layer": layer,
                    "threshold": threshold,
                    "multi_covered": observed.tolist(),
                    "single_covered": single.tolist(),
                    "null_covered": union.tolist(),
                    "null_mean": float(union.mean()),
                    "null_median": float(np.median(union)),
                    "null_min": float(union.min()),
                    "null_max": float(union.max()),
                    "position": against_null(observed, union, complete=len(singles) >= k),
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


def heads_in_rank_order(head_scores: list[dict], layer: int) -> list[int]:
    """One model's head numbers in one layer, rank 0 (the most local) first."""
    return [row["head"] for row in sorted((r for r in head_scores if r["layer"] == layer), key=lambda r: r["rank"])]


def packed_above(rows: torch.Tensor, thresholds: tuple[float, ...]) -> np.ndarray:
    """(thresholds, heads, bytes): for each head of rows (B, H, T-1, T), which (window, query,
    position) cells get more than each threshold, packed eight to a byte, so that the union of
    heads is a bitwise OR and its coverage a count of set bits."""
    per_head = rows.transpose(0, 1).reshape(rows.shape[1], -1)
    return np.stack([np.packbits((per_head > threshold).numpy(), axis=-1) for threshold in thresholds])


def union_counts(masks: np.ndarray, unions: np.ndarray, chunk: int = 64) -> np.ndarray:
    """For packed masks (members, bytes) and unions (U, k) of member indices: the number of cells
    set in at least one member of each union. A chunk of unions at a time bounds the memory."""
    counts = np.empty(len(unions), dtype=np.int64)
    for start in range(0, len(unions), chunk):
        part = unions[start : start + chunk]
        union = masks[part[:, 0]]  # fancy indexing copies: the OR below writes into it
        for column in range(1, part.shape[1]):
            np.bitwise_or(union, masks[part[:, column]], out=union)
        counts[start : start + chunk] = np.bitwise_count(union).sum(axis=-1, dtype=np.int64)
    return counts


def nth_combination(index: int, n: int, k: int) -> list[int]:
    """The index-th k-subset of range(n) in itertools.combinations' order, without listing them."""
    chosen, start = [], 0
    for slot in range(k):
        for candidate in range(start, n):
            following = math.comb(n - candidate - 1, k - slot - 1)
            if index < following:
                chosen.append(candidate)
                start = candidate + 1
                break
            index -= following
    return chosen


def cross_model_union(index: int, models: int, heads: int) -> list[int]:
    """The index-th union of `heads` heads, each from a different model, any head of each
    (members numbered model * heads + head): models in combinations' order, then the heads as
    the digits of a number in base `heads`, as itertools.product counts."""
    chosen = nth_combination(index // heads**heads, models, heads)
    code = index % heads**heads
    picks = [(code // heads**place) % heads for place in reversed(range(heads))]
    return [model * heads + head for model, head in zip(chosen, picks, strict=True)]


def rank_matched_union(index: int, heads_by_rank: list[list[int]]) -> list[int]:
    """The index-th union that takes the head of each rank from a different model
    (heads_by_rank[model][rank] is its head number), in itertools.permutations' order of the
    models assigned to ranks 0, 1, ..."""
    models, heads = len(heads_by_rank), len(heads_by_rank[0])
    remaining, union = list(range(models)), []
    for rank in range(heads):
        following = math.perm(models - rank - 1, heads - rank - 1)
        model = remaining.pop(index // following)
        index %= following
        union.append(model * heads + heads_by_rank[model][rank])
    return union


def chosen_unions(total: int, most: int, seed: int) -> np.ndarray:
    """Which of `total` unions to count: all of them, or a fixed-size random sample of `most`,
    drawn with `seed`, when there are more (in order, so that the sample reads like the whole)."""
    if total <= most:
        return np.arange(total)
    return np.sort(np.random.default_rng(seed).choice(total, most, replace=False))


def overlap_pairs(heads_by_rank: list[list[int]]) -> list[dict]:
    """Pairs of heads of two different ranks: within each model, and the same two ranks from
    two different models (the lower rank from the first), members numbered model * heads + head."""
    models, heads = len(heads_by_rank), len(heads_by_rank[0])
    pairs = []
    for low, high in itertools.combinations(range(heads), 2):
        for first, second in itertools.product(range(models), repeat=2):
            pairs.append(
                {
                    "kind": "within" if first == second else "across",
                    "ranks": (low, high),
                    "models": (first, second),
                    "members": (
                        first * heads + heads_by_rank[first][low],
                        second * heads + heads_by_rank[second][high],
                    ),
                }
            )
    return pairs


def distribution(values) -> dict:
    """A null's distribution in a few numbers: its range, quartiles, median and mean."""
    values = np.asarray(values, dtype=float)
    low, lower_quartile, median, upper_quartile, high = np.quantile(values, [0, 0.25, 0.5, 0.75, 1])
    return {
        "min": float(low),
        "q25": float(lower_quartile),
        "median": float(median),
        "q75": float(upper_quartile),
        "max": float(high),
        "mean": float(values.mean()),
    }


def against_fair_null(observed: np.ndarray, null: np.ndarray) -> dict:
    """The null's distribution, where the observed values (one per seed) stand against its range,
    and in how many seeds they exceed its median."""
    summary = distribution(null)
    return {
        **summary,
        "unions": len(null),
        "position": against_null(observed, null),
        "seeds_above_median": int((observed > summary["median"]).sum()),
    }


def overlap_rows(pairs: list[dict], mass: np.ndarray, layer: int, models: int) -> tuple[list[dict], dict]:
    """Per pair of ranks, the shared attention mass of pairs within one model (one value per
    seed) and across models; and the same over every pair of ranks (within: the sd over seeds of
    each model's mean over its pairs)."""
    rows = []
    for ranks in sorted({pair["ranks"] for pair in pairs}):
        within = [mass[i] for i, pair in enumerate(pairs) if pair["ranks"] == ranks and pair["kind"] == "within"]
        across = [mass[i] for i, pair in enumerate(pairs) if pair["ranks"] == ranks and pair["kind"] == "across"]
        rows.append(
            {
                "layer": layer,
                "ranks": list(ranks),
                "within_by_seed": [float(value) for value in within],
                "within": mean_sd(within),
                "across": {**distribution(across), "sd": mean_sd(across)["sd"], "pairs": len(across)},
                "within_minus_across": float(np.mean(within) - np.mean(across)),
            }
        )
    within = [mass[i] for i, pair in enumerate(pairs) if pair["kind"] == "within"]
    across = [mass[i] for i, pair in enumerate(pairs) if pair["kind"] == "across"]
    per_model = [
        np.mean([mass[i] for i, pair in enumerate(pairs) if pair["kind"] == "within" and pair["models"][0] == model])
        for model in range(models)
    ]
    summary = {
        "layer": layer,
        "within": {"mean": float(np.mean(within)), "sd_over_seeds": mean_sd(per_model)["sd"], "pairs": len(within)},
        "across": {"mean": float(np.mean(across)), "sd_over_pairs": mean_sd(across)["sd"], "pairs": len(across)},
        # Every pair of ranks has as many pairs within as the others, and across likewise, so this
        # is also the mean over pairs of ranks of their differences.
        "within_minus_across": float(np.mean(within) - np.mean(across)),
    }
    return rows, summary


def rank_choice_misses(below: torch.Tensor, heads_by_rank: list[list[int]]) -> np.ndarray:
    """For cells below (B, members, T-1, T), True where a member's weight is not above the
    threshold (member m * heads + h): for every union that takes the head of each rank from any
    model (models ** heads of them, own models included), the number of cells none of its heads
    covers, indexed [model of rank 0, model of rank 1, ...]. A product over ranks per cell, summed
    over cells as one matrix product; exact, since each batch's counts stay below 2**24."""
    models, heads = len(heads_by_rank), len(heads_by_rank[0])
    per_rank = [
        below[:, [model * heads + heads_by_rank[model][rank] for model in range(models)]]
        .transpose(0, 1)
        .reshape(models, -1)
        .float()
        for rank in range(heads)
    ]

    def outer(factors: list[torch.Tensor]) -> torch.Tensor:
        product = factors[0]
        for factor in factors[1:]:
            product = (product[:, None, :] * factor[None, :, :]).reshape(-1, factor.shape[1])
        return product

    half = (heads + 1) // 2
    misses = outer(per_rank[:half]) @ outer(per_rank[half:]).T
    return misses.round().to(torch.int64).numpy().reshape((models,) * heads)


def rank_shuffles(models: int, heads: int, most: int, seed: int, chunk: int = 100_000) -> Iterator[list[np.ndarray]]:
    """Assignments of each rank's heads to the models, ranks 1 to heads - 1 (rank 0 stays: moving
    it only renames the unions), `chunk` at a time, as arrays (n, models) per rank: every one of
    the models! ** (heads - 1) when there are at most `most`, otherwise `most` drawn with `seed`."""
    total = math.factorial(models) ** (heads - 1)
    if total <= most:
        orders = np.array(list(itertools.permutations(range(models))))
        for start in range(0, total, chunk):
            digits = np.unravel_index(np.arange(start, min(start + chunk, total)), (len(orders),) * (heads - 1))
            yield [orders[digit] for digit in digits]
        return
    rng = np.random.default_rng(seed)
    for start in range(0, most, chunk):
        count = min(chunk, most - start)
        yield [np.argsort(rng.random((count, models)), axis=1) for _ in range(heads - 1)]


def rank_shuffle_test(covered: np.ndarray, most: int, seed: int) -> dict:
    """A permutation test of whether a model's own heads cover more than heads of the same ranks
    that trained in other models. covered[j0, j1, ...]: the cells covered by the union of model
    j0's rank-0 head, model j1's rank-1 head, and so on. The statistic: the cells covered by each
    model's own heads, summed over models; its null: the same sum after each rank's heads are
    shuffled among the models, which is what "heads of one rank are exchangeable between
    models" allows. One-sided (own heads cover more); exact over every shuffle when there are at
    most `most`, otherwise `most` drawn with `seed` and p counted with the observed one among them."""
    models, heads = covered.shape[0], covered.ndim
    own = np.arange(models)
    observed = int(covered[(own,) * heads].sum())
    exact = math.factorial(models) ** (heads - 1) <= most
    at_least, shuffles, total = 0, 0, 0
    for assignment in rank_shuffles(models, heads, most, seed):
        sums = covered[(own[None, :], *assignment)].sum(axis=1)
        at_least += int((sums >= observed).sum())
        shuffles += len(sums)
        total += int(sums.sum())
    p = at_least / shuffles if exact else (at_least + 1) / (shuffles + 1)
    return {
        "p": p,
        "exact": exact,
        "shuffles": shuffles,
        "observed": observed / models,
        "null_mean": total / shuffles / models,
    }


def per_query(test: dict, queries: int) -> dict:
    """A rank-shuffle test's coverage in positions per query instead of cells."""
    return {**test, "observed": test["observed"] / queries, "null_mean": test["null_mean"] / queries}


@torch.no_grad()
def fair_null(
    loaded: list[dict],
    variant: str,
    tokens: np.ndarray,
    batch_size: int,
    thresholds: tuple[float, ...],
    max_unions: int,
    sample_seed: int,
    shuffles: int,
) -> dict:
    """A fair null for the coverage of the `variant`'s models (k heads each), built from those
    models themselves: the union of k heads each from a different model, any head (cross-model),
    or the head of each distance rank from a different model (rank-matched), at each threshold;
    and the attention mass two heads share per query, pairs within one model against the same two
    ranks from two different models. Needs at least k models of the variant. Counted exactly on
    packed bit masks; a null of more than max_unions unions is a random sample of that many. Beside
    the ranges, a test: rank_shuffle_test of the mean coverage against heads of each rank shuffled
    among the models (at most `shuffles` of them, drawn with sample_seed)."""
    members = [entry for entry in loaded if entry["variant"] == variant]
    found = {"variant": variant, "seeds": [entry["seed"] for entry in members], "models": len(members)}
    heads = members[0]["heads"] if members else 0
    if any(entry["heads"] != heads for entry in members):
        raise ValueError(f"fair_null: the models of variant {variant} differ in their number of heads")
    if heads < 2 or len(members) < heads:
        return {**found, "heads": heads, "available": False}
    models = [entry["model"] for entry in members]
    layers = models[0].config.n_layers
    by_rank = [[heads_in_rank_order(entry["head_scores"], layer) for entry in members] for layer in range(layers)]
    cross_total, rank_total = math.comb(len(members), heads) * heads**heads, math.perm(len(members), heads)
    cross = np.array(
        [cross_model_union(int(i), len(members), heads) for i in chosen_unions(cross_total, max_unions, sample_seed)]
    )
    ranked = [
        np.array(
            [rank_matched_union(int(i), by_rank[layer]) for i in chosen_unions(rank_total, max_unions, sample_seed)]
        )
        for layer in range(layers)
    ]
    own = np.arange(len(members) * heads).reshape(len(members), heads)
    pairs = [overlap_pairs(by_rank[layer]) for layer in range(layers)]
    covered = {
        name: np.zeros((layers, len(thresholds), count))
        for name, count in (("own", len(own)), ("cross_model", len(cross)), ("rank_matched", len(ranked[0])))
    }
    shared = np.zeros((layers, len(pairs[0])))
    misses = np.zeros((layers, len(thresholds)) + (len(members),) * heads, dtype=np.int64)
    queries, cells = 0, 0
    for weights in captured_windows(models, tokens, batch_size):
        queries += weights[0][0].shape[0] * weights[0][0].shape[2]
        cells += weights[0][0][:, 0].numel()
        for layer in range(layers):
            rows = torch.cat([per_model[layer] for per_model in weights], dim=1)  # member m * heads + h
            masks = packed_above(rows, thresholds)
            for column, threshold in enumerate(thresholds):
                misses[layer, column] += rank_choice_misses(~(rows > threshold), by_rank[layer])
                covered["own"][layer, column] += union_counts(masks[column], own)
                covered["cross_model"][layer, column] += union_counts(masks[column], cross)
                covered["rank_matched"][layer, column] += union_counts(masks[column], ranked[layer])
            for index, pair in enumerate(pairs[layer]):
                first, second = pair["members"]
                shared[layer, index] += torch.minimum(rows[:, first], rows[:, second]).sum(dtype=torch.float64).item()
    coverage = {name: totals / queries for name, totals in covered.items()}
    rows = [
        {
            "layer": layer,
            "threshold": threshold,
            "multi_covered": coverage["own"][layer, column].tolist(),
            **{
                name: against_fair_null(coverage["own"][layer, column], coverage[name][layer, column])
                for name in ("cross_model", "rank_matched")
            },
            "rank_shuffle": per_query(rank_shuffle_test(cells - misses[layer, column], shuffles, sample_seed), queries),
        }
        for layer in range(layers)
        for column, threshold in enumerate(thresholds)
    ]
    overlap = [overlap_rows(pairs[layer], shared[layer] / queries, layer, len(members)) for layer in range(layers)]
    return {
        **found,
        "heads": heads,
        "available": True,
        "cross_model_unions": {"counted": len(cross), "of": cross_total},
        "rank_matched_unions": {"counted": len(ranked[0]), "of": rank_total},
        "rows": rows,
        "overlap": [row for rows_of_layer, _ in overlap for row in rows_of_layer],
        "overlap_summary": [summary for _, summary in overlap],
    }


def measure_model(
    model: Decoder, tokens: np.ndarray, batch_size: int, substantial: float, thresholds: tuple[float, ...] = ()
) -> tuple[dict, Coverage]:
    """One trained model on the stream: its perplexity, every head's scores with the perplexity
    rise when it is zeroed and its rank in its layer, and the spotlight measures per layer; and
    its Coverage at the thresholds."""
    intact = perplexity(*stream_nll(model, tokens, batch_size))
    heads, layers, coverage = attention_measures(model, tokens, batch_size, substantial, thresholds)
    for row in heads:
        row["ablation_delta_ppl"] = ablation_ppl(model, tokens, batch_size, row["layer"], row["head"]) - intact
    return {"test_ppl": intact, "head_scores": rank_heads(heads), "layers": layers}, coverage


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
