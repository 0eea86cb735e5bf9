"""The causal check of "one head per clue" (analysis/measures/ablation.py, `headstudy ablate`): the
per-digit accuracy and the reader measure on hand-made probabilities with a known answer, head
zeroing on a real model, and the stage by hand on a tiny model of the task."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch
from conftest import ROOT, assert_nothing_half_written
from omegaconf import DictConfig

from headstudy.analysis.measures.ablation import (
    DROP_SHARE,
    ablate_heads,
    answer_digits,
    digit_accuracy,
    digit_marginals,
    readers,
    zeroed_head,
)
from headstudy.analysis.measures.clues import score_queries
from headstudy.common.errors import ConfigError
from headstudy.formats.prepared import load_tokens
from headstudy.formats.queries import load_queries, load_task
from headstudy.formats.trained import data_record, settings_text, training_record
from headstudy.settings.compose import compose_config, model_config, stage_config
from headstudy.tasks.multiclue import Layout
from headstudy.weights.model import Decoder
from headstudy.weights.saved import write_model
from headstudy.weights.settings import ModelConfig

# k = 2 clues of 3 values: 9 answer tokens, digit chance 1/3.
CLUES, VALUES = 2, 3


def sure_of(digits: np.ndarray) -> np.ndarray:
    """Probabilities (n, 9) all on the answer token with these digits (n, 2)."""
    probabilities = np.zeros((len(digits), VALUES**CLUES))
    probabilities[np.arange(len(digits)), digits[:, 0] * VALUES + digits[:, 1]] = 1.0
    return probabilities


def test_answer_digits_are_those_of_the_answer_token_leading_with_the_first_clue():
    layout = Layout(clue_types=4, values=VALUES, noise=8, vocab_size=257)
    latest = np.array([[2, 1], [0, 2], [1, 0]])
    index = layout.answer_id(CLUES, latest) - layout.first_answer(CLUES)
    assert answer_digits(index, CLUES, VALUES).tolist() == latest.tolist()
    names = layout.tokens()
    assert [names[layout.first_answer(CLUES) + i] for i in index] == ["=21", "=02", "=10"]


def test_digit_marginals_sum_the_answer_tokens_that_share_a_digit():
    probabilities = np.zeros((1, 9))
    probabilities[0, [1 * 3 + 2, 1 * 3 + 0, 2 * 3 + 2]] = [0.5, 0.2, 0.3]  # =12, =10, =22
    [marginals] = digit_marginals(probabilities, CLUES, VALUES)
    assert marginals[0] == pytest.approx([0.0, 0.7, 0.3])  # first digit: 1 (0.5 + 0.2) or 2
    assert marginals[1] == pytest.approx([0.2, 0.0, 0.8])  # second digit: 0, or 2 (0.5 + 0.3)
    # Each digit is scored alone: the first right, the second wrong.
    assert digit_accuracy(probabilities, np.array([[1, 0]]), VALUES) == [1.0, 0.0]


def test_zeroing_the_head_that_reads_clue_0_sends_digit_0_to_chance_and_names_that_head():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, VALUES, size=(3000, CLUES))
    guessed = truth.copy()
    guessed[:, 0] = rng.integers(0, VALUES, size=len(truth))  # digit 0 guessed: its clue unread
    clean = digit_accuracy(sure_of(truth), truth, VALUES)
    without_head_0 = digit_accuracy(sure_of(guessed), truth, VALUES)
    assert clean == [1.0, 1.0]
    assert without_head_0[0] == pytest.approx(1 / VALUES, abs=0.03) and without_head_0[1] == 1.0
    # Head 1 is idle: zeroing it changes nothing.
    found, own = readers(clean, [without_head_0, clean], chance=1 / VALUES)
    assert found[0]["head"] == 0 and found[0]["drop"] == pytest.approx(2 / 3, abs=0.03) and found[0]["own"]
    assert found[1]["drop"] == 0.0 and not found[1]["own"]  # no head takes digit 1
    assert own == 1


def test_one_head_per_clue_gives_every_clue_its_own_reader_and_a_shared_head_none():
    chance = 1 / VALUES
    clean = [0.95, 0.9]
    _, own = readers(clean, [[0.35, 0.88], [0.93, 0.34]], chance)
    assert own == 2
    # One head that carries both clues takes both digits: no clue has a reader of its own.
    found, own = readers(clean, [[0.34, 0.33]], chance)
    assert [reader["head"] for reader in found] == [0, 0] and own == 0
    # A drop short of DROP_SHARE of the way to chance is no reading.
    short = clean[0] - 0.99 * DROP_SHARE * (clean[0] - chance)
    assert readers(clean, [[short, 0.9], [0.95, 0.9]], chance)[1] == 0
    # A digit the model never learned (at chance) has no reader, and no head is blamed for taking it.
    found, own = readers([0.95, chance], [[0.33, chance - 0.01], [0.95, chance]], chance)
    assert found[0]["own"] and not found[1]["own"] and own == 1


def test_zeroing_a_head_zeroes_exactly_its_output_and_leaves_the_model_as_it_was():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=50, context=8, width=16, n_heads=2, n_layers=1, mlp_hidden=32, mix_heads=False)
    model = Decoder(config).eval()
    attention = model.blocks[0].attention
    tokens = torch.randint(0, 50, (3, 8))
    inputs = attention_inputs(model, tokens)
    with torch.no_grad():
        before, heads_before = model(tokens), attention(inputs)
        with zeroed_head(attention, 1):
            heads = attention(inputs)  # without an output projection, heads sit side by side
            changed = model(tokens)
        after = model(tokens)
    assert (heads[..., 8:] == 0).all() and torch.equal(heads[..., :8], heads_before[..., :8])
    assert not torch.allclose(changed, before)
    assert attention.head_mask is None and torch.equal(after, before)
    with pytest.raises(RuntimeError), zeroed_head(attention, 0):
        raise RuntimeError("a failure inside the block")
    assert attention.head_mask is None


def attention_inputs(model: Decoder, tokens: torch.Tensor) -> torch.Tensor:
    """What the first attention layer reads: the normalised embeddings."""
    positions = torch.arange(tokens.shape[1])
    with torch.no_grad():
        return model.blocks[0].attention_norm(model.token_embedding(tokens) + model.position_embedding(positions))


# The stage, by hand, on a tiny model of the task

TASK = [
    "data=multiclue",
    "data.clues=2",
    "data.segments.train=200",
    "data.segments.valid=20",
    "data.segments.test=300",
    "data.segment_max=12",
]
MODEL = ["variant=2", "model=tiny", "model.width=16", "model.mlp_hidden=32", "model.init_std=0.1", "threads=1"]


def headstudy(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "DVC_STAGE"}
    env.update(HEADSTUDY_CONF=str(ROOT / "conf"), MLFLOW_TRACKING_URI=f"sqlite:///{cwd / 'mlflow.db'}")
    return subprocess.run(["headstudy", *args], cwd=cwd, env=env, capture_output=True, text=True)


def untrained_model_of_the_task(tmp_path, monkeypatch, command: str) -> tuple[list[str], DictConfig, Decoder]:
    """The task prepared under tmp_path and a model as the train stage writes it, without its
    Lightning training (the stages read any weights): the folder overrides, the config and the model."""
    folders = [f"paths.{name}={tmp_path / name}" for name in ("prepared", "models", "metrics", "checkpoints")]
    assert headstudy(tmp_path, "prepare", *TASK, *folders).returncode == 0
    monkeypatch.setenv("HEADSTUDY_CONF", str(ROOT / "conf"))
    monkeypatch.chdir(tmp_path)
    config = stage_config(command, compose_config([*TASK, *MODEL, *folders]))
    torch.manual_seed(0)
    model = Decoder(model_config(config)).eval()
    write_model(
        tmp_path / "models" / config.name,
        model,
        settings_text(config),
        training_record(config, model, data_record(tmp_path / "prepared")),
    )
    return folders, config, model


@pytest.mark.slow
def test_ablate_writes_each_heads_effect_on_each_digit(tmp_path, monkeypatch):
    folders, config, model = untrained_model_of_the_task(tmp_path, monkeypatch, "score")
    name, prepared = config.name, tmp_path / "prepared"
    result = headstudy(tmp_path, "ablate", *TASK, *MODEL, *folders)
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "metrics" / "ablation" / f"{name}.json").read_text())
    assert_nothing_half_written(tmp_path / "metrics")
    assert result.stdout.startswith(f"ablate: {name}: digit accuracy ")
    assert {key: written[key] for key in ("name", "variant", "heads", "seed", "clues", "values")} == {
        "name": "h2-s0",
        "variant": "2",
        "heads": 2,
        "seed": 0,
        "clues": 2,
        "values": 3,
    }
    assert written["chance_digit"] == pytest.approx(1 / 3) and written["drop_share"] == DROP_SHARE
    assert [row["head"] for row in written["ablated"]] == [0, 1]
    for row in [written, *written["ablated"]]:
        assert len(row["digit_accuracy"]) == 2 and all(0 <= a <= 1 for a in row["digit_accuracy"])
    assert [reader["clue"] for reader in written["reader"]] == [0, 1]
    assert 0 <= written["own_readers"] <= 2
    # Unablated, whole-answer accuracy is the score stage's accuracy on the same queries.
    test = load_tokens(prepared, "test")
    key = load_queries(prepared, test, config.model.vocab_size)
    scored = score_queries(model, test, key, batch_size=64)
    assert written["queries"] == scored["queries"] and written["answer_accuracy"] == scored["accuracy"]
    assert load_task(prepared)["clues"] == written["clues"]


def test_ablate_refuses_a_model_of_more_than_one_layer():
    config = ModelConfig(vocab_size=257, context=16, width=16, n_heads=2, n_layers=2, mlp_hidden=32)
    empty = {"queries": np.zeros(0, dtype=np.int64), "clue_positions": np.zeros((0, 2), dtype=np.int64)}
    with pytest.raises(ConfigError, match="model.n_layers=2"):
        ablate_heads(Decoder(config), np.zeros(10, dtype=np.int64), empty, {}, batch_size=8)


def test_ablating_every_head_in_turn_leaves_no_mask_behind():
    layout = Layout(clue_types=4, values=VALUES, noise=8, vocab_size=257)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, layout.first_noise, size=400)
    queries = np.arange(20, 400, 20)
    tokens[queries] = layout.query_id
    clue_positions = np.stack([queries - 2, queries - 1], axis=1)
    tokens[queries + 1] = layout.answer_id(CLUES, tokens[clue_positions] % VALUES)
    key = {"queries": queries, "clue_positions": clue_positions, "answers": tokens[queries + 1]}
    task = {"clues": CLUES, "values": VALUES, "first_answer": layout.first_answer(CLUES), "answer_tokens": 9}
    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=257, context=16, width=16, n_heads=2, n_layers=1, mlp_hidden=32))
    found = ablate_heads(model, tokens, key, task, batch_size=8)
    assert found["queries"] == len(queries) and [row["head"] for row in found["ablated"]] == [0, 1]
    assert model.blocks[0].attention.head_mask is None
    json.dumps(found, allow_nan=False)  # plain numbers and lists, as the stage writes them
