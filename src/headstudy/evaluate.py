"""Stage `evaluate`: perplexity of one trained model on the whole test stream, written as a
DVC metrics file and logged to the model's own MLflow run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from headstudy import tracking
from headstudy.config import compose_config
from headstudy.data import load_stats, load_tokens, stream_batches
from headstudy.files import write_atomically
from headstudy.model import Decoder, next_token_loss
from headstudy.trained import load_model, model_dir, read_run


@torch.no_grad()
def stream_nll(model: Decoder, tokens: np.ndarray, batch_size: int) -> tuple[float, int]:
    """Total NLL (nats) and number of predicted tokens over the whole stream."""
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in stream_batches(tokens, model.config.context, batch_size):
        total += next_token_loss(model(inputs), targets, reduction="sum").item()
        count += targets.numel()
    return total, count


def perplexity(total_nll: float, count: int) -> float:
    return math.exp(total_nll / count)


def evaluate(config: DictConfig) -> dict:
    torch.set_num_threads(config.threads)
    directory = model_dir(config)
    model = load_model(directory)
    run = read_run(directory)
    prepared = Path(config.paths.prepared)
    stats = load_stats(prepared)["splits"]
    metrics = {
        "name": run["name"],
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
