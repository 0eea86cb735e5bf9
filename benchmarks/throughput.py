"""Training throughput of the `train` stage against a plain PyTorch loop, and of both against
this machine's measured matmul peak (model FLOPs utilisation), for 1 and 4 heads.

    python benchmarks/throughput.py [--steps 300] [--warmup 20] [--rounds 4] [hydra overrides]

For each head count, in one process:
- tokens/s of the stage's Trainer (`build_trainer` with the MLflow logger and progress bar, as
  `headstudy train` runs it, less its resume checkpoint, written once per validation interval)
  and of a plain loop (the same model, with the same SDPA attention, batches, optimiser,
  schedule and threads), both over the steps after the first `--warmup`. Each round runs
  both, in alternating order, and their ratio is taken round by round, so drift in the
  machine's speed hits both.
- the model FLOPs per trained token, counted from the config (see `training_flops`);
- MFU = tokens/s x FLOPs per token / peak, where the peak is the better of two timings of
  2048 x 2048 matmuls (8192 x 8192 on a GPU) before and after the trainings, in the precision
  the trainer computes in (float32 unless trainer.precision is bf16-mixed or 16-mixed), with
  the same threads.

Only ratios taken in one run mean much on a shared machine: its speed changes by tens of
percent within minutes. Run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import lightning as L
import torch

from headstudy.bookkeeping.progress import StepProgressBar, Throughput
from headstudy.formats.prepared import load_tokens
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder, next_token_loss
from headstudy.weights.training import (
    LanguageModelModule,
    TokenDataModule,
    TrainingBatches,
    build_trainer,
    loss_logging_interval,
)

HEAD_COUNTS = (1, 4)
COMPUTE_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def training_flops(config) -> dict[str, int]:
    """FLOPs per trained token, as nanoGPT and the PaLM paper count them: 6 per parameter that
    takes part in a matrix multiplication (2 forward, 4 backward), namely q,k,v, the output
    projection, the MLP and the output layer (the token embedding, tied), plus the attention
    itself, 12 x layers x context x width: the scores q.k and the weighted sum of v over the
    whole T x T square, 2 x 2 x T x width per layer forward, 3x for training. Not counted:
    embedding lookups, norms, biases, GELU, softmax and the optimizer (O(width) per token), and
    not subtracted: the half of the square that the causal mask makes unnecessary."""
    model = model_config(config)
    width, hidden = model.width, model.mlp_hidden
    per_block = 3 * width * width + (width * width if model.has_output_projection else 0) + 2 * width * hidden
    matmul_params = model.n_layers * per_block + model.vocab_size * width
    attention = 12 * model.n_layers * model.context * width
    return {"matmul_params": matmul_params, "attention": attention, "total": 6 * matmul_params + attention}


def device_of(config) -> torch.device:
    wants_gpu = config.trainer.accelerator in ("gpu", "cuda") or (
        config.trainer.accelerator == "auto" and torch.cuda.is_available()
    )
    return torch.device("cuda" if wants_gpu else "cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int = 2048, seconds: float = 2.0) -> float:
    """FLOP/s of back-to-back size x size matmuls, after one untimed warm-up."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    synchronize(device)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(10 if device.type == "cpu" else 100):  # a GPU queues them: check the clock less often
            a @ b
        count += 10 if device.type == "cpu" else 100
        synchronize(device)
    return count * 2 * size**3 / (time.perf_counter() - started)


def plain_loop(config, steps: int, warmup: int) -> float:
    """The training step written out in PyTorch: tokens/s over the steps after `warmup`."""
    device = device_of(config)
    torch.manual_seed(config.seed)
    model = Decoder(model_config(config)).to(device)
    if config.trainer.compile:
        model.compile()
    setup = LanguageModelModule(model, config.optimizer, steps).configure_optimizers()
    optimizer, schedule = setup["optimizer"], setup["lr_scheduler"]
    batches = TrainingBatches(
        load_tokens(Path(config.paths.prepared), "train"), config.data.batch_size, config.model.context, config.seed
    )
    dtype = COMPUTE_DTYPES.get(str(config.trainer.precision))
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else nullcontext()
    for step in range(steps):
        if step == warmup:
            synchronize(device)
            started = time.perf_counter()
        inputs, targets = (t.to(device, non_blocking=True) for t in batches[step])
        with autocast:
            loss = next_token_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    synchronize(device)
    return (steps - warmup) * config.data.batch_size * config.model.context / (time.perf_counter() - started)


class StepClock(L.Callback):
    """Wall time from the end of step `warmup` to the end of the last step, the span the plain
    loop is timed over: what Lightning adds to every step, not what it spends once on starting
    and ending a fit."""

    def __init__(self, warmup: int, device: torch.device):
        self.warmup, self.device = warmup, device

    def on_train_batch_end(self, trainer, *_) -> None:
        if trainer.global_step in (self.warmup, trainer.max_steps):
            synchronize(self.device)
            if trainer.global_step == self.warmup:
                self.started = time.perf_counter()
            else:
                self.elapsed = time.perf_counter() - self.started


def stage_trainer(config, steps: int, warmup: int) -> float:
    """The `train` stage's own Trainer, callbacks, logger and progress bar: tokens/s over the
    steps after `warmup`."""
    from headstudy.bookkeeping import tracking

    torch.manual_seed(config.seed)
    module = LanguageModelModule(Decoder(model_config(config)), config.optimizer, steps, config.trainer.compile)
    datamodule = TokenDataModule(
        load_tokens(config.paths.prepared, "train"),
        load_tokens(config.paths.prepared, "valid"),
        config.data.batch_size,
        config.model.context,
        config.seed,
        config.trainer.val_every_steps,
    )
    throughput, clock = Throughput(config.data.batch_size * config.model.context), StepClock(warmup, device_of(config))
    trainer = build_trainer(config, [throughput, StepProgressBar(throughput), clock])
    trainer.logger = tracking.training_logger(None, "throughput-benchmark")
    trainer.fit(module, datamodule=datamodule)
    return (steps - warmup) * config.data.batch_size * config.model.context / clock.elapsed


def timed_run(steps: int) -> list[str]:
    """Overrides for a benchmark run of `steps` steps: one validation, at the very end, after
    the last timed step, and the loss sent to MLflow as often as in the default study's
    trainings (one write takes about 10 ms here), not 50 times in a few hundred steps."""
    study_interval = loss_logging_interval(compose_config([]).trainer)  # conf/ with the study's params.yaml
    return [
        f"trainer.max_steps={steps}",
        f"trainer.val_every_steps={steps}",
        f"trainer.loss_points={max(1, steps // study_interval)}",
    ]


def benchmark(config, steps: int, warmup: int, rounds: int) -> dict:
    """Each round runs both loops back to back, the plain loop first in even rounds and the
    stage first in odd ones, so that a machine speeding up or slowing down favours neither."""
    results = {"plain": [], "stage": []}
    for round_index in range(rounds):
        order = ("plain", "stage") if round_index % 2 == 0 else ("stage", "plain")
        for loop in order:
            results[loop].append((plain_loop if loop == "plain" else stage_trainer)(config, steps, warmup))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per timed run")
    parser.add_argument("--warmup", type=int, default=20, help="first steps of each run, not timed")
    parser.add_argument("--rounds", type=int, default=4, help="alternating runs of each loop")
    args, overrides = parser.parse_known_args()
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup={args.warmup} must be at least 0 and fewer than --steps={args.steps}")
    configs = {
        heads: compose_config([*overrides, *timed_run(args.steps), f"model.n_heads={heads}"]) for heads in HEAD_COUNTS
    }
    first = configs[HEAD_COUNTS[0]]
    torch.set_num_threads(first.threads)
    device = device_of(first)
    dtype = COMPUTE_DTYPES.get(str(first.trainer.precision), torch.float32)

    # 2048 x 2048 saturates a CPU; a GPU needs larger matrices to approach its peak.
    size = 8192 if device.type == "cuda" else 2048
    peaks = [matmul_peak(device, dtype, size)]
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{scratch}/benchmark.db"
        measured = {heads: benchmark(config, args.steps, args.warmup, args.rounds) for heads, config in configs.items()}
    peaks.append(matmul_peak(device, dtype, size))
    peak = max(peaks)

    models = []
    for heads, results in measured.items():
        flops = training_flops(configs[heads])
        medians = {loop: statistics.median(values) for loop, values in results.items()}
        # Round by round: the two runs of a round saw the same machine, a minute apart.
        ratios = [stage / plain for stage, plain in zip(results["stage"], results["plain"], strict=False)]
        models.append(
            {
                "heads": heads,
                "flops_per_token": flops,
                "tokens_per_sec": {loop: [round(v) for v in values] for loop, values in results.items()},
                "stage_over_plain": {
                    "rounds": [round(r, 3) for r in ratios],
                    "median": round(statistics.median(ratios), 3),
                },
                "mfu": {loop: round(median * flops["total"] / peak, 3) for loop, median in medians.items()},
            }
        )
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name() if device.type == "cuda" else f"cpu, {first.threads} threads",
                "precision": str(first.trainer.precision),
                "batch": [first.data.batch_size, first.model.context],
                "steps": args.steps,
                "warmup": args.warmup,
                "rounds": args.rounds,
                "matmul_peak_gflops": {
                    "size": size,
                    "before": round(peaks[0] / 1e9, 1),
                    "after": round(peaks[1] / 1e9, 1),
                },
                "models": models,
            },
            indent=2,
        )
    )
    print(
        "\n| heads | plain loop, tokens/s | stage, tokens/s | stage / plain, by round | median "
        "| MFU plain | MFU stage |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in models:
        tokens, ratio = row["tokens_per_sec"], row["stage_over_plain"]
        print(
            f"| {row['heads']} | {', '.join(f'{v:,}' for v in tokens['plain'])} "
            f"| {', '.join(f'{v:,}' for v in tokens['stage'])} | {', '.join(f'{r:.3f}' for r in ratio['rounds'])} "
            f"| {ratio['median']:.3f} | {row['mfu']['plain']:.0%} | {row['mfu']['stage']:.0%} |"
        )


if __name__ == "__main__":
    main()
