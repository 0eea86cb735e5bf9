"""What the diagnosis stage watches while a model trains as `train` trains it, and the one thing
it may change: gradient clipping by global norm, the stabiliser arm.

Only `headstudy diagnose` imports this module, so nothing here is in the train stage's code.
Without clipping the watcher changes no weight: it reads the loss and the gradients, and measures
the attention of a fixed validation batch under no_grad, in eval mode (the model has no dropout;
the mode is restored all the same), drawing no random number."""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from headstudy.weights.model import CausalSelfAttention, Decoder


def attention_scores(layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The layer's pre-softmax scores q.k / sqrt(d) of input x (B, T, C), as its forward
    computes them: (B, H, T, T), the future not yet masked."""
    q, k, _ = layer.queries_keys_values(x)
    return (q @ k.transpose(-2, -1)) / math.sqrt(layer.head_width)


def attention_statistics(scores: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per head, from causal scores (B, H, T, T): the entropy of the attention weights in nats,
    averaged over every query position of every window (the first position, with one key to
    look at, counts with entropy 0), and the largest score that the softmax sees (future keys
    left out)."""
    length = scores.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=scores.device).tril()
    masked = scores.masked_fill(~causal, float("-inf"))
    weights = masked.softmax(dim=-1)
    entropy = -torch.special.xlogy(weights, weights).sum(dim=-1)  # (B, H, T); 0 log 0 = 0
    largest = masked.amax(dim=(0, 2, 3))
    return entropy.mean(dim=(0, 2)).tolist(), largest.tolist()


def probe_attention(model: Decoder, inputs: torch.Tensor) -> dict[str, float]:
    """Each attention layer's entropy and largest score per head on `inputs`, from one no-grad
    forward pass in eval mode: columns entropy_lL_hH and max_logit_lL_hH."""
    layers = model.attention_layers
    inputs_of: dict[int, torch.Tensor] = {}
    hooks = [
        layer.register_forward_pre_hook(lambda _layer, args, index=index: inputs_of.__setitem__(index, args[0]))
        for index, layer in enumerate(layers)
    ]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(inputs)
            measured = {}
            for index, layer in enumerate(layers):
                entropy, largest = attention_statistics(attention_scores(layer, inputs_of[index]))
                for head, (head_entropy, head_largest) in enumerate(zip(entropy, largest, strict=True)):
                    measured[f"entropy_l{index}_h{head}"] = head_entropy
                    measured[f"max_logit_l{index}_h{head}"] = head_largest
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return measured


def gradient_norm(parameters: list[nn.Parameter]) -> torch.Tensor:
    """The global L2 norm of the gradients, as clip_grad_norm_ measures it."""
    return torch.nn.utils.get_total_norm([parameter.grad for parameter in parameters if parameter.grad is not None])


class TrainingWatcher(L.Callback):
    """Every step: the batch's training loss, the learning rate it stepped with, the global
    gradient norm before the optimizer step (before clipping, where the arm clips); every
    `probe_every` steps, and before the first and after the last, the attention of `probe`.

    Rows are keyed by steps done: row s holds the s-th update's loss, learning rate and gradient
    norm, and the attention of the model after s updates (row 0: the initial model only)."""

    def __init__(self, probe: torch.Tensor, probe_every: int, clip_grad_norm: float | None = None):
        self.probe = probe
        self.probe_every = probe_every
        self.clip_grad_norm = clip_grad_norm
        self.rows: dict[int, dict[str, float]] = {}

    def row(self, step: int) -> dict[str, float]:
        return self.rows.setdefault(step, {})

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_step == 0:
            self.probe_at(0, pl_module)

    def on_before_optimizer_step(self, trainer, _pl_module, optimizer) -> None:
        parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
        if self.clip_grad_norm is None:
            norm = gradient_norm(parameters)
        else:  # returns the norm it measured before scaling the gradients down
            norm = torch.nn.utils.clip_grad_norm_(parameters, self.clip_grad_norm)
        row = self.row(trainer.global_step + 1)  # the update about to be made
        row["grad_norm"] = norm.item()
        row["lr"] = optimizer.param_groups[0]["lr"]

    def on_train_batch_end(self, trainer, pl_module, _outputs, _batch, _batch_index) -> None:
        step = trainer.global_step  # updates made, this one included
        self.row(step)["loss"] = pl_module.latest_loss.item()
        if step % self.probe_every == 0 or step == trainer.max_steps:
            self.probe_at(step, pl_module)

    def probe_at(self, step: int, pl_module) -> None:
        self.row(step).update(probe_attention(pl_module.model, self.probe.to(pl_module.device)))

    def table(self) -> tuple[list[str], list[list[float | None]]]:
        """Columns and rows by step; a value not measured at a step is None."""
        columns = ["loss", "lr", "grad_norm"]
        for row in self.rows.values():
            columns += [key for key in row if key not in columns]
        return ["step", *columns], [
            [step, *(self.rows[step].get(key) for key in columns)] for step in sorted(self.rows)
        ]
