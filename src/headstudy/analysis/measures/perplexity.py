"""Perplexity over a whole token stream: every token after the first predicted exactly once."""

from __future__ import annotations

import math

import numpy as np
import torch

from headstudy.weights.batches import stream_batches
from headstudy.weights.model import Decoder, next_token_loss


@torch.no_grad()
def stream_nll(model: Decoder, tokens: np.ndarray, batch_size: int) -> tuple[float, int]:
    """Total NLL (nats) and number of predicted tokens over the whole stream."""
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in stream_batches(tokens, model.config.context, batch_size):
        total += next_token_loss(model(inputs), targets, reduction="sum").item()
        count += targets.numel()
    return total, count


def perplexity(total_nll: float, count: int) -> float:
    """exp(mean NLL); infinite rather than an OverflowError for a model that has diverged."""
    try:
        return math.exp(total_nll / count)
    except OverflowError:
        return math.inf
