"""Stage `inspect`: what each attention head follows, what it is worth, and whether several
heads look at more places than one.

On the whole test split, for every layer and head: where its attention goes (previous token,
itself, the first position), how far and how thinly it spreads, and how much test perplexity
rises when its output is zeroed. Per layer, the spotlight measures: how many distinct positions
get substantial weight from at least one head, and how many distinct top-1 targets the heads
pick. The weights come from the model's own forward pass (capture switched on), so there is no
second copy of the attention maths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer

from headstudy.analysis import figures
from headstudy.analysis.perplexity import perplexity, stream_nll
from headstudy.analysis.statistics import mean_ci95, nan_to_null
from headstudy.bookkeeping import guards, jobs
from headstudy.formats.errors import ConfigError
from headstudy.formats.files import write_json
from headstudy.formats.prepared import TOKENIZER_FILE, load_tokens
from headstudy.formats.trained import load_trained
from headstudy.weights.batches import stream_batches
from headstudy.weights.model import Decoder

SCORES = ("previous_token", "self", "first_position", "distance", "entropy", "uniform_entropy")
SPOTLIGHT = ("covered_positions", "distinct_top1")


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
    return {"covered_positions": covered.sum().float(), "distinct_top1": distinct.sum().float(),
            "positions": torch.tensor(float(rows.shape[0] * rows.shape[2]))}


@torch.no_grad()
def attention_measures(model: Decoder, tokens: np.ndarray, batch_size: int, substantial: float) -> tuple[list[dict], list[dict]]:
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
            for heads_total, layer_total, layer in zip(head_totals, layer_totals, layers):
                for total, scores in ((heads_total, attention_scores(layer.captured_weights)),
                                      (layer_total, spotlight_scores(layer.captured_weights, substantial))):
                    for key, value in scores.items():
                        total[key] = total.get(key, 0) + value
    head_rows, layer_rows = [], []
    for layer_index, (heads_total, layer_total) in enumerate(zip(head_totals, layer_totals)):
        positions = heads_total.pop("positions")
        for head in range(model.config.n_heads):
            head_rows.append({"layer": layer_index, "head": head,
                              **{key: float(value[head] / positions) for key, value in heads_total.items()}})
        positions = layer_total.pop("positions")
        layer_rows.append({"layer": layer_index, **{key: float(value / positions) for key, value in layer_total.items()}})
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


def summarise(per_model: list[dict], key: str, group_by: tuple[str, ...], measures: tuple[str, ...]) -> list[dict]:
    """Mean and sd over the study's seeds, per group (e.g. variant, layer, head)."""
    groups: dict[tuple, list[dict]] = {}
    for model in per_model:
        for row in model[key]:
            row = {**row, "variant": model["variant"], "heads": model["heads"], "seed": model["seed"]}
            groups.setdefault(tuple(row[g] for g in group_by), []).append(row)
    return [{**dict(zip(group_by, group)), "heads": rows[0]["heads"], "seeds": [r["seed"] for r in rows],
             **{m: mean_sd([r[m] for r in rows]) for m in measures}}
            for group, rows in groups.items()]


def spotlight_claim(per_model: list[dict], single: str, multi: str, substantial: float) -> list[dict]:
    """Per layer: do the multi-head model's heads together give substantial weight to more
    distinct positions than the single head does? Paired over seeds, 95% CI."""
    by_key = {(m["variant"], m["seed"], row["layer"]): row for m in per_model for row in m["layers"]}
    claims = []
    for layer in sorted({layer for _, _, layer in by_key}):
        seeds = sorted(s for v, s, l in by_key if v == single and l == layer and (multi, s, l) in by_key)
        if not seeds:
            continue
        one = [by_key[(single, s, layer)]["covered_positions"] for s in seeds]
        many = [by_key[(multi, s, layer)]["covered_positions"] for s in seeds]
        top1 = mean_sd([by_key[(multi, s, layer)]["distinct_top1"] for s in seeds])
        diff, low, high = mean_ci95(np.array(many) - np.array(one))
        holds = bool(low > 0)
        unclear = not (low > 0 or high < 0)
        spread = mean_sd(one), mean_sd(many)
        sentence = (
            f"Layer {layer}: per query position, the {multi} heads together give more than {substantial:g} of their "
            f"weight to {spread[1]['mean']:.2f} ± {spread[1]['sd']:.2f} distinct positions, the single head to "
            f"{spread[0]['mean']:.2f} ± {spread[0]['sd']:.2f} (mean ± sd over seeds {', '.join(map(str, seeds))}; "
            f"paired difference {diff:+.2f}" + ("" if len(seeds) < 2 else f", 95% CI [{low:+.2f}, {high:+.2f}]")
            + f"); the {multi} heads put their largest "
            f"weight on {top1['mean']:.2f} ± {top1['sd']:.2f} distinct positions. "
            + ("With one seed there is no interval, so no conclusion is drawn." if len(seeds) < 2 else
               "So several heads do look at more places at once than one head: the spotlight picture holds here."
               if holds else "So the heads together do not clearly look at more places than one head: the spotlight "
               "picture is not supported here." if unclear else
               "So the heads together look at fewer places than one head: the spotlight picture does not hold here.")
        )
        claims.append({"layer": layer, "single": single, "multi": multi, "seeds": seeds,
                       "covered_single": spread[0], "covered_multi": spread[1], "distinct_top1_multi": top1,
                       "diff": diff, "diff_ci95": [low, high], "holds": holds, "sentence": sentence})
    return claims


def sentence_ids(tokenizer: Tokenizer, sentence: str, test_tokens: np.ndarray) -> list[int]:
    if sentence not in tokenizer.decode(np.asarray(test_tokens).tolist()):
        raise ConfigError(f"inspect.sentence={sentence!r} does not occur in the test split")
    # Inside the stream every word follows a space: encode it the way the model saw it there.
    return tokenizer.encode(" " + sentence.strip()).ids


@torch.no_grad()
def sentence_maps(model: Decoder, ids: list[int]) -> list[np.ndarray]:
    """(heads, T, T) attention of every layer on one sentence."""
    with capturing(model) as layers:
        model(torch.tensor([ids[: model.config.context]]))
        return [layer.captured_weights[0].numpy() for layer in layers]


def inspect(config: DictConfig) -> dict:
    torch.set_num_threads(jobs.torch_threads(config.threads))
    settings = config.inspect
    prepared = Path(config.paths.prepared)
    test = load_tokens(prepared, "test")
    tokenizer = Tokenizer.from_file(str(prepared / TOKENIZER_FILE))
    ids = sentence_ids(tokenizer, settings.sentence, test)
    labels = [tokenizer.decode([i]).strip() or repr(tokenizer.decode([i])) for i in ids]
    figure_dir = Path(config.paths.reports) / "figures" / "heads"
    per_model, map_figures, drawn = [], [], set()
    for name, training in config.models.items():
        variant, seed = str(training.variant), training.seed
        # Refused unless it is the model these settings ask for, trained on this data.
        model, _ = load_trained(OmegaConf.merge(training, {"name": name, "paths": config.paths}))
        intact = perplexity(*stream_nll(model, test, settings.batch_size))
        heads, layers = attention_measures(model, test, settings.batch_size, settings.substantial_weight)
        for row in heads:
            row["ablation_delta_ppl"] = ablation_ppl(model, test, settings.batch_size, row["layer"], row["head"]) - intact
        per_model.append({"variant": variant, "heads": model.config.n_heads, "seed": seed, "test_ppl": intact,
                          "head_scores": heads, "layers": layers})
        print(f"inspect: {name}: " + ", ".join(
            f"L{r['layer']}: {r['covered_positions']:.2f} positions covered" for r in layers))
        if variant not in drawn:  # the first seed's maps
            drawn.add(variant)
            for layer, weights in enumerate(sentence_maps(model, ids)):
                map_figures.append(str(figures.attention_maps(
                    weights, labels, f"Attention of variant {variant} (seed {seed}), layer {layer}",
                    figure_dir / f"attention_h{variant}_layer{layer}.png")))
    head_rows = summarise(per_model, "head_scores", ("variant", "layer", "head"), (*SCORES, "ablation_delta_ppl"))
    for row in head_rows:
        row["role"] = role(row, settings.roles)
    layer_rows = summarise(per_model, "layers", ("variant", "layer"), SPOTLIGHT)
    return {
        "sentence": settings.sentence,
        "substantial_weight": settings.substantial_weight,
        "roles": {name: dict(rule) for name, rule in settings.roles.items()},
        "rows": head_rows,
        "layers": layer_rows,
        "claims": spotlight_claim(per_model, str(settings.spotlight.single), str(settings.spotlight.multi),
                                  settings.substantial_weight),
        "models": per_model,
        "figures": {"attention_maps": map_figures},
    }


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    result = inspect(config)
    head_scores = figures.head_scores(result["rows"], Path(config.paths.reports) / "figures" / "heads" / "head_scores.png")
    result["figures"]["head_scores"] = str(head_scores)
    write_json(Path(config.paths.reports) / "heads.json", nan_to_null(result))
    for claim in result["claims"]:
        print(claim["sentence"])
