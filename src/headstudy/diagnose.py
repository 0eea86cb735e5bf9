"""Stage `diagnose`: one model trained exactly as `headstudy train` trains it (the same module,
Trainer, batches and seed), watched at every step: the training loss, the learning rate, the
global gradient norm before the optimizer step, and every diagnose.probe_every steps the attention
of a fixed batch of validation windows (each head's mean entropy and largest pre-softmax score).
diagnose.clip_grad_norm, where set, clips the gradients by global norm: the stabiliser arm.

Writes metrics/diagnostics/NAME.csv (a row per step) and metrics/diagnostics/NAME.json (the
validation curve, the final validation perplexity and the weights' sha256). Without clipping the
weights are those `headstudy train` makes from the same settings, bit for bit (a test checks it);
the model itself is not kept, and no MLflow run is made. A killed run starts again from step 0."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.bookkeeping.progress import quiet_routine_warnings
from headstudy.bookkeeping.training_bar import Throughput, watchers
from headstudy.common.errors import ConfigError
from headstudy.common.files import write_atomically, write_json
from headstudy.execution import guards
from headstudy.formats.prepared import check_training_data, load_tokens
from headstudy.settings.training import diverged, start_training
from headstudy.weights.batches import stream_batches
from headstudy.weights.diagnostics import TrainingWatcher
from headstudy.weights.model import weights_sha256
from headstudy.weights.training import TrainingDiverged


def probe_batch(valid_tokens, context: int, windows: int) -> torch.Tensor:
    """The first `windows` windows of the validation stream: the same batch at every probe. More
    windows than the stream holds is refused before training: the probe would watch fewer than
    the recorded number."""
    available = (len(valid_tokens) - 1) // context
    if windows > available:
        raise ConfigError(
            f"diagnose.probe_windows={windows}: the validation split holds {available} full windows of "
            f"{context} tokens: set at most {available}"
        )
    inputs, _ = next(stream_batches(valid_tokens, context, windows))
    return inputs


def diagnose(config: DictConfig) -> dict:
    guards.refuse_pipeline_outputs(config, "metrics")
    folder = Path(config.paths.metrics) / "diagnostics"
    guards.check_writable(folder)
    prepared = Path(config.paths.prepared)
    check_training_data(prepared, config.model.vocab_size, config.model.context)
    quiet_routine_warnings()
    valid_tokens = load_tokens(prepared, "valid")
    settings = config.diagnose
    watcher = TrainingWatcher(
        probe_batch(valid_tokens, config.model.context, settings.probe_windows),
        settings.probe_every,
        settings.clip_grad_norm,
    )
    throughput = Throughput(config.data.batch_size * config.model.context)
    training = start_training(config, load_tokens(prepared, "train"), valid_tokens, [watcher, *watchers(throughput)])
    try:
        training.fit()
    except TrainingDiverged as error:
        raise diverged(error, config.trainer.precision) from None
    trainer, module = training.trainer, training.module

    columns, rows = watcher.table()
    lines = [",".join(columns)] + [",".join("" if value is None else repr(value) for value in row) for row in rows]
    write_atomically(folder / f"{config.name}.csv", "\n".join(lines) + "\n")
    curve = [[step, ppl] for step, ppl in module.validation_curve]
    result = {
        "name": config.name,
        "variant": config.variant,
        "heads": config.model.n_heads,
        "seed": config.seed,
        "lr": config.optimizer.lr,
        "context": config.model.context,
        "clip_grad_norm": settings.clip_grad_norm,
        "probe_every": settings.probe_every,
        "probe_windows": settings.probe_windows,
        "steps": trainer.global_step,
        "final_val_ppl": curve[-1][1] if curve else None,
        "validation_curve": curve,
        "weights_sha256": weights_sha256(module.model.cpu()),
    }
    write_json(folder / f"{config.name}.json", result)
    print(
        f"diagnose: {config.name}: final validation perplexity {result['final_val_ppl']:.2f}, "
        f"{throughput.tokens_per_sec:,.0f} tokens/s, weights {result['weights_sha256'][:12]}, in {folder}/"
    )
    return result


def main(config: DictConfig) -> None:
    diagnose(config)
