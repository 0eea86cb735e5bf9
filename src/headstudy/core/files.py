"""Writing results so that a crash never leaves half a file behind."""

from __future__ import annotations

from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Write beside the target, then rename over it: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
