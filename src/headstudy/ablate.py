"""Stage `ablate`: the causal check of "one head per clue" for one trained one-layer model of a
generated task: each head zeroed in turn, and how far each clue's digit of the answer falls.

The model and the answer key are read and checked as the score stage reads them (formats/trained.py,
formats/queries.py). metrics/ablation/NAME.json holds the per-digit and whole-answer accuracy with
no head zeroed and with each head zeroed, each clue's reader and the number of clues with a
reader of their own (analysis/measures/ablation.py defines both)."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.analysis.measures.ablation import ablate_heads
from headstudy.common.files import write_json
from headstudy.execution import guards, jobs
from headstudy.formats.prepared import load_tokens, prepared_vocab_size
from headstudy.formats.queries import load_queries, load_task
from headstudy.formats.trained import load_trained


def ablate(config: DictConfig) -> dict:
    guards.refuse_pipeline_outputs(config, "metrics")
    torch.set_num_threads(jobs.torch_threads(config.threads))
    model, run = load_trained(config)
    prepared = Path(config.paths.prepared)
    task = load_task(prepared)
    test = load_tokens(prepared, "test")
    key = load_queries(prepared, test, prepared_vocab_size(prepared))
    measured = ablate_heads(model, test, key, task, config.data.batch_size)
    result = {key: run[key] for key in ("name", "variant", "heads", "seed")}
    result.update(measured)
    write_json(Path(config.paths.metrics) / "ablation" / f"{run['name']}.json", result)
    digits = ", ".join(f"{accuracy:.2f}" for accuracy in result["digit_accuracy"])
    readers = ", ".join(f"{reader['head']} (-{reader['drop']:.2f})" for reader in result["reader"])
    print(
        f"ablate: {run['name']}: digit accuracy {digits} (chance {result['chance_digit']:.2f}) at "
        f"{result['queries']} answers; top reader per clue, head (drop): {readers}; clues with a reader "
        f"of their own: {result['own_readers']} of {result['clues']}"
    )
    return result


def main(config: DictConfig) -> None:
    ablate(config)
