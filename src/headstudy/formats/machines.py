"""The record of which machine trained each model of a study: `trained-on.json` beside the study's
dvc.lock, committed with it. It is kept apart from the model folders, whose files two bit-identical
trainings on different machines must write alike: the same weights trained on a second machine add
that machine to the model's list; other weights start it anew. The train stage keeps it
(bookkeeping/machines.py); the report names the machine kinds behind its models."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

TRAINED_ON = "trained-on.json"


def read_record(folder: Path) -> dict:
    """The study's record, or an empty one where it has none; a file that is not the record's JSON
    is refused in one line naming it."""
    path = Path(folder) / TRAINED_ON
    if not path.is_file():
        return {"models": {}}
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not JSON ({error}): restore it with `git checkout {path}`") from None
    if not isinstance(record, dict) or not isinstance(record.get("models"), dict):
        raise ValueError(f"{path}: expected an object with a `models` map, restore it with `git checkout {path}`")
    return record


def machine_kind(machine: dict) -> str:
    """A machine as its CPU kind, the unit of bit-identical training: `AMD EPYC (family 25, model 17)`."""
    cpu = machine.get("cpu") or "unknown CPU"
    if machine.get("family") is None:
        return cpu
    return f"{cpu} (family {machine['family']}, model {machine.get('model', '?')})"


def kinds_of(record: dict, models: list[str]) -> Counter:
    """How many of `models` each machine kind trained (a model trained bit for bit on two kinds
    counts for both); `not on record` for a model the record lacks."""
    counted = Counter()
    for name in models:
        entry = record["models"].get(name)
        machines = entry.get("machines", []) if isinstance(entry, dict) else []
        for kind in {machine_kind(machine) for machine in machines} or {"not on record"}:
            counted[kind] += 1
    return counted


def trained_on_line(record: dict, models: list[str]) -> str:
    """`Trained on: AMD EPYC (family 25, model 17), 30 models.`; where the record holds a model's
    machine from the project's dated record rather than from the training, it says so."""
    counted = kinds_of(record, models)
    parts = [f"{kind}, {count} model{'s' if count != 1 else ''}" for kind, count in sorted(counted.items())]
    sources = {
        machine.get("source")
        for name in models
        for machine in (record["models"].get(name) or {}).get("machines", [])
        if machine.get("source") != "training"
    }
    note = f" (from {'; '.join(sorted(s for s in sources if s))})" if sources - {None} else ""
    return f"Trained on: {'; '.join(parts)}{note}."
