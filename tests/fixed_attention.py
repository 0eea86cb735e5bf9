"""A stand-in model for the measures that see only attention weights (the spotlight coverage
and its nulls): its heads attend as hand-made patterns say, whatever the tokens."""

import math
from types import SimpleNamespace

import numpy as np
import torch

from headstudy.analysis.measures.attention import attention_measures, captured_windows


class FixedAttention(torch.nn.Module):
    """A stand-in model with one attention layer whose heads attend as the given patterns say,
    whatever the tokens: the spotlight measures see only attention weights."""

    def __init__(self, *patterns, context: int = 32):
        super().__init__()
        self.patterns = patterns
        self.config = SimpleNamespace(context=context, n_layers=1, n_heads=len(patterns))
        self.attention_layers = [SimpleNamespace(capture_weights=False, captured_weights=None)]

    def forward(self, tokens: torch.Tensor) -> None:
        weights = torch.stack([pattern(tokens.shape[1]) for pattern in self.patterns])  # (H, T, T)
        self.attention_layers[0].captured_weights = weights.expand(tokens.shape[0], -1, -1, -1)


def union_coverage(models: list, groups: list[tuple[int, ...]], tokens, batch_size: int, thresholds) -> np.ndarray:
    """The reference the nulls' fast counts are checked against, counted the slow way: per group
    of models, per layer and threshold, the mean over query positions t >= 1 of the positions
    that get more than the threshold from at least one head of at least one model of the group."""
    layers = models[0].config.n_layers
    totals = np.zeros((len(groups), layers, len(thresholds)))
    queries = 0
    for weights in captured_windows(models, tokens, batch_size):
        queries += weights[0][0].shape[0] * weights[0][0].shape[2]
        for layer in range(layers):
            for column, threshold in enumerate(thresholds):
                above = [(per_model[layer] > threshold).any(dim=1) for per_model in weights]
                for index, group in enumerate(groups):
                    totals[index, layer, column] += torch.stack([above[m] for m in group]).any(dim=0).sum().item()
    return totals / queries


def random_attention(seed: int):
    """A head whose causal attention is a seeded random softmax: weights spread over a few
    positions, so that thresholds between 0.1 and 0.5 cut them differently."""

    def pattern(length: int) -> torch.Tensor:
        logits = 3 * torch.randn(length, length, generator=torch.Generator().manual_seed(seed))
        causal = torch.ones(length, length).tril().bool()
        return logits.masked_fill(~causal, -math.inf).softmax(-1)

    return pattern


def with_coverage(models: list[dict], tokens, batch_size: int, thresholds) -> list[dict]:
    """Each model as inspect hands it to the single-head null: with its Coverage at the thresholds."""
    return [
        {**entry, "coverage": attention_measures(entry["model"], tokens, batch_size, 0.2, thresholds)[2]}
        for entry in models
    ]
