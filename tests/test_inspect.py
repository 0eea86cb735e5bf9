import itertools
import math

import numpy as np
import pytest
import torch
from fixed_attention import FixedAttention, random_attention, union_coverage, with_coverage

from headstudy.analysis.measures.attention import (
    ablation_ppl,
    attention_measures,
    attention_scores,
    over_seeds,
    rank_heads,
    role,
    spotlight_null,
    spotlight_scores,
    subset_sums,
)
from headstudy.analysis.measures.perplexity import perplexity, stream_nll
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder

TOKENS = np.random.default_rng(0).integers(0, 1024, 2000).astype(np.uint16)


def tiny_model(heads: int) -> Decoder:
    torch.manual_seed(0)
    return Decoder(model_config(compose_config(["model=tiny", f"model.n_heads={heads}"]))).eval()


def previous_token_model() -> Decoder:
    """Positions are one-hot (width = context) and the query of position t is the key of t-1."""
    model = tiny_model(1)
    width = model.config.width
    with torch.no_grad():
        model.token_embedding.weight.zero_()
        model.position_embedding.weight.copy_(torch.eye(width))
        shift = torch.diag(torch.ones(width - 1), diagonal=1)  # (shift @ e_t) = e_(t-1)
        model.blocks[0].attention.query_key_value.weight.copy_(
            torch.cat([10 * shift, torch.eye(width), torch.eye(width)])
        )
    return model


def test_model_forced_to_attend_to_the_previous_token_scores_it():
    [scores], [layer], _ = attention_measures(previous_token_model(), TOKENS, batch_size=8, substantial=0.2)
    assert scores["previous_token"] > 0.99
    assert scores["self"] < 0.01
    # Only at t = 1 is the previous token also the first position: 1 query position in 31.
    assert scores["first_position"] == pytest.approx(1 / 31, rel=0.05)
    assert scores["distance"] == pytest.approx(1.0, abs=0.02)
    assert scores["entropy"] < 0.1
    assert layer["covered_positions"] == pytest.approx(1.0) and layer["distinct_top1"] == pytest.approx(1.0)


def test_hand_built_patterns_give_their_scores():
    length = 5
    previous = torch.zeros(1, 1, length, length)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, length), torch.arange(length - 1)] = 1
    parked = torch.zeros(1, 1, length, length)
    parked[0, 0, :, 0] = 1
    for weights, expected in ((previous, "previous_token"), (parked, "first_position")):
        scores = attention_scores(weights)
        per_position = {k: float(v[0] / scores["positions"]) for k, v in scores.items() if k != "positions"}
        assert per_position[expected] == 1.0
        assert per_position["self"] == 0.0
        assert per_position["entropy"] == 0.0
    parked_distance = float(attention_scores(parked)["distance"][0]) / (length - 1)
    assert parked_distance == pytest.approx(sum(range(1, length)) / (length - 1))


def test_entropy_of_uniform_attention_is_log_of_visible_positions():
    length = 6
    uniform = torch.ones(length, length).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, 3, length, length)
    scores = attention_scores(uniform)
    expected = 2 * sum(math.log(t + 1) for t in range(1, length))
    assert torch.allclose(scores["entropy"], torch.full((3,), expected, dtype=torch.float32))
    assert torch.allclose(scores["uniform_entropy"], torch.full((3,), expected, dtype=torch.float32))


def test_ablating_a_head_with_zero_value_weights_leaves_perplexity_exactly_unchanged():
    model = tiny_model(2)
    width, head_width = model.config.width, model.config.width // 2
    with torch.no_grad():
        model.blocks[0].attention.query_key_value.weight[2 * width : 2 * width + head_width].zero_()
    intact = perplexity(*stream_nll(model, TOKENS, batch_size=8))
    assert ablation_ppl(model, TOKENS, batch_size=8, layer=0, head=0) == intact
    assert ablation_ppl(model, TOKENS, batch_size=8, layer=0, head=1) != intact
    assert model.blocks[0].attention.head_mask is None


def test_capture_is_off_unless_asked():
    model = tiny_model(2)
    model(torch.from_numpy(TOKENS[:32].astype(np.int64))[None])
    assert model.blocks[0].attention.captured_weights is None
    attention_measures(model, TOKENS[:100], batch_size=2, substantial=0.2)
    assert model.blocks[0].attention.capture_weights is False


def test_heads_are_named_only_when_a_score_passes_its_threshold():
    roles = compose_config([]).inspect.roles
    row = {"previous_token": {"mean": 0.7}, "first_position": {"mean": 0.1}, "self": {"mean": 0.1}}
    assert role(row, roles) == "previous-token"
    row["previous_token"]["mean"] = 0.4
    assert role(row, roles) == "mixed"


def test_heads_looking_at_different_places_cover_more_positions_than_one():
    length = 5
    t = torch.arange(1, length)
    previous = torch.zeros(length, length)
    previous[0, 0] = 1
    previous[t, t - 1] = 1
    parked = torch.zeros(length, length)
    parked[:, 0] = 1
    same = torch.stack([previous, previous])[None]  # (1, 2, T, T): two heads, one target
    different = torch.stack([previous, parked])[None]
    split = torch.stack([0.5 * previous + 0.5 * parked])[None]  # one head, weight halved

    def per_position(weights):
        return {k: float(v / (length - 1)) for k, v in spotlight_scores(weights, 0.2).items() if k != "positions"}

    assert per_position(same) == {"covered_positions": 1.0, "distinct_top1": 1.0}
    # At t = 1 the previous token is the first position: both heads look at one place there.
    assert per_position(different) == {"covered_positions": 7 / 4, "distinct_top1": 7 / 4}
    assert per_position(split)["covered_positions"] == 7 / 4  # 0.5 each: both above 0.2
    # 0.15 each, none above 0.2, except at t = 1 where both weights fall on one position (0.3).
    assert per_position(split * 0.3)["covered_positions"] == 1 / 4


def test_heads_are_ranked_by_mean_distance_within_each_layer():
    heads = [{"layer": 0, "head": h, "distance": d} for h, d in enumerate([9.0, 2.0, 30.0, 5.0])]
    assert [(row["head"], row["rank"]) for row in rank_heads(heads)] == [(1, 0), (3, 1), (0, 2), (2, 3)]


def test_seeds_are_averaged_by_rank_not_by_head_number():
    # The local head is head 0 in seed 0 and head 1 in seed 1: by number they would average to 5 and 5.
    models = [
        {
            "variant": "2",
            "heads": 2,
            "seed": seed,
            "head_scores": rank_heads([{"layer": 0, "head": h, "distance": d} for h, d in enumerate(distances)]),
        }
        for seed, distances in ((0, [1.0, 9.0]), (1, [9.0, 1.0]))
    ]
    rows = over_seeds(models, "head_scores", ("variant", "layer", "rank"), ("distance",))
    assert [(row["rank"], row["distance"]["mean"], row["head_by_seed"]) for row in rows] == [
        (0, 1.0, [0, 1]),
        (1, 9.0, [1, 0]),
    ]


def previous(length: int) -> torch.Tensor:
    weights = torch.zeros(length, length)
    weights[0, 0] = 1
    weights[torch.arange(1, length), torch.arange(length - 1)] = 1
    return weights


def two_back(length: int) -> torch.Tensor:
    """All weight two tokens back (at t = 1, where there is none, on the first position)."""
    weights = torch.zeros(length, length)
    weights[:2, 0] = 1
    weights[torch.arange(2, length), torch.arange(length - 2)] = 1
    return weights


def parked(length: int) -> torch.Tensor:
    weights = torch.zeros(length, length)
    weights[:, 0] = 1
    return weights


WINDOWS = TOKENS[: 4 * 32 + 1]  # four whole windows of 32 tokens: 31 query positions each


def test_the_union_of_two_models_counts_a_position_once():
    models = [FixedAttention(previous), FixedAttention(parked)]
    coverage = union_coverage(models, [(0,), (1,), (0, 1)], WINDOWS, batch_size=3, thresholds=(0.2, 0.5))
    # Alone, one position each; together two, except at t = 1 where the previous token is the first.
    assert coverage[:, 0, 0] == pytest.approx([1.0, 1.0, (1 + 2 * 30) / 31])
    assert coverage[:, 0, 1] == pytest.approx(coverage[:, 0, 0])  # weight 1 passes either threshold
    assert models[0].attention_layers[0].capture_weights is False


def test_a_multi_head_model_exceeds_the_null_only_when_it_covers_more_than_independent_heads():
    def study(*multi_patterns, singles):
        models = [{"variant": "2", "heads": 2, "seed": 0, "model": FixedAttention(*multi_patterns)}] + [
            {"variant": "1", "heads": 1, "seed": seed, "model": FixedAttention(pattern)}
            for seed, pattern in enumerate(singles)
        ]
        return with_coverage(models, WINDOWS, 4, (0.2,))

    # Two heads that are just two unrelated single heads: inside the null, so no spotlight claim.
    same = spotlight_null(study(previous, parked, singles=[previous, parked]), "2", (0.2,))
    assert same["rows"][0]["multi_covered"] == pytest.approx(same["rows"][0]["null_covered"])
    assert same["rows"][0]["position"] == "within" and same["complete"] and same["null_unions"] == 1
    # Independent single heads that all learned the same thing: the two heads cover more.
    beyond = spotlight_null(study(previous, two_back, singles=[previous, previous, previous]), "2", (0.2,))
    assert beyond["null_unions"] == 3 and beyond["rows"][0]["null_covered"] == pytest.approx([1.0] * 3)
    assert beyond["rows"][0]["position"] == "above"
    # One single head cannot stand for two: the null is incomplete and cannot show "above".
    short = spotlight_null(study(previous, two_back, singles=[previous]), "2", (0.2,))
    assert not short["complete"] and short["rows"][0]["position"] == "undetermined"


def test_subset_sums_add_the_counts_of_every_pattern_inside_each_pattern():
    counts = np.random.default_rng(2).integers(0, 50, 1 << 4)
    expected = [sum(counts[inner] for inner in range(16) if inner & outer == inner) for outer in range(16)]
    assert subset_sums(counts).tolist() == expected


def test_the_single_head_null_counts_every_union_as_checking_each_union_cell_by_cell_does():
    multi = {"variant": "2", "heads": 2, "seed": 0, "model": FixedAttention(random_attention(0), random_attention(1))}
    singles = [
        {"variant": "1", "heads": 1, "seed": seed, "model": FixedAttention(random_attention(10 + seed))}
        for seed in range(5)
    ]
    thresholds = (0.1, 0.3, 0.5)
    null = spotlight_null(with_coverage([multi, *singles], WINDOWS, 3, thresholds), "2", thresholds)
    unions = list(itertools.combinations(range(1, 6), 2))
    reference = union_coverage(
        [m["model"] for m in [multi, *singles]], [(i,) for i in range(6)] + unions, WINDOWS, 3, thresholds
    )
    assert null["null_unions"] == len(unions) == 10
    for column, row in enumerate(null["rows"]):
        assert row["multi_covered"] == reference[:1, 0, column].tolist()
        assert row["single_covered"] == reference[1:6, 0, column].tolist()
        assert row["null_covered"] == reference[6:, 0, column].tolist()  # exactly: both count whole cells
    assert len({tuple(row["null_covered"]) for row in null["rows"]}) == 3  # the thresholds cut differently
