"""Stage `inspect`: what each attention head follows, and what it is worth.

On the whole test split, per head: where its attention goes (previous token, itself, the first
position), how far and how thinly it spreads, and how much test perplexity rises when its
output is zeroed. The weights come from the model's own forward pass (capture switched on),
so there is no second copy of the attention maths.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import DictConfig
from tokenizers import Tokenizer

from headstudy.reporting import figures
from headstudy.core.config import ConfigError, compose_config
from headstudy.core.data import TOKENIZER_FILE, load_tokens, stream_batches
from headstudy.core.perplexity import perplexity, stream_nll
from headstudy.core.files import write_atomically
from headstudy.core.model import Decoder
from headstudy.core.trained import load_model, read_run

REPORTS_DIR = Path("reports")
SCORES = ("previous_token", "self", "first_position", "distance", "entropy", "uniform_entropy")


class capturing:
    """Switch weight capture on for every attention layer, and off again afterwards."""

    def __init__(self, model: Decoder):
        self.layers = model.attention_layers

    def __enter__(self):
        for layer in self.layers:
            layer.capture_weights = True
        return self.layers

    def __exit__(self, *exc):
        for layer in self.layers:
            layer.capture_weights, layer.captured_weights = False, None


def attention_scores(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-head sums over query positions t >= 1 (position 0 can only attend to itself) of
    each score, and the number of positions summed: weights is (batch, heads, T, T)."""
    length = weights.shape[-1]
    t = torch.arange(1, length)
    rows = weights[:, :, 1:, :]  # (batch, heads, T-1, T): query positions 1..T-1
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


def total_variation(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums over query positions t >= 1 of (a) each head's total-variation distance from uniform
    attention over the visible positions and (b) the mean distance between pairs of heads."""
    length = weights.shape[-1]
    rows = weights[:, :, 1:, :]
    visible = torch.ones(length, length).tril()[1:]
    uniform = visible / visible.sum(-1, keepdim=True)
    to_uniform = 0.5 * (rows - uniform).abs().sum(-1).sum((0, 2))
    heads = weights.shape[1]
    pairs = [(a, b) for a in range(heads) for b in range(a + 1, heads)]
    between = sum((0.5 * (rows[:, a] - rows[:, b]).abs().sum(-1).sum() for a, b in pairs), torch.tensor(0.0))
    return to_uniform, between / max(len(pairs), 1)


@torch.no_grad()
def head_scores(model: Decoder, tokens: np.ndarray, batch_size: int) -> list[dict]:
    """Mean scores per (layer, head) over every query position t >= 1 of the stream."""
    model.eval()
    totals: list[dict[str, torch.Tensor]] = [{} for _ in model.attention_layers]
    with capturing(model) as layers:
        for inputs, _ in stream_batches(tokens, model.config.context, batch_size):
            if inputs.shape[1] < 2:
                continue
            model(inputs)
            for total, layer in zip(totals, layers):
                weights = layer.captured_weights
                scores = attention_scores(weights)
                scores["tv_to_uniform"], scores["tv_between_heads"] = total_variation(weights)
                for key, value in scores.items():
                    total[key] = total.get(key, 0) + value
    rows = []
    for layer_index, total in enumerate(totals):
        positions = total.pop("positions")
        for head in range(model.config.n_heads):
            row = {"layer": layer_index, "head": head}
            for key, value in total.items():
                value = value / positions
                row[key] = float(value if value.dim() == 0 else value[head])
            rows.append(row)
    return rows


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


def summarise(per_model: list[dict], roles: DictConfig) -> list[dict]:
    """One row per (head count, layer, head): mean, sd and seeds over the study's seeds."""
    groups: dict[tuple, list[dict]] = {}
    for model in per_model:
        for row in model["head_scores"]:
            groups.setdefault((model["heads"], row["layer"], row["head"]), []).append({**row, "seed": model["seed"]})
    summary = []
    for (heads, layer, head), rows in sorted(groups.items()):
        entry = {"heads": heads, "layer": layer, "head": head, "seeds": [r["seed"] for r in rows]}
        for key in (*SCORES, "tv_to_uniform", "ablation_delta_ppl"):
            values = np.array([r[key] for r in rows])
            entry[key] = {"mean": float(values.mean()),
                          "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
        entry["role"] = role(entry, roles)
        summary.append(entry)
    return summary


def spotlight_claim(per_model: list[dict], heads_a: int, heads_b: int) -> dict | None:
    """The seed's claim: do the B-head model's heads differ from each other more than the
    single head of the A-head model differs from uniform attention? Total variation, 0 to 1."""
    single = [m["head_scores"][0]["tv_to_uniform"] for m in per_model if m["heads"] == heads_a]
    between = [m["head_scores"][0]["tv_between_heads"] for m in per_model if m["heads"] == heads_b]
    if heads_a != 1 or not single or not between:
        return None
    a, b = float(np.mean(single)), float(np.mean(between))
    holds = b > a
    sentence = (
        f"The {heads_b} heads differ from each other by a mean total-variation distance of {b:.3f}, "
        f"{'more' if holds else 'less'} than the single head differs from uniform attention "
        f"({a:.3f}): {'consistent with' if holds else 'not what'} the seed's picture of several "
        f"spotlights each following its own clue{'' if holds else ' predicts'}."
    )
    return {"heads_a": heads_a, "heads_b": heads_b, "single_head_tv_to_uniform": a,
            "tv_between_heads": b, "holds": holds, "sentence": sentence}


def sentence_ids(tokenizer: Tokenizer, sentence: str, test_tokens: np.ndarray) -> list[int]:
    if sentence not in tokenizer.decode(np.asarray(test_tokens).tolist()):
        raise ConfigError(f"inspect.sentence={sentence!r} does not occur in the test split")
    # Inside the stream every word follows a space: encode it the way the model saw it there.
    return tokenizer.encode(" " + sentence.strip()).ids


@torch.no_grad()
def sentence_maps(model: Decoder, ids: list[int]) -> np.ndarray:
    """(heads, T, T) attention of the first layer on one sentence."""
    with capturing(model) as layers:
        model(torch.tensor([ids[: model.config.context]]))
        return layers[0].captured_weights[0].numpy()


def inspect(config: DictConfig, study: dict, compare: list[int]) -> dict:
    torch.set_num_threads(config.threads)
    prepared = Path(config.paths.prepared)
    test = load_tokens(prepared, "test")
    tokenizer = Tokenizer.from_file(str(prepared / TOKENIZER_FILE))
    ids = sentence_ids(tokenizer, config.inspect.sentence, test)
    labels = [tokenizer.decode([i]).strip() for i in ids]
    batch_size = config.inspect.batch_size
    figure_dir = REPORTS_DIR / "figures" / "heads"
    per_model, map_figures = [], {}
    for heads in study["heads"]:
        for seed in study["seeds"]:
            directory = Path(config.paths.models) / f"h{heads}-s{seed}"
            model, run = load_model(directory), read_run(directory)
            intact = perplexity(*stream_nll(model, test, batch_size))
            rows = head_scores(model, test, batch_size)
            for row in rows:
                row["ablation_delta_ppl"] = ablation_ppl(model, test, batch_size, row["layer"], row["head"]) - intact
            per_model.append({"name": run["name"], "heads": heads, "seed": seed, "test_ppl": intact, "head_scores": rows})
            print(f"inspect: {run['name']}: " + ", ".join(
                f"head {r['head']}: prev {r['previous_token']:.2f}, ablation {r['ablation_delta_ppl']:+.1f}" for r in rows))
            if seed == study["seeds"][0]:
                map_figures[heads] = figures.attention_maps(
                    sentence_maps(model, ids), labels, f"{heads} head{'s' if heads > 1 else ''} (seed {seed})",
                    figure_dir / f"attention_h{heads}.png")
    summary = summarise(per_model, config.inspect.roles)
    figures.head_scores(summary, figure_dir / "head_scores.png")
    return {
        "sentence": config.inspect.sentence,
        "roles": {name: dict(rule) for name, rule in config.inspect.roles.items()},
        "rows": summary,
        "claim": spotlight_claim(per_model, *compare),
        "models": per_model,
        "figures": {"attention_maps": {str(h): str(p) for h, p in map_figures.items()},
                    "head_scores": str(figure_dir / "head_scores.png")},
    }


def main(overrides: list[str]) -> None:
    config = compose_config(overrides)
    params = yaml.safe_load(Path("params.yaml").read_text())
    result = inspect(config, params["study"], params["report"]["compare"])
    write_atomically(REPORTS_DIR / "heads.json", json.dumps(result, indent=2) + "\n")
    if result["claim"]:
        print(result["claim"]["sentence"])
