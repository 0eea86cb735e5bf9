"""A stand-in model for the measures that see only attention weights (the spotlight coverage
and its nulls): its heads attend as hand-made patterns say, whatever the tokens."""

from types import SimpleNamespace

import torch


class FixedAttention(torch.nn.Module):
    """A stand-in model with one attention layer whose heads attend as the given patterns say,
    whatever the tokens: the spotlight measures see only attention weights."""

    def __init__(self, *patterns, context: int = 32):
        super().__init__()
        self.patterns = patterns
        self.config = SimpleNamespace(context=context, n_layers=1)
        self.attention_layers = [SimpleNamespace(capture_weights=False, captured_weights=None)]

    def forward(self, tokens: torch.Tensor) -> None:
        weights = torch.stack([pattern(tokens.shape[1]) for pattern in self.patterns])  # (H, T, T)
        self.attention_layers[0].captured_weights = weights.expand(tokens.shape[0], -1, -1, -1)
