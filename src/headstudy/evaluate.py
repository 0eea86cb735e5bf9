"""Stage `evaluate`: perplexity of one trained model on the whole test stream, written as a
DVC metrics file and logged to the model's own MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.core import tracking
from headstudy.core.config import compose_config
from headstudy.core.data import load_stats, load_tokens
from headstudy.core.files import write_atomically
from headstudy.core.perplexity import perplexity, stream_nll
from headstudy.core.trained import load_model, model_dir, read_run


def evaluate(config: DictConfig) -> dict:
    torch.set_num_threads(config.threads)
    directory = model_dir(config)
    model = load_model(directory)
    run = read_run(directory)
    prepared = Path(config.paths.prepared)
    stats = load_stats(prepared)["splits"]
    metrics = {
        "name": run["name"],
        "variant": run["variant"],
        "heads": run["heads"],
        "seed": run["seed"],
        "params": run["params"],
        "mlflow_run_id": run["mlflow_run_id"],
    }
    total, count = stream_nll(model, load_tokens(prepared, "test"), config.data.batch_size)
    metrics.update(test_ppl=perplexity(total, count), test_nll=total, test_tokens_predicted=count)
    test_words = stats["test"]["words"] + stats["test"]["lines"]  # one end-of-line per line
    metrics["test_word_ppl"] = perplexity(metrics["test_nll"], test_words)
    print(f"evaluate: {run['name']}: test perplexity {metrics['test_ppl']:.2f}")

    write_atomically(Path(config.paths.metrics) / f"{run['name']}.json", json.dumps(metrics, indent=2) + "\n")
    tracking.log_metrics(
        run["mlflow_run_id"],
        {"test/ppl": metrics["test_ppl"], "test/word_ppl": metrics["test_word_ppl"]},
    )
    return metrics


def main(overrides: list[str]) -> None:
    evaluate(compose_config(overrides))
