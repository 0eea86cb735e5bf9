"""Training throughput of the `train` stage's Lightning Trainer (MLflow logging, progress bar
and all) against a plain PyTorch loop: same model, batches, optimiser, schedule and threads.
Both time every step from the first; validation time is left out of the Lightning figure.

    python benchmarks/throughput.py [hydra overrides]    # e.g. model.n_heads=4

Prints tokens/s of each run (they alternate, so drift in machine speed hits both) and the
ratio of the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from headstudy.core.config import compose_config, model_config
from headstudy.core.data import load_tokens, training_batch
from headstudy.core.model import Decoder, next_token_loss
from headstudy.core.training import LanguageModelModule, Throughput, TokenDataModule

STEPS = 300
ROUNDS = 2


def plain_loop(config) -> float:
    torch.manual_seed(config.seed)
    model = Decoder(model_config(config))
    setup = LanguageModelModule(model, config.optimizer, STEPS).configure_optimizers()
    optimizer, schedule = setup["optimizer"], setup["lr_scheduler"]["scheduler"]
    tokens = load_tokens(Path(config.paths.prepared), "train")
    batch_size, context = config.data.batch_size, config.model.context
    started = time.perf_counter()
    for step in range(STEPS):
        inputs, targets = training_batch(tokens, batch_size, context, config.seed, step)
        loss = next_token_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return STEPS * batch_size * context / (time.perf_counter() - started)


def lightning_loop(config) -> float:
    from headstudy import tracking
    from headstudy.train import build_trainer

    torch.manual_seed(config.seed)
    module = LanguageModelModule(Decoder(model_config(config)), config.optimizer, STEPS)
    datamodule = TokenDataModule(config.paths.prepared, config.data.batch_size,
                                 config.model.context, config.seed, config.trainer.val_every_steps)
    throughput = Throughput(config.data.batch_size * config.model.context)
    trainer = build_trainer(config, tracking.training_logger(None, "throughput-benchmark"), [throughput])
    trainer.fit(module, datamodule=datamodule)
    return throughput.tokens_per_sec


def main() -> None:
    config = compose_config([*sys.argv[1:], f"trainer.max_steps={STEPS}"])
    torch.set_num_threads(config.threads)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{scratch}/benchmark.db"
        results = {"plain": [], "lightning": []}
        for _ in range(ROUNDS):
            results["plain"].append(plain_loop(config))
            results["lightning"].append(lightning_loop(config))
    medians = {name: statistics.median(values) for name, values in results.items()}
    print(json.dumps({
        "model.n_heads": config.model.n_heads,
        "threads": config.threads,
        "tokens_per_sec": {name: [round(v) for v in values] for name, values in results.items()},
        "lightning_over_plain": round(medians["lightning"] / medians["plain"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
