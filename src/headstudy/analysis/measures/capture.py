"""Attention weights as the model's own forward computes them, captured for the length of a
`with` block: the one way the analyses read attention (no second copy of the attention maths)."""

from __future__ import annotations

from headstudy.weights.model import Decoder


class capturing:
    """Weight capture on in every attention layer, off again afterwards (the model's own
    forward computes the weights: no second copy of the attention maths)."""

    def __init__(self, model: Decoder):
        self.layers = model.attention_layers

    def __enter__(self):
        for layer in self.layers:
            layer.capture_weights = True
        return self.layers

    def __exit__(self, *exc):
        for layer in self.layers:
            layer.capture_weights, layer.captured_weights = False, None
