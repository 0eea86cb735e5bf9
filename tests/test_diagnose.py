"""The cliff diagnosis (stage `diagnose`, studies/lr-cliff): the attention measures on scores with
a known answer, a training watched without clipping that ends in the train stage's weights bit
for bit, a clipped one that does not and records the norms before clipping, and the study's
configs, whose training settings are the train stage's."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, headstudy_here

from headstudy.common.errors import ConfigError
from headstudy.configure import resolve
from headstudy.formats.runconfig import training_section
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.diagnostics import attention_scores, attention_statistics, probe_attention
from headstudy.weights.model import Decoder

TINY_RUN = [
    "model=tiny",
    "variant=1",
    "seed=0",
    "threads=1",
    "trainer.max_steps=30",
    "trainer.val_every_steps=10",
    "diagnose.probe_every=10",
    "diagnose.probe_windows=4",
]
# Far below the tiny model's gradient norms, so that it clips at every step.
CLIP = 0.05


def test_entropy_and_largest_logit_of_hand_made_scores():
    """Two heads over three positions. Head 0 scores every key alike: uniform attention over the
    t keys a query may see, entropy ln t, mean over the queries (0 + ln 2 + ln 3) / 3. Head 1
    puts 50 on one key of each query: all weight there, entropy ~0. A large score on a future key
    (masked) counts for neither."""
    scores = torch.zeros(1, 2, 3, 3)
    scores[0, 1] = torch.tensor([[50.0, 99.0, 99.0], [0.0, 50.0, 99.0], [50.0, 0.0, 0.0]])
    scores[0, 0, 0, 2] = 1000.0  # a future key
    entropy, largest = attention_statistics(scores)
    assert entropy[0] == pytest.approx((0 + math.log(2) + math.log(3)) / 3, abs=1e-6)
    assert entropy[1] == pytest.approx(0.0, abs=1e-6)
    assert largest == [0.0, 50.0]


def test_the_probe_scores_are_those_the_models_attention_softmaxes():
    """softmax of attention_scores, the future masked, equals the weights of the model's own
    explicit attention path; the probe restores the mode and leaves no hook or capture behind."""
    config = compose_config(["model=tiny", "model.n_heads=2", "variant=2"])
    torch.manual_seed(0)
    model = Decoder(model_config(config))
    tokens = torch.randint(0, config.model.vocab_size, (3, config.model.context))
    layer = model.attention_layers[0]
    inputs = {}
    hook = layer.register_forward_pre_hook(lambda _layer, args: inputs.__setitem__("x", args[0]))
    layer.capture_weights = True
    with torch.no_grad():
        model(tokens)
    hook.remove()
    layer.capture_weights = False
    scores = attention_scores(layer, inputs["x"])
    causal = torch.ones(scores.shape[-1], scores.shape[-1], dtype=torch.bool).tril()
    weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    torch.testing.assert_close(weights, layer.captured_weights, rtol=0, atol=1e-6)

    model.train()
    measured = probe_attention(model, tokens)
    assert sorted(measured) == ["entropy_l0_h0", "entropy_l0_h1", "max_logit_l0_h0", "max_logit_l0_h1"]
    assert model.training and not layer._forward_pre_hooks


def test_the_probe_takes_the_first_windows_and_refuses_more_than_the_split_holds():
    from headstudy.diagnose import probe_batch

    tokens = torch.arange(3 * 8 + 5).numpy()  # 3 full windows of 8 targets, and a tail
    assert probe_batch(tokens, 8, 2).tolist() == [list(range(8)), list(range(8, 16))]
    assert probe_batch(tokens, 8, 3).shape == (3, 8)
    with pytest.raises(ConfigError, match=r"diagnose.probe_windows=4: the validation split holds 3 full windows"):
        probe_batch(tokens, 8, 4)


def run(folder: Path, command: str, corpus: list[str], *extra: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    result = headstudy_here(folder, command, *TINY_RUN, *corpus, *extra)
    assert result.returncode == 0, result.stderr[-3000:]


def diagnostics(folder: Path) -> tuple[dict, list[dict]]:
    [record] = (folder / "metrics" / "diagnostics").glob("*.json")
    with open(record.with_suffix(".csv")) as lines:
        rows = list(csv.DictReader(lines))
    return json.loads(record.read_text()), rows


@pytest.fixture(scope="module")
def three_trainings(small_corpus, tmp_path_factory) -> dict[str, Path]:
    """The same tiny config trained by `headstudy train`, by `headstudy diagnose`, and by
    `headstudy diagnose` with clipping, each in a folder of its own."""
    base = tmp_path_factory.mktemp("diagnose")
    folders = {name: base / name for name in ("train", "plain", "clipped")}
    run(folders["train"], "train", small_corpus)
    run(folders["plain"], "diagnose", small_corpus)
    run(folders["clipped"], "diagnose", small_corpus, f"diagnose.clip_grad_norm={CLIP}")
    return folders


@pytest.mark.slow
def test_diagnose_without_clipping_trains_the_train_stages_weights_bit_for_bit(three_trainings):
    trained = json.loads((three_trainings["train"] / "models" / "h1-s0" / "run.json").read_text())
    record, rows = diagnostics(three_trainings["plain"])
    assert record["weights_sha256"] == trained["weights_sha256"]
    curve = (three_trainings["train"] / "metrics" / "curves" / "h1-s0.csv").read_text().splitlines()[1:]
    assert [[int(line.split(",")[0]), float(line.split(",")[2])] for line in curve] == record["validation_curve"]
    # A row per step, 0 (the initial model's probe) to 30; the attention at 0, 10, 20 and 30.
    assert [int(row["step"]) for row in rows] == list(range(31))
    assert all(row["loss"] and row["grad_norm"] and row["lr"] for row in rows[1:])
    probed = [int(row["step"]) for row in rows if row["entropy_l0_h0"]]
    assert probed == [0, 10, 20, 30] and all(rows[step]["max_logit_l0_h0"] for step in probed)


@pytest.mark.slow
def test_clipping_changes_the_weights_and_the_recorded_norms_are_from_before_clipping(three_trainings):
    plain, plain_rows = diagnostics(three_trainings["plain"])
    clipped, clipped_rows = diagnostics(three_trainings["clipped"])
    assert clipped["clip_grad_norm"] == CLIP and plain["clip_grad_norm"] is None
    assert clipped["weights_sha256"] != plain["weights_sha256"]
    # The first update starts from the same weights and batch in both: the same gradient, whose
    # norm the clipped run records before it scales the gradient down to CLIP.
    first_norm = float(plain_rows[1]["grad_norm"])
    assert float(clipped_rows[1]["grad_norm"]) == first_norm > CLIP
    assert all(float(row["grad_norm"]) > CLIP for row in clipped_rows[1:])


def test_the_lr_cliff_studys_runs_train_as_the_train_stage_and_differ_only_in_their_arm(monkeypatch):
    monkeypatch.chdir(ROOT / "studies" / "lr-cliff")
    params = yaml.safe_load(Path("params.yaml").read_text())
    files = resolve(params)
    runs = sorted(name for name in files if name.startswith("diagnose/"))
    assert runs == [f"diagnose/h1-lr{lr}-s0-{arm}.yaml" for lr in ("0.006", "0.012") for arm in ("clip1", "plain")]
    for name in runs:
        model = name.removeprefix("diagnose/").rsplit("-", 1)[0]
        assert training_section(files[name]) == training_section(files[f"train/{model}.yaml"])
        assert files[name].diagnose.clip_grad_norm == (1.0 if name.endswith("clip1.yaml") else None)
    assert [run["name"] for run in files["report.yaml"].runs] == [
        f"h1-lr{lr}-s0-{arm}" for lr in ("0.006", "0.012") for arm in ("plain", "clip1")
    ]
    params["study"]["arm_overrides"] = {"clip1": ["optimizer.lr=0.1"]}
    with pytest.raises(ConfigError, match="never changes the rest of the training"):
        resolve(params)
    params["study"]["arm_overrides"] = {"clip1": ["model.qk_norm=true"]}  # a stabiliser: the one change
    stabilised = resolve(params)["diagnose/h1-lr0.012-s0-clip1.yaml"]
    assert stabilised.model.qk_norm is True and stabilised.optimizer == files["train/h1-lr0.012-s0.yaml"].optimizer


def test_a_study_without_arms_writes_no_diagnose_file_and_the_same_report_config(monkeypatch):
    monkeypatch.chdir(ROOT / "studies" / "lr-tuning")
    files = resolve(yaml.safe_load(Path("params.yaml").read_text()))
    assert not [name for name in files if name.startswith("diagnose/")] and "runs" not in files["report.yaml"]
