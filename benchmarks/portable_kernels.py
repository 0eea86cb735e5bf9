"""Do pinned CPU kernels give the same weights on every machine? One short training of the course
model (4 heads, seed 0, one thread) trained `--repeats` times with PyTorch's default kernel choice
and as many times with all three of its CPU kernel selectors pinned to AVX2: its own vector kernels
(ATEN_CPU_CAPABILITY), MKL's (MKL_CBWR) and oneDNN's (ONEDNN_MAX_CPU_ISA).

    python benchmarks/portable_kernels.py [--prepared data/prepared] [--steps 200] [--repeats 2]

from the project's root.
Prints one row per kernel choice for docs/tracking.md's table: the CPU, the weights' sha256 (its
first 16 hex digits), whether every repeat gave the same weights, and tokens/s (the median over
repeats; a speed means something only on otherwise quiet cores). Each training runs in its own
temporary folder with its own MLflow store, so nothing of the project's is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from headstudy.bookkeeping.provenance import cpu_info, cpu_model

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
KERNELS = {"default": {}, "pinned to AVX2": PINNED}


def train_once(prepared: Path, steps: int, pinned: dict[str, str]) -> dict:
    """The weights' sha256 and tokens/s of one training in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(Path("conf"), Path(folder) / "conf")  # headstudy runs in a project's root
        env = {**os.environ, **pinned, "MLFLOW_TRACKING_URI": f"sqlite:///{folder}/mlflow.db"}
        command = [
            str(Path(sys.executable).parent / "headstudy"),  # this environment's, activated or not
            "train",
            "model=course",
            "variant=4",
            "seed=0",
            "threads=1",
            f"trainer.max_steps={steps}",
            f"trainer.val_every_steps={steps}",
            f"paths.prepared={prepared.resolve()}",
            "paths.models=trained",
            "paths.metrics=measured",
        ]
        trained = subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True, text=True)
        [run_file] = Path(folder).glob("trained/*/run.json")
        [speed] = re.findall(r"^train: \S+: ([\d,]+) tokens/s, weights", trained.stdout, re.MULTILINE)
        weights = json.loads(run_file.read_text())["weights_sha256"]
        return {"sha256": weights, "tokens_per_sec": int(speed.replace(",", ""))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args()
    info = cpu_info()
    cpu = f"{cpu_model()} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"
    print(f"{arguments.steps} steps of the course model, 4 heads, seed 0, one thread, torch {torch.__version__}")
    print("| CPU | PyTorch's capability | kernels | weights sha256 | same on every repeat | tokens/s |")
    print("|---|---|---|---|---|---|")
    for kernels, pinned in KERNELS.items():
        runs = [train_once(arguments.prepared, arguments.steps, pinned) for _ in range(arguments.repeats)]
        hashes = {run["sha256"] for run in runs}
        speed = statistics.median(run["tokens_per_sec"] for run in runs)
        capability = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
            env={**os.environ, **pinned},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(
            f"| {cpu} | {capability} | {kernels} | {runs[0]['sha256'][:16]} | "
            f"{'yes' if len(hashes) == 1 else 'no'} | {speed:,.0f} |"
        )


if __name__ == "__main__":
    main()
