"""Writing results: never half a file, never NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

from headstudy.formats.errors import ConfigError


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
