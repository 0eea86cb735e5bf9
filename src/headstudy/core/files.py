"""Writing results: never half a file, never NaN, and never over the pipeline's own outputs
from outside the pipeline."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from omegaconf import DictConfig

from headstudy.core.config import ConfigError, project_root

# The folders dvc.yaml writes, under the project root and under every studies/NAME folder.
PIPELINE_OUTPUTS = {"prepared": "data/prepared", "models": "models", "metrics": "metrics"}


def write_atomically(path: Path, text: str) -> None:
    """Write beside the target, then rename over it: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def write_json(path: Path, data) -> None:
    """The one JSON writer for results: NaN and Infinity are not JSON, and a result that holds
    them is wrong, so it is refused before anything is written."""
    bad = non_finite(data)
    if bad:
        raise ConfigError(f"{path}: refusing to write non-finite numbers ({', '.join(bad)}): "
                          "the computation that produced them went wrong")
    write_atomically(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def non_finite(data, where: str = "") -> list[str]:
    """`key.subkey=nan` for every non-finite float inside data."""
    if isinstance(data, float):
        return [] if math.isfinite(data) else [f"{where or 'value'}={data}"]
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, (list, tuple)):
        items = enumerate(data)
    else:
        return []
    return [bad for key, value in items for bad in non_finite(value, f"{where}.{key}" if where else str(key))]


def refuse_pipeline_outputs(config: DictConfig, *keys: str) -> None:
    """Outside `dvc repro`, refuse to write where the pipeline keeps its outputs: a manual run
    with other settings would replace them under a name that then means something else.
    DVC sets DVC_STAGE for every stage it runs."""
    if "DVC_STAGE" in os.environ:
        return
    root = project_root()
    owners = [root, *sorted(path for path in (root / "studies").glob("*") if path.is_dir())]
    clashes = []
    for key in keys:
        target = Path(config.paths[key]).resolve()
        for owner in owners:
            output = (owner / PIPELINE_OUTPUTS[key]).resolve()
            if target == output or output in target.parents:
                clashes.append(key)
                break
    if clashes:
        given = " ".join(f"paths.{key}={config.paths[key]}" for key in clashes)
        wanted = " ".join(f"paths.{key}=..." for key in clashes)
        raise ConfigError(f"{given}: the pipeline's own output, written only by `dvc repro`; "
                          f"for a run by hand pass {wanted} (another folder), or run `dvc repro`")
