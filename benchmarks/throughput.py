"""Training throughput of the Lightning stage against a plain PyTorch loop: same model, same
batches, same optimiser and schedule, same thread count. Prints tokens/s for each and the ratio.

    python benchmarks/throughput.py [hydra overrides]   # e.g. model.n_heads=4
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import lightning as L
import torch

from headstudy.config import compose_config, model_config
from headstudy.data import load_tokens, training_batch
from headstudy.model import Decoder, next_token_loss
from headstudy.training import LanguageModelModule, Throughput, TokenDataModule

WARMUP_STEPS = 20


def plain_loop(config, steps: int) -> float:
    torch.manual_seed(config.seed)
    model = Decoder(model_config(config))
    module = LanguageModelModule(model, config.optimizer, steps)
    optimizer_setup = module.configure_optimizers()
    optimizer, schedule = optimizer_setup["optimizer"], optimizer_setup["lr_scheduler"]["scheduler"]
    tokens = load_tokens(Path(config.paths.prepared), "train")
    batch_size, context = config.data.batch_size, config.model.context
    for step in range(steps):
        if step == WARMUP_STEPS:
            started = time.perf_counter()
        inputs, targets = training_batch(tokens, batch_size, context, config.seed, step)
        loss = next_token_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return (steps - WARMUP_STEPS) * batch_size * context / (time.perf_counter() - started)


def lightning_loop(config, steps: int) -> float:
    torch.manual_seed(config.seed)
    module = LanguageModelModule(Decoder(model_config(config)), config.optimizer, steps)
    datamodule = TokenDataModule(
        config.paths.prepared, config.data.batch_size, config.model.context, config.seed, steps
    )
    throughput = Throughput(config.data.batch_size * config.model.context)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=False,
        callbacks=[throughput],
        deterministic=config.trainer.deterministic,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=True,
    )
    trainer.fit(module, datamodule=datamodule)
    return throughput.tokens_per_sec


def main() -> None:
    config = compose_config(sys.argv[1:])
    torch.set_num_threads(config.threads)
    steps = 200
    results = {}
    for name, loop in (("plain", plain_loop), ("lightning", lightning_loop), ("plain_again", plain_loop)):
        results[name] = loop(config, steps)
    plain = (results["plain"] + results["plain_again"]) / 2
    results["lightning_over_plain"] = results["lightning"] / plain
    print(json.dumps({k: round(v, 3) for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
