"""Which machine trained a model, recorded in the study's trained-on.json (formats/machines.py)
when a stage of its pipeline trains it: the CPU kind, PyTorch's CPU capability, the torch build,
the thread count, the kernel selectors in force and the accelerator. No output depends on it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from headstudy.bookkeeping.provenance import cpu_info, cpu_model, in_pipeline
from headstudy.common.files import write_atomically
from headstudy.execution import locks
from headstudy.execution.jobs import torch_threads
from headstudy.execution.kernels import PINNED
from headstudy.formats.machines import TRAINED_ON, read_record
from headstudy.formats.trained import model_dir

# Two trainings of one study end at about the same time in two lanes: the record is rewritten by one
# at a time; a writer waits at most this long for the other.
RECORD_WAIT_S = 60
KERNEL_SELECTORS = sorted(PINNED["avx2"])


def this_machine(threads: int, accelerator: str = "cpu") -> dict:
    """What decides the last bits of a training here, as the record keeps it."""
    import torch

    info = cpu_info()

    def number(key: str) -> int | None:
        return int(info[key]) if info.get(key, "").isdigit() else None

    return {
        "cpu": cpu_model(),
        "vendor": info.get("vendor_id"),
        "family": number("cpu family"),
        "model": number("model"),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": threads,
        "kernel_selectors": {key: os.environ.get(key, "default") for key in KERNEL_SELECTORS},
        "accelerator": torch.cuda.get_device_name() if accelerator != "cpu" and torch.cuda.is_available() else "none",
        "source": "training",
    }


def record_training(folder: Path, name: str, weights_sha256: str, machine: dict) -> None:
    """Put `machine` on record for model `name` of the study in `folder`."""
    path = Path(folder) / TRAINED_ON
    with locks.exclusive(
        path.with_name(f".{TRAINED_ON}.lock"),
        RECORD_WAIT_S,
        unmade=lambda reason: f"cannot write beside {path} ({reason})",
        held=lambda: f"{path} is held by another training for over {RECORD_WAIT_S} s",
        remove=False,
    ):
        record = read_record(folder)
        entry = record["models"].get(name)
        if not isinstance(entry, dict) or entry.get("weights_sha256") != weights_sha256:
            entry = {"weights_sha256": weights_sha256, "machines": []}
        if machine not in entry["machines"]:
            entry["machines"].append(machine)
        record["models"][name] = entry
        record["models"] = dict(sorted(record["models"].items()))
        write_atomically(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def record_trained_model(config) -> None:
    """After `train` in a study's pipeline, on its first process: the model's machine on record in
    the study's folder (where DVC runs the stage). A training by hand stands alone, as in MLflow."""
    run_file = model_dir(config) / "run.json"
    if not in_pipeline() or os.environ.get("RANK", "0") != "0" or not run_file.is_file():
        return
    weights = json.loads(run_file.read_text())["weights_sha256"]
    record_training(
        Path.cwd(), config.name, weights, this_machine(torch_threads(config.threads), config.trainer.accelerator)
    )
