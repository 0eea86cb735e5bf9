import math

import numpy as np
import pytest
import torch

from headstudy.core.config import compose_config, model_config
from headstudy.core.perplexity import perplexity, stream_nll
from headstudy.inspect import ablation_ppl, attention_measures, attention_scores, role, spotlight_claim, spotlight_scores
from headstudy.core.model import Decoder

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
    [scores], [layer] = attention_measures(previous_token_model(), TOKENS, batch_size=8, substantial=0.2)
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
    per_position = lambda w: {k: float(v / (length - 1)) for k, v in spotlight_scores(w, 0.2).items() if k != "positions"}
    assert per_position(same) == {"covered_positions": 1.0, "distinct_top1": 1.0}
    # At t = 1 the previous token is the first position: both heads look at one place there.
    assert per_position(different) == {"covered_positions": 7 / 4, "distinct_top1": 7 / 4}
    assert per_position(split)["covered_positions"] == 7 / 4  # 0.5 each: both above 0.2
    # 0.15 each, none above 0.2, except at t = 1 where both weights fall on one position (0.3).
    assert per_position(split * 0.3)["covered_positions"] == 1 / 4


def test_spotlight_claim_states_the_result_either_way():
    def model(variant, seed, covered):
        return {"variant": variant, "seed": seed, "layers": [{"layer": 0, "covered_positions": covered, "distinct_top1": 2.0}]}

    holds = spotlight_claim([model("1", 0, 1.0), model("1", 1, 1.1), model("4", 0, 2.0), model("4", 1, 2.2)], "1", "4", 0.2)
    assert holds[0]["holds"] and "the spotlight picture holds" in holds[0]["sentence"]
    fails = spotlight_claim([model("1", 0, 2.0), model("1", 1, 1.0), model("4", 0, 1.2), model("4", 1, 2.1)], "1", "4", 0.2)
    assert not fails[0]["holds"] and "not supported" in fails[0]["sentence"]
    assert spotlight_claim([model("1", 0, 1.0)], "1", "4", 0.2) == []
