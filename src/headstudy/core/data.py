"""The prepared data on disk, and the two ways the models read it.

Training draws random windows; evaluation walks the whole stream once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

SPLITS = ("train", "valid", "test")
TOKENIZER_FILE = "tokenizer.json"
STATS_FILE = "stats.json"


def tokens_path(prepared: Path, split: str) -> Path:
    return Path(prepared) / f"{split}.npy"


def load_tokens(prepared: Path, split: str) -> np.ndarray:
    path = tokens_path(prepared, split)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run the prepare stage first (dvc repro prepare)")
    return np.load(path, mmap_mode="r")


def load_stats(prepared: Path) -> dict:
    return json.loads((Path(prepared) / STATS_FILE).read_text())


def training_batch(
    tokens: np.ndarray, batch_size: int, context: int, seed: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of training step `step`: a pure function of (seed, step).

    Nothing hidden in a sampler decides it, so a run resumed at step k draws exactly the
    batches that an uninterrupted run draws.
    """
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - context, size=batch_size)
    windows = np.asarray(tokens[starts[:, None] + np.arange(context + 1)], dtype=np.int64)
    windows = torch.from_numpy(windows)
    return windows[:, :-1], windows[:, 1:]


def stream_batches(
    tokens: np.ndarray, context: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping windows over the whole stream: every token after the first is a target
    exactly once. Full windows come in batches; a shorter tail window comes last, alone."""
    stream = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    targets = len(stream) - 1
    full_windows = targets // context
    for first in range(0, full_windows, batch_size):
        count = min(batch_size, full_windows - first)
        chunk = stream[first * context : (first + count) * context + 1]
        inputs = chunk[:-1].view(count, context)
        labels = chunk[1:].view(count, context)
        yield inputs, labels
    tail = targets - full_windows * context
    if tail:
        start = full_windows * context
        yield stream[start : start + tail].view(1, -1), stream[start + 1 :].view(1, -1)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepared_digest(prepared: Path) -> str:
    """sha256 over every prepared file's name and content, in name order."""
    digest = hashlib.sha256()
    for path in sorted(Path(prepared).rglob("*")):
        if path.is_file():
            digest.update(f"{path.relative_to(prepared).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()
