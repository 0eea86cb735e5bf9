import subprocess

import pytest
import torch

from headstudy.common.errors import ConfigError
from headstudy.count import count
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder, next_token_loss, weights_sha256
from headstudy.weights.settings import ModelConfig


@pytest.mark.parametrize("heads, expected", [(1, 328_704), (4, 345_216)])
def test_course_preset_matches_the_seed_parameter_counts(in_project, heads, expected):
    assert count([f"model.n_heads={heads}"])["params"] == expected


def test_four_heads_add_exactly_one_output_projection_with_bias(in_project):
    one, four = count(["model.n_heads=1"]), count(["model.n_heads=4"])
    assert four["params"] - one["params"] == 128 * 128 + 128
    assert sum(one["parts"].values()) == one["params"]


def test_mix_heads_switches_the_output_projection_explicitly(in_project):
    assert count(["model.n_heads=1", "model.mix_heads=true"])["params"] == 328_704 + 16_512
    assert count(["model.n_heads=4", "model.mix_heads=false"])["params"] == 328_704


@pytest.mark.parametrize(
    "preset", [[], ["model=tiny"], ["model.width=256", "model.mlp_hidden=1024"], ["model=tiny", "model.width=48"]]
)
def test_the_wider_mlp_control_spends_the_projections_parameters_at_any_width(in_project, preset):
    """1-wide adds hidden units until one more would cost more than 4 heads' output projection:
    the same added capacity at every preset, not the course preset's 64 units everywhere."""
    one, four, wide = (count([f"variant={variant}", *preset])["params"] for variant in ("1", "4", "1-wide"))
    width = compose_config(preset).model.width
    assert 0 <= four - wide < 2 * width + 1  # one unit more would exceed the projection
    assert wide > one
    assert "widen_mlp_by_projection" not in compose_config(["variant=1-wide", *preset]).model


def test_the_wider_mlp_control_is_576_units_wide_at_the_course_preset(in_project):
    assert compose_config(["variant=1-wide"]).model.mlp_hidden == 576
    assert count(["variant=1-wide"])["params"] == 345_152


def test_heads_that_do_not_divide_width_fail_before_any_work(in_project):
    with pytest.raises(ConfigError, match=r"model\.n_heads=3 must divide model\.width=128"):
        compose_config(["model.n_heads=3"])


def test_bad_config_exits_non_zero_with_one_line_naming_both_keys(in_project):
    result = subprocess.run(["headstudy", "count", "model.n_heads=5"], capture_output=True, text=True, cwd=in_project)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "model.n_heads=5" in lines[0] and "model.width=128" in lines[0]


def test_unknown_override_is_a_one_line_error(in_project):
    with pytest.raises(ConfigError, match="model.headz"):
        compose_config(["model.headz=4"])


def test_model_outputs_next_token_logits_for_every_position(in_project):
    model = Decoder(model_config(compose_config(["model=tiny", "model.n_heads=4"])))
    tokens = torch.randint(0, 1024, (2, 32))
    assert model(tokens).shape == (2, 32, 1024)


def test_attention_is_causal(in_project):
    model = Decoder(model_config(compose_config(["model=tiny", "model.n_heads=2"]))).eval()
    tokens = torch.randint(0, 1024, (1, 16))
    changed = tokens.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 1024
    assert torch.equal(model(tokens)[0, :10], model(changed)[0, :10])
    assert not torch.equal(model(tokens)[0, 10:], model(changed)[0, 10:])


def test_weights_hash_sees_a_single_changed_weight(in_project):
    model = Decoder(model_config(compose_config(["model=tiny"])))
    before = weights_sha256(model)
    assert weights_sha256(model) == before
    with torch.no_grad():
        model.final_norm.weight[0] += 1e-6
    assert weights_sha256(model) != before


@pytest.mark.parametrize(
    "override, key",
    [
        ("seed=abc", "seed"),
        ("optimizer.lr=-1", "optimizer.lr"),
        ("model.mix_heads=maybe", "model.mix_heads"),
        ("data.vocab_size=100", "data.vocab_size"),
        ("trainer.max_steps=0", "trainer.max_steps"),
    ],
)
def test_each_bad_value_is_named_by_its_key(in_project, override, key):
    with pytest.raises(ConfigError, match=f"^{key} must be"):
        compose_config([override])


@pytest.mark.parametrize("heads", [1, 4])
def test_fused_attention_of_training_agrees_with_the_explicit_attention_of_inspect(in_project, heads):
    torch.manual_seed(0)
    model = Decoder(model_config(compose_config([f"model.n_heads={heads}"]))).eval()
    tokens = torch.randint(0, 1024, (2, 128))
    with torch.no_grad():
        fused = model(tokens)
        for block in model.blocks:
            block.attention.capture_weights = True
        explicit = model(tokens)
    assert model.blocks[0].attention.captured_weights is not None  # the explicit path ran
    assert torch.allclose(fused, explicit, rtol=0, atol=1e-6), (fused - explicit).abs().max()


def train_a_few_steps(config: ModelConfig, steps: int = 20) -> tuple[Decoder, list[float]]:
    torch.manual_seed(0)
    model = Decoder(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    tokens = torch.randint(0, config.vocab_size, (8, config.context + 1), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        loss = next_token_loss(model(tokens[:, :-1]), tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


TINY = {"vocab_size": 300, "context": 16, "width": 32, "n_layers": 1, "mlp_hidden": 64}


@pytest.mark.parametrize("heads", [1, 4])
def test_qk_norm_trains_and_changes_the_weights_while_off_is_the_model_without_it(heads):
    plain, plain_losses = train_a_few_steps(ModelConfig(**TINY, n_heads=heads))
    off, _ = train_a_few_steps(ModelConfig(**TINY, n_heads=heads, qk_norm=False))
    normed, normed_losses = train_a_few_steps(ModelConfig(**TINY, n_heads=heads, qk_norm=True))
    assert weights_sha256(off) == weights_sha256(plain)
    assert normed_losses[-1] < normed_losses[0]
    assert {"blocks.0.attention.query_norm.weight", "blocks.0.attention.key_norm.weight"} <= set(normed.state_dict())
    plain_weights = plain.state_dict()
    shared = [name for name in plain_weights if not torch.equal(plain_weights[name], normed.state_dict()[name])]
    assert "blocks.0.attention.query_key_value.weight" in shared
    assert normed_losses != plain_losses


def test_a_model_saved_without_qk_norm_records_no_such_setting():
    assert "qk_norm" not in ModelConfig(**TINY, n_heads=4).saved()
    assert ModelConfig(**TINY, n_heads=4, qk_norm=True).saved()["qk_norm"] is True
    assert ModelConfig(**ModelConfig(**TINY, n_heads=4).saved()) == ModelConfig(**TINY, n_heads=4)


def test_qk_norm_is_set_like_any_model_key_and_checked(in_project):
    assert compose_config(["model.qk_norm=true"]).model.qk_norm is True
    assert "qk_norm" not in compose_config([]).model
    with pytest.raises(ConfigError, match=r"model\.qk_norm must be true or false, got 'yes please'"):
        compose_config(["model.qk_norm='yes please'"])
