"""The fair null for "several spotlights" (docs/compute-plan.md, 2026-12-03, from 00:52): unions of heads
from different models of the multi-head variant (any head, or one head per distance rank) and
the attention two heads share, on hand-made attention whose answers are known; and what the
report says about them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from fixed_attention import FixedAttention, union_coverage, with_coverage

from headstudy.analysis.figures import heads as head_figures
from headstudy.analysis.measures.attention import (
    cross_model_union,
    fair_null,
    rank_choice_misses,
    rank_heads,
    rank_matched_union,
    rank_shuffle_test,
    spotlight_null,
    union_counts,
)
from headstudy.analysis.rendering.render import to_markdown
from headstudy.analysis.sections.heads import heads_blocks

CONTEXT = 32
WINDOWS = np.random.default_rng(0).integers(0, 1024, 4 * CONTEXT + 1).astype(np.uint16)  # 4 windows, 31 queries each
QUERIES = range(1, CONTEXT)
THRESHOLDS = (0.2, 0.5)


def back(offset: int):
    """All weight `offset` tokens back, on the first position where there is none."""

    def pattern(length: int) -> torch.Tensor:
        weights = torch.zeros(length, length)
        t = torch.arange(length)
        weights[t, (t - offset).clamp(min=0)] = 1
        return weights

    pattern.offset = offset
    return pattern


def covered(offsets) -> float:
    """The reference answer, counted with sets: per query t >= 1 the positions that heads
    attending `offsets` back look at, mean over queries."""
    return float(np.mean([len({max(t - d, 0) for d in offsets}) for t in QUERIES]))


def entry(seed: int, *patterns, variant: str = "4", distances=None) -> dict:
    """One model as inspect hands it to the nulls: its heads ranked by mean distance, as inspect ranks them."""
    distances = distances or [p.offset for p in patterns]
    scores = rank_heads([{"layer": 0, "head": h, "distance": d} for h, d in enumerate(distances)])
    return {
        "variant": variant,
        "heads": len(patterns),
        "seed": seed,
        "model": FixedAttention(*patterns, context=CONTEXT),
        "head_scores": scores,
    }


def same_distances_in_every_seed() -> list[dict]:
    """Five 4-head models whose heads attend 1, 2, 3 and 4 tokens back: the same set of
    distances in every seed, under different head numbers."""
    offsets = [1, 2, 3, 4]
    return [entry(seed, *(back(d) for d in offsets[seed % 4 :] + offsets[: seed % 4])) for seed in range(1, 6)]


def null(loaded: list[dict], max_unions: int = 2000, sample_seed: int = 0, shuffles: int = 2_000_000) -> dict:
    return fair_null(loaded, "4", WINDOWS, 3, THRESHOLDS, max_unions, sample_seed, shuffles)


def test_rank_matched_unions_cover_what_each_model_covers_when_every_seed_learned_the_same_distances():
    loaded = same_distances_in_every_seed()
    result = null(loaded)
    own = covered([1, 2, 3, 4])  # (1 + 2 + 3 + 4 * 28) / 31
    assert result["available"] and result["rank_matched_unions"] == {"counted": 120, "of": 120}
    for row in result["rows"]:
        assert row["multi_covered"] == pytest.approx([own] * 5)
        ranked = row["rank_matched"]
        assert (ranked["min"], ranked["max"]) == pytest.approx((own, own)) and ranked["unions"] == 120
        assert ranked["position"] == "within"
    # The models' own coverage, counted on packed bits, is the spotlight measure's own union.
    direct = union_coverage([m["model"] for m in loaded], [(i,) for i in range(5)], WINDOWS, 3, THRESHOLDS)
    np.testing.assert_allclose([row["multi_covered"] for row in result["rows"]], direct[:, 0, :].T)


def test_cross_model_unions_repeat_roles_so_a_model_of_distinct_heads_tops_their_range():
    row = null(same_distances_in_every_seed())["rows"][0]
    cross = row["cross_model"]
    # Every choice of 4 of the 5 models and one head of each: the offsets chosen, counted with sets.
    reference = [covered(picks) for _ in range(5) for picks in itertools.product([1, 2, 3, 4], repeat=4)]
    assert cross["unions"] == 1280
    assert cross["min"] == pytest.approx(1.0)  # four heads of one role look at one place
    assert cross["max"] == pytest.approx(covered([1, 2, 3, 4]))  # four roles: as much as a model
    assert cross["median"] == pytest.approx(float(np.median(reference)))
    assert cross["mean"] == pytest.approx(float(np.mean(reference)))
    assert cross["median"] < covered([1, 2, 3, 4])
    assert cross["position"] == "within" and cross["seeds_above_median"] == 5


def test_a_model_whose_heads_are_all_alike_covers_less_than_heads_from_different_models():
    # Seed s: four copies of one head attending s tokens back. Heads taken from different models
    # attend different distances, so every union covers more than any model's own four heads.
    loaded = [entry(seed, *(back(seed) for _ in range(4))) for seed in range(1, 6)]
    result = null(loaded)
    row = result["rows"][0]
    assert row["multi_covered"] == pytest.approx([1.0] * 5)
    assert row["cross_model"]["position"] == "below" and row["rank_matched"]["position"] == "below"
    assert row["cross_model"]["min"] == pytest.approx(min(covered(c) for c in itertools.combinations(range(1, 6), 4)))
    # Identical heads share all their weight; heads a and b tokens back share it only at the
    # queries t <= min(a, b), where both fall on the first position.
    [summary] = result["overlap_summary"]
    assert summary["within"]["mean"] == pytest.approx(1.0)
    across = np.mean([min(a, b) / 31 for a, b in itertools.permutations(range(1, 6), 2)])
    assert across == pytest.approx(2 / 31)
    assert summary["across"]["mean"] == pytest.approx(across) and summary["across"]["pairs"] == 6 * 20
    assert summary["within_minus_across"] == pytest.approx(1 - 2 / 31)


def half_back_half_first(length: int) -> torch.Tensor:
    weights = 0.5 * back(1)(length)
    weights[:, 0] += 0.5
    return weights


def test_shared_attention_pairs_heads_by_rank_within_and_across_models():
    near, far = back(1), back(CONTEXT)  # far: always on the first position, as no query is CONTEXT tokens in
    # Model A: near (rank 0), half near half first (rank 1). Model B: far as head 0 (rank 1), near as head 1 (rank 0).
    loaded = [
        entry(1, near, half_back_half_first, variant="2", distances=[1.0, 5.0]),
        entry(2, far, near, variant="2", distances=[16.0, 1.0]),
    ]
    result = fair_null(loaded, "2", WINDOWS, 3, THRESHOLDS, 2000, 0, 1000)
    [row] = result["overlap"]
    # Within A: near and half-near share 0.5 at every t >= 2 and all of it at t = 1 (both on
    # position 0); within B: near and far share only t = 1.
    assert row["ranks"] == [0, 1]
    assert row["within_by_seed"] == pytest.approx([(1 + 30 * 0.5) / 31, 1 / 31])
    # Across, rank 0 of one model with rank 1 of the other: A's near with B's far (1/31), B's
    # near with A's half-near (16/31). Pairing by head number instead would give other pairs.
    assert sorted([row["across"]["min"], row["across"]["max"]]) == pytest.approx([1 / 31, 16 / 31])
    assert row["across"]["pairs"] == 2
    assert row["within_minus_across"] == pytest.approx(0.0, abs=1e-12)


def test_the_fair_null_needs_a_model_per_head_of_a_union():
    result = null(same_distances_in_every_seed()[:3])
    assert result == {"variant": "4", "seeds": [1, 2, 3], "models": 3, "heads": 4, "available": False}
    assert not fair_null([], "4", WINDOWS, 3, THRESHOLDS, 2000, 0, 1000)["available"]


def test_unions_are_numbered_as_itertools_lists_them():
    models, heads = 5, 3
    listed = [
        [m * heads + h for m, h in zip(chosen, picks, strict=True)]
        for chosen in itertools.combinations(range(models), heads)
        for picks in itertools.product(range(heads), repeat=heads)
    ]
    assert [cross_model_union(i, models, heads) for i in range(len(listed))] == listed
    by_rank = [[2, 0, 1], [0, 1, 2], [1, 2, 0], [2, 1, 0], [0, 2, 1]]
    assigned = [
        [m * heads + by_rank[m][rank] for rank, m in enumerate(order)]
        for order in itertools.permutations(range(models), heads)
    ]
    assert [rank_matched_union(i, by_rank) for i in range(len(assigned))] == assigned


def test_a_union_of_packed_masks_counts_each_cell_once():
    cells = np.random.default_rng(1).random((6, 1001)) > 0.7  # not a multiple of 8: packbits pads with zeros
    unions = np.array([[0, 1, 2], [3, 3, 3], [5, 0, 4], [1, 2, 5]])
    expected = [int(cells[union].any(axis=0).sum()) for union in unions]
    assert union_counts(np.packbits(cells, axis=-1), unions, chunk=3).tolist() == expected


def test_a_null_larger_than_max_unions_is_a_seeded_sample_of_it():
    loaded = same_distances_in_every_seed()
    whole = null(loaded)["rows"][0]["cross_model"]
    sampled = null(loaded, max_unions=100, sample_seed=7)
    assert sampled["cross_model_unions"] == {"counted": 100, "of": 1280}
    assert sampled["rank_matched_unions"] == {"counted": 100, "of": 120}
    part = sampled["rows"][0]["cross_model"]
    assert whole["min"] <= part["min"] <= part["max"] <= whole["max"] and part["unions"] == 100
    assert null(loaded, max_unions=100, sample_seed=7)["rows"] == sampled["rows"]


def report_text(heads: dict, tmp_path) -> str:
    return to_markdown(heads_blocks(heads, {"4": "4 heads"}), tmp_path)


def heads_file(loaded: list[dict], singles: list, tmp_path) -> dict:
    """heads.json as inspect writes it, for the stand-in models and single heads."""
    everything = loaded + [entry(10 + i, pattern, variant="1") for i, pattern in enumerate(singles)]
    spotlight = spotlight_null(with_coverage(everything, WINDOWS, 3, THRESHOLDS), "4", THRESHOLDS)
    fair = {
        "max_unions": 2000,
        "sample_seed": 0,
        "shuffles": 2_000_000,
        "alpha": 0.05,
        "overlap_margin": 0.05,
        "predicted": "4",
        "variants": [null(loaded)],
    }
    figure = head_figures.spotlight_nulls(spotlight, fair["variants"], 0, tmp_path / "spotlight_nulls_layer0.png")
    (tmp_path / "head_scores.png").write_bytes(b"")
    return {
        "sentence": "a",
        "substantial_weight": 0.2,
        "roles": {},
        "rows": [],
        "layers": [],
        "models": [],
        "spotlight": spotlight,
        "fair_null": fair,
        "figures": {
            "attention_maps": [],
            "head_scores": str(tmp_path / "head_scores.png"),
            "spotlight_nulls": [str(figure)],
        },
    }


def test_within_the_rank_matched_null_the_report_says_the_heads_differ_not_that_they_divide_the_work(tmp_path):
    # Single heads that all look alike: the model is above the weaker null, within the rank-matched one.
    heads = heads_file(same_distances_in_every_seed(), [back(1)] * 4, tmp_path)
    text = report_text(heads, tmp_path)
    assert "This is the weaker null" in text
    assert "more than every union of 4 independent single heads" in text
    assert "against this weaker null that is all the measure shows" in text
    assert "supports the spotlight picture" not in text
    # Every union of one head per rank covers the same: no shuffle covers less than the models' own.
    assert heads["fair_null"]["variants"][0]["rows"][0]["rank_shuffle"]["p"] == 1.0
    assert "exact over all 1,728,000 shuffles, one-sided p = 1.000" in text
    assert (
        "the heads of one model cover no more than heads of the same ranks from other seeds do by chance. So this "
        "measure shows that the heads of a model differ (a set of different distances, much the same in every seed); "
        "it does not show that they coordinate or divide the work" in text
    )
    assert "Every union is counted, exactly: each head's cells" in text
    assert "1,280 cross-model unions of 1,280 and 120 rank-matched unions of 120" in text
    assert "1. More positions than the median cross-model union: held (in 5 of 5 seeds)." in text
    assert "2. Within the range of the rank-matched unions: held (within)." in text
    assert "3. Pairs within a model share less attention" in text and "by less than 0.05: held" in text
    assert "![spotlight nulls layer0](spotlight_nulls_layer0.png)" in text
    assert (tmp_path / "spotlight_nulls_layer0.png").stat().st_size > 0


def test_the_report_claims_only_what_each_null_shows(tmp_path):
    heads = heads_file([entry(seed, *(back(seed) for _ in range(4))) for seed in range(1, 6)], [back(1)] * 4, tmp_path)
    text = report_text(heads, tmp_path)
    assert "heads picked from different models cover more than a model's own heads" in text
    assert "the heads of one model overlap more than heads of those ranks trained apart" in text
    assert "1. More positions than the median cross-model union: did not hold (in 0 of 5 seeds)." in text
    assert "2. Within the range of the rank-matched unions: did not hold (below)." in text
    # Identical heads within a model share far more than heads trained apart: prediction 3 holds.
    assert "heads of one model share more than heads of the same ranks trained apart" in text
    # Above the rank-matched null by its test: a claim about training together, and no more.
    for row in heads["fair_null"]["variants"][0]["rows"]:
        row["rank_matched"]["position"] = "above"
        row["rank_shuffle"]["p"] = 0.0004
    text = report_text(heads, tmp_path)
    assert "one-sided p < 0.001): the heads of one model cover more than heads of the same ranks" in text
    assert "beyond each head's distance rank; that is as far as this measure goes" in text
    assert "2. Within the range of the rank-matched unions: did not hold (above)." in text
    assert "divide the work" not in text.split("A fairer null")[1].split("Attention maps")[0]


def test_a_variant_without_enough_models_says_why_it_has_no_fair_null(tmp_path):
    heads = heads_file(same_distances_in_every_seed(), [back(1)] * 4, tmp_path)
    heads["fair_null"]["variants"] = [null(same_distances_in_every_seed()[:2])]
    heads["figures"]["spotlight_nulls"] = []
    text = report_text(heads, tmp_path)
    assert "No fair null for 4 heads: a union takes each of its 4 heads from a different model" in text
    assert "A fairer null" not in text
    heads["fair_null"]["variants"] = [fair_null([], "4", WINDOWS, 3, THRESHOLDS, 2000, 0, 1000)]
    assert "No fair null for 4 heads: the study has no model of it" in report_text(heads, tmp_path)


def test_unions_of_one_head_per_rank_miss_the_cells_that_checking_each_union_finds_uncovered():
    models, heads = 3, 3
    below = torch.from_numpy(np.random.default_rng(3).random((2, models * heads, 5, 6)) > 0.4)
    by_rank = [[2, 0, 1], [0, 1, 2], [1, 2, 0]]
    misses = rank_choice_misses(below, by_rank)
    for choice in itertools.product(range(models), repeat=heads):
        members = [model * heads + by_rank[model][rank] for rank, model in enumerate(choice)]
        assert misses[choice] == int(below[:, members].all(dim=1).sum())


def shuffled_sums(covered: np.ndarray) -> list[int]:
    """Every shuffle's statistic, listed the slow way: rank 0 in place, ranks 1.. permuted."""
    models, heads = covered.shape[0], covered.ndim
    orders = list(itertools.permutations(range(models)))
    return [
        sum(int(covered[(j, *(order[j] for order in assignment))]) for j in range(models))
        for assignment in itertools.product(orders, repeat=heads - 1)
    ]


def test_the_rank_shuffle_test_is_exact_over_every_shuffle_and_seeded_beyond_them():
    rng = np.random.default_rng(4)
    covered = rng.integers(0, 20, (4, 4, 4))
    covered[(np.arange(4),) * 3] += 12  # the models' own heads cover more
    sums = shuffled_sums(covered)
    observed = sum(int(covered[j, j, j]) for j in range(4))
    exact = rank_shuffle_test(covered, most=len(sums), seed=0)
    assert exact["exact"] and exact["shuffles"] == len(sums) == 576
    assert exact["p"] == sum(s >= observed for s in sums) / 576 and exact["p"] < 0.05
    assert exact["observed"] == observed / 4 and exact["null_mean"] == pytest.approx(np.mean(sums) / 4)
    sampled = rank_shuffle_test(covered, most=300, seed=1)
    assert not sampled["exact"] and sampled["shuffles"] == 300
    assert sampled == rank_shuffle_test(covered, most=300, seed=1)
    assert sampled["p"] == pytest.approx(exact["p"], abs=0.05) and sampled["p"] >= 1 / 301


def test_heads_that_fit_together_only_in_their_own_model_pass_the_rank_shuffle_test(tmp_path):
    # Model j attends j + 1, j + 2, j + 3 and j + 4 back: its own four heads never coincide, while a
    # shuffled set often takes two heads of one distance from two models.
    loaded = [entry(seed, *(back(seed + d) for d in range(4))) for seed in range(1, 6)]
    row = null(loaded)["rows"][0]
    assert row["multi_covered"] == pytest.approx([covered([s + d for d in range(4)]) for s in range(1, 6)])
    assert row["rank_shuffle"]["exact"] and row["rank_shuffle"]["p"] < 0.05
    assert row["rank_shuffle"]["null_mean"] < row["rank_shuffle"]["observed"]
    text = report_text(heads_file(loaded, [back(1)] * 4, tmp_path), tmp_path)
    assert "beyond each head's distance rank; that is as far as this measure goes" in text
