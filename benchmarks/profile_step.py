"""Where one training step's time goes, for 1 and 4 heads: torch.profiler over a few steps of
the plain loop, split by record_function labels into attention, MLP, norms, cross-entropy,
the rest (embeddings, output layer), drawing the batch and the optimizer; then the Lightning
overhead per step, the `train` stage's step time minus the plain loop's, timed in the same run.

    python benchmarks/profile_step.py [hydra overrides] [--warmup 10] [--steps 5]
        [--precisions 32-true bf16-mixed]

For each precision (bfloat16 as the train stage runs it: autocast around the forward pass and the
loss) and head count: the labelled parts, then the operators with the most time of their own
(self time, children excluded), matrix products summed, so that the parts can be read against
what the CPU does in them.

Module hooks open and close the labels, in the backward pass too (full backward hooks), so
work that autograd interleaves at a module's boundary may land on either side of it. The
profiler adds its own cost to every operator: read the shares, not the milliseconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
from throughput import COMPUTE_DTYPES, plain_loop, stage_trainer, timed_run
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from headstudy.formats.prepared import load_tokens
from headstudy.settings.compose import compose_config, model_config
from headstudy.settings.training import training_settings
from headstudy.weights.model import MLP, CausalSelfAttention, Decoder, next_token_loss
from headstudy.weights.training import LanguageModelModule, TrainingBatches

PARTS = {CausalSelfAttention: "attention", MLP: "mlp", nn.RMSNorm: "norms"}
# The operators that are matrix products (the linear layers' and the output layer's; SDPA's own
# products are inside its fused attention kernel, which is counted as attention).
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
TOP_OPERATORS = 8


def label_parts(model: nn.Module) -> None:
    """A record_function range around every attention, MLP and norm module, forward and backward."""
    open_ranges: dict[tuple[int, str], record_function] = {}

    def enter(module, label):
        scope = record_function(label)
        scope.__enter__()
        open_ranges[id(module), label] = scope

    def leave(module, label):
        open_ranges.pop((id(module), label)).__exit__(None, None, None)

    for module in model.modules():
        part = next((name for kind, name in PARTS.items() if isinstance(module, kind)), None)
        if part is None:
            continue
        module.register_forward_pre_hook(lambda m, args, label=f"{part} forward": enter(m, label))
        module.register_forward_hook(lambda m, args, out, label=f"{part} forward": leave(m, label))
        module.register_full_backward_pre_hook(lambda m, grad, label=f"{part} backward": enter(m, label))
        module.register_full_backward_hook(lambda m, gin, gout, label=f"{part} backward": leave(m, label))


def profiled_steps(config, warmup: int, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Milliseconds per step of every labelled range (children included) and of every operator's
    own time (children excluded), over `steps` steps after `warmup`."""
    torch.manual_seed(config.seed)
    model = Decoder(model_config(config))
    label_parts(model)
    setup = LanguageModelModule(model, training_settings(config).optimizer, warmup + steps).configure_optimizers()
    optimizer, schedule = setup["optimizer"], setup["lr_scheduler"]
    batches = TrainingBatches(
        load_tokens(Path(config.paths.prepared), "train"), config.data.batch_size, config.model.context, config.seed
    )

    dtype = COMPUTE_DTYPES.get(str(config.trainer.precision))
    autocast = torch.autocast("cpu", dtype=dtype) if dtype else nullcontext()

    def step(k: int) -> None:
        with record_function("step"):
            with record_function("batch"):
                inputs, targets = batches[k]
            with record_function("forward"), autocast:
                logits = model(inputs)
                with record_function("cross-entropy forward"):
                    loss = next_token_loss(logits, targets)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                schedule.step()

    for k in range(warmup):
        step(k)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for k in range(warmup, warmup + steps):
            step(k)
    totals: dict[str, float] = {}
    own: dict[str, float] = {}
    for event in profiler.key_averages():
        totals[event.key] = event.cpu_time_total / 1e3 / steps  # ms per step, children included
        if event.key.startswith("aten::"):
            own[event.key] = event.self_cpu_time_total / 1e3 / steps
    return totals, own


def breakdown(ms: dict[str, float]) -> list[tuple[str, float]]:
    def get(key: str) -> float:
        return ms.get(key, 0.0)

    parts = ["attention", "mlp", "norms"]
    forward_rest = get("forward") - sum(get(f"{p} forward") for p in parts) - get("cross-entropy forward")
    backward_rest = get("backward") - sum(get(f"{p} backward") for p in parts)
    return [
        *[(f"{p} (forward + backward)", get(f"{p} forward") + get(f"{p} backward")) for p in parts],
        ("cross-entropy (forward)", get("cross-entropy forward")),
        ("rest of forward: embeddings, output layer", forward_rest),
        ("rest of backward: output layer, loss, embeddings", backward_rest),
        ("drawing the batch", get("batch")),
        ("optimizer (AdamW, schedule, zero_grad)", get("optimizer")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--warmup", type=int, default=10, help="unprofiled (and, for the overhead, untimed) steps first"
    )
    parser.add_argument("--steps", type=int, default=5, help="profiled steps, averaged")
    parser.add_argument("--timed-steps", type=int, default=100, help="steps of each loop for the Lightning overhead")
    parser.add_argument("--precisions", nargs="+", default=["32-true"], help="trainer.precision values")
    args, overrides = parser.parse_known_args()
    if not 0 <= args.warmup < args.timed_steps:
        parser.error(f"--warmup={args.warmup} must be at least 0 and fewer than --timed-steps={args.timed_steps}")
    for precision in args.precisions:
        for heads in (1, 4):
            config = compose_config(
                [*overrides, *timed_run(args.timed_steps), f"model.n_heads={heads}", f"trainer.precision={precision}"]
            )
            profile_one(config, args)


def profile_one(config, args) -> None:
    """One (precision, head count): the profile of a step, then the Lightning overhead."""
    heads = config.model.n_heads
    torch.set_num_threads(config.threads)
    ms, own = profiled_steps(config, args.warmup, args.steps)
    step_ms = ms["step"]
    print(
        f"\n{heads} head{'s' if heads > 1 else ''}, {config.trainer.precision}: one training step under the "
        f"profiler, {step_ms:.2f} ms (batch {config.data.batch_size} x {config.model.context}, "
        f"{config.threads} threads)"
    )
    for name, value in breakdown(ms):
        print(f"  {name:<52} {value:8.2f} ms  {value / step_ms:6.1%}")
    matmuls = sum(own.get(name, 0.0) for name in MATMULS)
    print(f"  operators' own time: matrix products ({', '.join(MATMULS)}) {matmuls:.2f} ms  {matmuls / step_ms:.1%}")
    for name, value in sorted(own.items(), key=lambda item: -item[1])[:TOP_OPERATORS]:
        print(f"    {name:<50} {value:8.2f} ms  {value / step_ms:6.1%}")

    tokens_per_step = config.data.batch_size * config.model.context
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{scratch}/profile.db"
        plain = 1e3 * tokens_per_step / plain_loop(config, args.timed_steps, args.warmup)
        stage = 1e3 * tokens_per_step / stage_trainer(config, args.timed_steps, args.warmup)
    print(
        f"  Lightning overhead: stage {stage:.2f} ms - plain loop {plain:.2f} ms = "
        f"{stage - plain:+.2f} ms per step ({(stage - plain) / plain:+.1%}), "
        f"{args.timed_steps - args.warmup} steps each after {args.warmup} untimed, no profiler"
    )


if __name__ == "__main__":
    main()
