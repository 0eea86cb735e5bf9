"""What Python's collector and Python's exit cost a command: a tiny training run by hand as
`headstudy train` runs it (the collector off while the libraries import, then on without their
objects: cli.main, gc.freeze; at exit, no teardown of the modules' objects and no table of
torch's compile times: cli.end_without_teardown, cli.drop_unlogged_compile_times), and the same
command with the collector left as Python leaves it, and with the exit Python makes. CPU of the
whole process (user + system), the three in turn after a warm-up of each, medians and the ratios.

    python benchmarks/command_start.py [--repeats 5] [--steps 200]

Each training has its own models, metrics and checkpoints folders; the two share a prepared corpus of generated words
(benchmarks/start_together.py's) and an MLflow store per side, made by the warm-up.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from start_together import by_hand_environment, prepare_corpus  # noqa: E402

# `headstudy train ARGS` with gc.disable made a no-op: cli.main then never turns the collector off,
# and command_module, finding it on, freezes nothing.
COLLECTOR_AS_PYTHON_LEAVES_IT = (
    "import gc, sys; gc.disable = lambda: None; from headstudy.cli import main; "
    "sys.argv = ['headstudy', *sys.argv[1:]]; main()"
)
# `headstudy train ARGS` with both of cli.main's exit steps made no-ops: Python tears every module
# down and torch._dynamo formats its table of compile times.
EXIT_AS_PYTHON_MAKES_IT = (
    "import sys; from headstudy import cli; "
    "cli.end_without_teardown = cli.drop_unlogged_compile_times = lambda: None; "
    "sys.argv = ['headstudy', *sys.argv[1:]]; cli.main()"
)


def cpu_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command[:3])} ... exited {result.returncode}: {result.stderr.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    env = by_hand_environment()
    sides = {
        "headstudy train": ["headstudy", "train"],
        "collector as Python leaves it": [sys.executable, "-c", COLLECTOR_AS_PYTHON_LEAVES_IT, "train"],
        "exit as Python makes it": [sys.executable, "-c", EXIT_AS_PYTHON_MAKES_IT, "train"],
    }
    with tempfile.TemporaryDirectory(prefix="headstudy-command-start-") as scratch:
        folder = Path(scratch)
        corpus = prepare_corpus(folder, env)
        steps = [f"trainer.max_steps={args.steps}", f"trainer.val_every_steps={max(1, args.steps // 4)}"]
        training = ["model=tiny", "threads=1", *steps, *corpus]
        seconds: dict[str, list[float]] = {side: [] for side in sides}
        for repeat in range(args.repeats + 1):  # the first of each side a warm-up: it makes that side's store
            for number, (side, command) in enumerate(sides.items()):
                run_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / f'store{number}.db'}"}
                folders = ("models", "metrics", "checkpoints")
                paths = [f"paths.{name}={folder / f'{name}{number}-{repeat}'}" for name in folders]
                took = cpu_seconds([*command, *training, *paths], folder, run_env)
                if repeat:
                    seconds[side].append(took)
        print(f"a tiny training of {args.steps} steps, CPU seconds of the whole process, {args.repeats} runs each:")
        for side, found in seconds.items():
            print(f"  {side}: median {statistics.median(found):.2f} (min {min(found):.2f}, max {max(found):.2f})")
        own, *others = seconds
        for side in others:
            ratios = [a / b for a, b in zip(seconds[side], seconds[own], strict=True)]
            print(f"  {side} / {own}, run by run: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
