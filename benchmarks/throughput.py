"""Training throughput of the `train` stage against a plain PyTorch loop, each in float32 and
in bfloat16 mixed precision, and of all four against this machine's matmul peak of their own
precision (model FLOPs utilisation), for 1 and 4 heads.

    python benchmarks/throughput.py [--steps 300] [--warmup 20] [--rounds 4]
        [--precisions 32-true bf16-mixed] [--heads 1 4] [--loops plain stage] [--compile]
        [hydra overrides]

For each head count, in one process:
- tokens/s of the stage's Trainer (`build_trainer` with the MLflow logger and progress bar, as
  `headstudy train` runs it, less its resume checkpoint, written once per validation interval)
  and of a plain loop (the same model, with the same SDPA attention, batches, optimiser,
  schedule and threads), both over the steps after the first `--warmup`, in each precision of
  `--precisions`. Each round runs every (loop, precision) once, in an order that reverses from
  one round to the next, and the ratios (stage / plain, and each precision / the first) are
  taken round by round, so drift in the machine's speed hits both sides of a ratio.
- with `--compile`, each precision once more with `trainer.compile=true` (torch.compile of the
  model, its compile time inside the untimed warm-up steps), in the same alternating rounds, and
  for the plain loop whether its weights after the last step are the same in every round (a
  setting the study could adopt must be bit-reproducible run to run);
- the model FLOPs per trained token, counted from the config (see `training_flops`);
- MFU = tokens/s x FLOPs per token / peak, against two peaks of the run's own precision: the
  measured one, the better of two timings of 2048 x 2048 matmuls (8192 x 8192 on a GPU) before
  and after the trainings, with the same threads; and on a CPU the rated one, threads x clock x
  FLOPs per cycle (see `rated_cpu_peak`).

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

from headstudy.bookkeeping.provenance import cpu_info
from headstudy.bookkeeping.training_bar import StepProgressBar, Throughput
from headstudy.formats.prepared import load_tokens
from headstudy.settings.compose import compose_config, model_config
from headstudy.settings.training import training_settings
from headstudy.weights.model import Decoder, next_token_loss, weights_sha256
from headstudy.weights.training import (
    LanguageModelModule,
    TokenDataModule,
    TrainingBatches,
    build_trainer,
    loss_logging_interval,
)

LOOPS = ("plain", "stage")
COMPUTE_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
# FLOPs per cycle and core of the vector units, by (vendor, family): AMD family 25 is Zen 3 and
# Zen 4, and of those only Zen 4 has AVX-512 with BF16 (the check below asks for it). Zen 4 runs
# AVX-512 on two 256-bit FMA pipes: 2 x 8 float32 lanes x 2 (multiply and add) = 32 FLOPs; its
# VDPBF16PS does 16 bfloat16 products summed into 8 float32 lanes per pipe, 2 x 32 = 64 FLOPs.
RATED_FLOPS_PER_CYCLE = {("AuthenticAMD", 25): {torch.float32: 32, torch.bfloat16: 64}}


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


def rated_cpu_peak(dtype: torch.dtype, threads: int) -> dict | None:
    """threads x clock x FLOPs per cycle and core, with what each factor was read from; None where
    this CPU is not in RATED_FLOPS_PER_CYCLE or reports no clock. The clock is /proc/cpuinfo's
    `cpu MHz`, the one the kernel reports (a virtual machine reports its host's nominal clock;
    boost can run above it, so the rated peak is a guide, not a ceiling)."""
    info = cpu_info()
    try:
        key = (info["vendor_id"], int(info["cpu family"]))
        megahertz = float(info["cpu MHz"])
    except (KeyError, ValueError):
        return None
    per_cycle = RATED_FLOPS_PER_CYCLE.get(key, {}).get(dtype)
    if per_cycle is None or (dtype == torch.bfloat16 and not torch.cpu._is_avx512_bf16_supported()):
        return None
    return {
        "gflops": round(threads * megahertz * 1e6 * per_cycle / 1e9, 1),
        "derived": f"{threads} threads x {megahertz:.0f} MHz (cpu MHz) x {per_cycle} FLOPs/cycle "
        f"({info['vendor_id']} family {key[1]} model {info.get('model', '?')}, {str(dtype).removeprefix('torch.')})",
    }


def plain_loop(config, steps: int, warmup: int, weights: list | None = None) -> float:
    """The training step written out in PyTorch: tokens/s over the steps after `warmup`. The
    sha256 of the weights after the last step is appended to `weights` when it is given."""
    device = device_of(config)
    torch.manual_seed(config.seed)
    model = Decoder(model_config(config)).to(device)
    if config.trainer.compile:
        model.compile()
    setup = LanguageModelModule(model, training_settings(config).optimizer, steps).configure_optimizers()
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
    elapsed = time.perf_counter() - started
    if weights is not None:
        weights.append(weights_sha256(model.cpu()))
    return (steps - warmup) * config.data.batch_size * config.model.context / elapsed


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
    settings = training_settings(config)
    module = LanguageModelModule(Decoder(settings.model), settings.optimizer, steps, settings.trainer.compile)
    datamodule = TokenDataModule(
        load_tokens(config.paths.prepared, "train"),
        load_tokens(config.paths.prepared, "valid"),
        config.data.batch_size,
        config.model.context,
        config.seed,
        config.trainer.val_every_steps,
    )
    throughput, clock = Throughput(config.data.batch_size * config.model.context), StepClock(warmup, device_of(config))
    trainer = build_trainer(training_settings(config).trainer, [throughput, StepProgressBar(throughput), clock])
    trainer.logger = tracking.training_logger(None, "throughput-benchmark")
    # The stage's run logs its params before the first validation; this run logs none, so the
    # logger is told the tokens per step it would read back from them.
    trainer.logger.tokens_per_step = config.data.batch_size * config.model.context
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


def benchmark(
    configs: dict[str, object], steps: int, warmup: int, rounds: int, loops: list[str]
) -> tuple[dict[tuple[str, str], list[float]], dict[str, list[str]]]:
    """tokens/s of every (loop, setting), `rounds` times: each round runs them all once, in an
    order reversed from the round before, so a machine speeding up or slowing down favours none
    of them. With it, the plain loop's final weights per setting, one sha256 per round."""
    runs = [(loop, setting) for setting in configs for loop in loops]
    results = {run: [] for run in runs}
    weights = {setting: [] for setting in configs}
    for round_index in range(rounds):
        for loop, setting in runs if round_index % 2 == 0 else runs[::-1]:
            if loop == "plain":
                results[(loop, setting)].append(plain_loop(configs[setting], steps, warmup, weights[setting]))
            else:
                results[(loop, setting)].append(stage_trainer(configs[setting], steps, warmup))
    return results, weights


def by_round(numerators: list[float], denominators: list[float]) -> dict:
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return {"rounds": [round(r, 3) for r in ratios], "median": round(statistics.median(ratios), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per timed run")
    parser.add_argument("--warmup", type=int, default=20, help="first steps of each run, not timed")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each (loop, precision)")
    parser.add_argument("--precisions", nargs="+", default=["32-true", "bf16-mixed"], help="trainer.precision values")
    parser.add_argument("--heads", nargs="+", type=int, default=[1, 4], help="head counts (model.n_heads)")
    # The plain loop alone needs no MLflow: on a machine without it, the model's own speed.
    parser.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS), help="loops to time")
    parser.add_argument("--compile", action="store_true", help="each precision also with trainer.compile=true")
    args, overrides = parser.parse_known_args()
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup={args.warmup} must be at least 0 and fewer than --steps={args.steps}")
    # A setting is a precision, compiled or not: "32-true", "32-true compiled".
    settings = {
        f"{precision}{' compiled' if compiled else ''}": [
            f"trainer.precision={precision}",
            f"trainer.compile={str(compiled).lower()}",
        ]
        for compiled in ([False, True] if args.compile else [False])
        for precision in args.precisions
    }
    configs = {
        heads: {
            setting: compose_config([*overrides, *timed_run(args.steps), f"model.n_heads={heads}", *setting_overrides])
            for setting, setting_overrides in settings.items()
        }
        for heads in args.heads
    }
    first = configs[args.heads[0]][next(iter(settings))]
    torch.set_num_threads(first.threads)
    device = device_of(first)
    dtypes = {precision: COMPUTE_DTYPES.get(precision, torch.float32) for precision in args.precisions}

    # 2048 x 2048 saturates a CPU; a GPU needs larger matrices to approach its peak.
    size = 8192 if device.type == "cuda" else 2048
    peaks = {precision: [matmul_peak(device, dtype, size)] for precision, dtype in dtypes.items()}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{scratch}/benchmark.db"
        measured, final_weights = {}, {}
        for heads, by_setting in configs.items():
            measured[heads], final_weights[heads] = benchmark(
                by_setting, args.steps, args.warmup, args.rounds, args.loops
            )
    for precision, dtype in dtypes.items():
        peaks[precision].append(matmul_peak(device, dtype, size))
    rated = {
        precision: rated_cpu_peak(dtype, first.threads) if device.type == "cpu" else None
        for precision, dtype in dtypes.items()
    }

    baseline = next(iter(settings))
    models = []
    for heads, results in measured.items():
        flops = training_flops(configs[heads][baseline])
        runs = []
        for (loop, setting), values in results.items():
            precision = str(configs[heads][setting].trainer.precision)
            median = statistics.median(values)
            rated_peak = rated[precision]
            runs.append(
                {
                    "loop": loop,
                    "setting": setting,
                    "tokens_per_sec": [round(v) for v in values],
                    "over_baseline": by_round(values, results[(loop, baseline)]),
                    "mfu_measured_peak": round(median * flops["total"] / max(peaks[precision]), 3),
                    "mfu_rated_peak": round(median * flops["total"] / (rated_peak["gflops"] * 1e9), 3)
                    if rated_peak
                    else None,
                }
            )
        stage_over_plain = {
            setting: by_round(results[("stage", setting)], results[("plain", setting)])
            for setting in settings
            if set(LOOPS) <= set(args.loops)
        }
        same_weights = {setting: len(set(shas)) == 1 for setting, shas in final_weights[heads].items() if len(shas) > 1}
        models.append(
            {
                "heads": heads,
                "flops_per_token": flops,
                "runs": runs,
                "stage_over_plain": stage_over_plain,
                "plain_weights_same_every_round": same_weights,
            }
        )
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name() if device.type == "cuda" else f"cpu, {first.threads} threads",
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "baseline": baseline,
                "batch": [first.data.batch_size, first.model.context],
                "steps": args.steps,
                "warmup": args.warmup,
                "rounds": args.rounds,
                "matmul_peak_gflops": {
                    precision: {"size": size, "before": round(p[0] / 1e9, 1), "after": round(p[1] / 1e9, 1)}
                    for precision, p in peaks.items()
                },
                "rated_peak": rated,
                "models": models,
            },
            indent=2,
        )
    )
    header = ["heads", "loop", "setting", "tokens/s, by round", f"/ {baseline}, by round", "median"]
    print("\n| " + " | ".join([*header, "MFU (measured peak)", "MFU (rated peak)"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        for run in model["runs"]:
            ratio = run["over_baseline"]
            rated_mfu = f"{run['mfu_rated_peak']:.0%}" if run["mfu_rated_peak"] is not None else "n/a"
            tokens = ", ".join(f"{v:,}" for v in run["tokens_per_sec"])
            print(
                f"| {model['heads']} | {run['loop']} | {run['setting']} | {tokens} "
                f"| {', '.join(f'{r:.3f}' for r in ratio['rounds'])} | {ratio['median']:.3f} "
                f"| {run['mfu_measured_peak']:.0%} | {rated_mfu} |"
            )
    for model in models:
        for setting, ratio in model["stage_over_plain"].items():
            shown = f"stage / plain by round {ratio['rounds']}, median {ratio['median']}"
            print(f"{model['heads']} head(s), {setting}: {shown}")
        for setting, same in model["plain_weights_same_every_round"].items():
            print(f"{model['heads']} head(s), {setting}: plain loop's final weights the same in every round: {same}")


if __name__ == "__main__":
    main()
