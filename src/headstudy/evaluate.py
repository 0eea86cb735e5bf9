"""Stage `evaluate`: perplexity of one trained model on the whole test stream, written as a
DVC metrics file and logged to the model's own MLflow run.

The model must be the one the config asks for, with the weights its training recorded, trained
on the prepared data now on disk (formats/trained.py checks all three); the metrics file holds
only what those inputs determine."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.analysis.measures.perplexity import perplexity, stream_nll
from headstudy.bookkeeping import store, tracking
from headstudy.common.errors import ConfigError
from headstudy.common.files import write_json
from headstudy.execution import guards, jobs, kernels
from headstudy.formats.prepared import check_length, load_stats, load_tokens, tokens_path
from headstudy.formats.trained import load_trained, model_dir


def evaluate(config: DictConfig, run_id: str | None = None) -> dict:
    """run_id: the MLflow run to log test/ppl to; by default the run that trained these weights."""
    kernels.check_in_force(kernels.chosen(config))
    guards.refuse_pipeline_outputs(config, "metrics")
    torch.set_num_threads(jobs.torch_threads(config.threads))
    model, run = load_trained(config)
    prepared = Path(config.paths.prepared)
    test = load_tokens(prepared, "test")
    check_length(test, 2, tokens_path(prepared, "test"), "a test perplexity")
    stats = load_stats(prepared)["splits"]
    store.check_store()
    # Numbers only, so that `dvc metrics show` tabulates them; names and hashes are in run.json.
    metrics = {key: run[key] for key in ("heads", "seed", "params", "lr")}
    total, count = stream_nll(model, test, config.data.batch_size)
    metrics.update(test_ppl=perplexity(total, count), test_nll=total, test_tokens_predicted=count)
    if not math.isfinite(metrics["test_ppl"]):
        raise ConfigError(
            f"{model_dir(config)} gives test perplexity {metrics['test_ppl']} (total NLL {total}): "
            "the model is broken; train it again"
        )
    test_words = stats["test"]["words"] + stats["test"]["lines"]  # one end-of-line per line
    metrics["test_word_ppl"] = perplexity(metrics["test_nll"], test_words)
    print(f"evaluate: {run['name']}: test perplexity {metrics['test_ppl']:.2f}")

    write_json(Path(config.paths.metrics) / f"{run['name']}.json", metrics)
    run_id = run_id or tracking.find_training_run(run["name"], run["weights_sha256"])
    if run_id is None:
        print(
            f"evaluate: warning: no finished MLflow run {run['name']} with weights.sha256="
            f"{run['weights_sha256'][:12]}... in {store.redact(store.tracking_uri())}: test/ppl not logged",
            file=sys.stderr,
        )
    else:
        tracking.log_metrics(run_id, {"test/ppl": metrics["test_ppl"], "test/word_ppl": metrics["test_word_ppl"]})
    return metrics


def main(config: DictConfig) -> None:
    evaluate(config)
