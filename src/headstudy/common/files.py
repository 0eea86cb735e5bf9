"""Writing and reading results: never half a file or folder, never NaN."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headstudy.common.errors import ConfigError, first_line

STAGING_SUFFIX = ".partial"


def staging_path(target: Path) -> Path:
    """Where `target` is written before it takes its name: NAME.partial beside it."""
    target = Path(target)
    return target.with_name(target.name + STAGING_SUFFIX)


@contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A fresh folder to fill; when the block ends without error it replaces `target` whole, and
    on any error (an interrupt included) it is removed: readers see the old folder or the new one."""
    staging = staging_path(target)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def write_atomically(path: Path, text: str) -> None:
    """Write beside the target, then rename over it: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = staging_path(path)
    try:
        partial.write_text(text)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)


def write_json(path: Path, data) -> None:
    """The one JSON writer for results: NaN and Infinity are not JSON, and a result that holds
    them is wrong, so it is refused before anything is written."""
    bad = non_finite(data)
    if bad:
        raise ConfigError(
            f"{path}: refusing to write non-finite numbers ({', '.join(bad)}): "
            "the computation that produced them went wrong"
        )
    write_atomically(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def write_failed(what: str, folder: Path, error: Exception, remedy: str) -> ConfigError:
    """A write that failed, as one line with the room left where it went: a full disk, which
    torch.save reports as a RuntimeError and Python as an OSError."""
    free = shutil.disk_usage(folder).free
    return ConfigError(f"writing {what} failed ({first_line(error)}; {free:,} bytes free there): {remedy}")


def read_json(path: Path, remedy: str = "run `dvc repro` to write it again"):
    """The one JSON reader for results: a missing file, invalid JSON, or NaN and Infinity (which
    write_json never writes) are refused in one line that names the file and the remedy."""
    path = Path(path)

    def refuse(constant: str):
        raise ValueError(f"it holds {constant}")

    if not path.is_file():
        raise ConfigError(f"{path} not found: {remedy}")
    try:
        return json.loads(path.read_text(), parse_constant=refuse)
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({error}): {remedy}") from None


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
