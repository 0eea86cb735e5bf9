"""The two ways the models read a token stream: training draws random windows, a pure function of
(seed, step); evaluation walks the whole stream once."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


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


def stream_batches(tokens: np.ndarray, context: int, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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
