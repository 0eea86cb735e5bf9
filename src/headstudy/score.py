"""Stage `score`: accuracy of one trained model at the answer positions of a generated task's
test split, and the share of each head's attention on each clue, written as DVC metrics.

The model must be the one its config asks for, with the weights its training recorded, trained on
the task now prepared (formats/trained.py checks all three); the answer key comes
from the same prepared folder (formats/queries.py).
metrics/NAME.json holds numbers only, for `dvc metrics show`; metrics/attention/NAME.json holds
the head-by-clue shares of every layer."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.analysis.measures.clues import FOCUS, score_queries
from headstudy.common.files import write_json
from headstudy.execution import guards, jobs
from headstudy.formats.prepared import load_tokens, prepared_vocab_size
from headstudy.formats.queries import load_queries, load_task
from headstudy.formats.trained import load_trained


def score(config: DictConfig) -> dict:
    guards.refuse_pipeline_outputs(config, "metrics")
    torch.set_num_threads(jobs.torch_threads(config.threads))
    model, run = load_trained(config)
    prepared = Path(config.paths.prepared)
    task = load_task(prepared)
    test = load_tokens(prepared, "test")
    key = load_queries(prepared, test, prepared_vocab_size(prepared))
    scored = score_queries(model, test, key, config.data.batch_size)
    metrics = {key: run[key] for key in ("heads", "seed", "params")}
    metrics.update(
        clues=task["clues"],
        accuracy=scored["accuracy"],
        answer_nll=scored["answer_nll"],
        queries=scored["queries"],
        chance=task["chance"],
        one_clue_best=task["one_clue_best"],
        clues_focused=scored["layers"][0]["focused"],
    )
    metrics_dir = Path(config.paths.metrics)
    write_json(metrics_dir / f"{run['name']}.json", metrics)
    write_json(
        metrics_dir / "attention" / f"{run['name']}.json",
        {
            "name": run["name"],
            "variant": run["variant"],
            "heads": run["heads"],
            "seed": run["seed"],
            "clues": task["clues"],
            "focus": FOCUS,
            "layers": scored["layers"],
        },
    )
    print(
        f"score: {run['name']}: accuracy {metrics['accuracy']:.3f} at {metrics['queries']} answers (chance "
        f"{task['chance']:.3f}, one clue at best {task['one_clue_best']:.3f}); clues read by a head of their "
        f"own per answer: {metrics['clues_focused']:.2f} of {task['clues']}"
    )
    return metrics


def main(config: DictConfig) -> None:
    score(config)
