"""A GPT-style decoder in plain PyTorch, built from its ModelConfig (weights/settings.py): one module
per concept, init spelled out.

It knows nothing of Lightning, Hydra or MLflow, so it can be read, counted and tested alone.
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from headstudy.weights.settings import ModelConfig


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.head_width = config.width // config.n_heads
        self.query_key_value = nn.Linear(config.width, 3 * config.width, bias=False)
        self.output_projection = (
            nn.Linear(config.width, config.width, bias=True) if config.has_output_projection else None
        )
        self.query_norm = nn.RMSNorm(self.head_width) if config.qk_norm else None
        self.key_norm = nn.RMSNorm(self.head_width) if config.qk_norm else None
        causal = torch.ones(config.context, config.context, dtype=torch.bool).tril()
        self.register_buffer("causal_mask", causal, persistent=False)
        # Off unless asked, so training pays nothing for inspection.
        self.capture_weights = False
        self.captured_weights: torch.Tensor | None = None
        # One multiplier per head, or None: zeroing a head ablates its output.
        self.head_mask: torch.Tensor | None = None

    def queries_keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each head's queries, keys and values of input x (B, T, C): each (B, H, T, D), D = C / H."""
        batch, length, width = x.shape
        q, k, v = self.query_key_value(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.n_heads, self.head_width).transpose(1, 2) for t in (q, k, v))
        if self.query_norm is not None:
            q, k = self.query_norm(q), self.key_norm(k)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape  # (B, T, C)
        q, k, v = self.queries_keys_values(x)
        if self.capture_weights:
            heads = self.explicit_attention(q, k, v)
        else:  # the fused kernel: same maths, no (T, T) weights kept for backward
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        if self.head_mask is not None:
            heads = heads * self.head_mask.view(1, -1, 1, 1)
        y = heads.transpose(1, 2).reshape(batch, length, width)  # (B, T, C): heads side by side
        return y if self.output_projection is None else self.output_projection(y)

    def explicit_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention written out, keeping the weights (B, H, T, T) for inspection."""
        length = q.shape[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_width)  # (B, H, T, T)
        scores = scores.masked_fill(~self.causal_mask[:length, :length], float("-inf"))
        weights = scores.softmax(dim=-1)
        self.captured_weights = weights.detach()
        return weights @ v  # (B, H, T, D)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.expand = nn.Linear(config.width, config.mlp_hidden)
        self.contract = nn.Linear(config.mlp_hidden, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.contract(F.gelu(self.expand(x)))


class Block(nn.Module):
    """Pre-norm: normalise, transform, add back to the residual stream."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.width)
        self.attention = CausalSelfAttention(config)
        self.mlp_norm = nn.RMSNorm(config.width)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.width)
        self.position_embedding = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.RMSNorm(config.width)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # PyTorch's default N(0, 1) embedding, tied to the output, starts with a loss near 88
        # and never recovers; a small init is what makes the tied model train.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def attention_layers(self) -> list[CausalSelfAttention]:
        return [block.attention for block in self.blocks]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of the next token at every position, shape (batch, length, vocab)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        # The output layer is the token embedding itself (tied weights, no bias).
        return self.final_norm(x) @ self.token_embedding.weight.T


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy in nats over every position: the mean for training, the sum for perplexity."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)


def parameter_breakdown(model: Decoder) -> dict[str, int]:
    """Parameter count per top-level part; tied weights are counted once."""
    parts: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # named_parameters skips tied duplicates
        part = name.split(".")[0]
        if part == "blocks":
            part = ".".join(name.split(".")[:3])
        parts[part] = parts.get(part, 0) + parameter.numel()
    return parts


def weights_sha256(model: nn.Module) -> str:
    """sha256 over every state_dict tensor, in name order: equal only for bit-identical weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
