"""Accuracy at the answer positions of a generated task, and where each head looks from there.

Each test query is scored in the window of `context` tokens that ends at the query, so that
every clue of it lies in the window and the model predicts the answer from its last position.
In a one-layer model the prediction at that position sees earlier tokens only through the
attention of that position, so its attention row says exactly which clues each head reads:
the share of each head's weight on the latest token of each clue type (the clue itself), and
on the older tokens of the same type (which the answer does not depend on).
"""

from __future__ import annotations

import numpy as np
import torch

from headstudy.analysis.measures.capture import capturing
from headstudy.common.errors import ConfigError
from headstudy.weights.model import Decoder

# A head focuses on a clue when it puts most of its weight, more than half, on that one token.
FOCUS = 0.5


def query_windows(
    tokens: np.ndarray, queries: np.ndarray, clue_positions: np.ndarray, context: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(windows (n, context), clue columns in the window (n, k), the index of each kept query):
    the window ending at each query whose clues all lie within `context` tokens of it."""
    starts = np.asarray(queries) - context + 1
    columns = np.asarray(clue_positions) - starts[:, None]
    kept = np.flatnonzero((starts >= 0) & (columns >= 0).all(axis=1))
    windows = np.asarray(tokens)[starts[kept, None] + np.arange(context)].astype(np.int64)
    return windows, columns[kept], kept


@torch.no_grad()
def predict_at_queries(
    model: Decoder, windows: np.ndarray, answers: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: whether the most likely next token is the answer, the answer's NLL in nats,
    and the attention of the last position in every layer, (n, layers, heads, context)."""
    model.eval()
    correct, nll, rows = [], [], []
    with capturing(model) as layers:
        for first in range(0, len(windows), batch_size):
            inputs = torch.from_numpy(windows[first : first + batch_size])
            target = torch.from_numpy(np.asarray(answers[first : first + batch_size], dtype=np.int64))
            logits = model(inputs)[:, -1]  # (B, vocab): the prediction after the query
            correct.append((logits.argmax(-1) == target).numpy())
            nll.append(torch.nn.functional.cross_entropy(logits, target, reduction="none").numpy())
            rows.append(torch.stack([layer.captured_weights[:, :, -1, :] for layer in layers], 1).numpy())
    return np.concatenate(correct), np.concatenate(nll), np.concatenate(rows)


def clue_weights(
    weights: np.ndarray, clue_columns: np.ndarray, window_types: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per query, head and clue i: the weight on clue i (the latest token of type i), and the
    weight on the older tokens of type i in the window.

    weights (n, heads, context): each head's attention from the query; clue_columns (n, k);
    window_types (n, context): the clue type of every token in the window, -1 for no clue."""
    n, _, context = weights.shape
    k = clue_columns.shape[1]
    on_clue = np.take_along_axis(weights, clue_columns[:, None, :], axis=2)  # (n, heads, k)
    same_type = window_types[:, None, :] == np.arange(k)[None, :, None]  # (n, k, context)
    on_type = np.einsum("nht,nkt->nhk", weights, same_type.astype(weights.dtype))
    return on_clue, on_type - on_clue


def clue_attention(weights: np.ndarray, clue_columns: np.ndarray, window_types: np.ndarray) -> dict:
    """Where the heads of one layer look, over all queries:
    share[h][i]: mean weight head h puts on clue i; older[h][i]: on the older tokens of clue i's
    type; best[i]: the mean over queries of the largest weight any head puts on clue i;
    focused: the mean number of clues that get most of some head's weight (> FOCUS), which, as
    a head can give most of its weight to one token only, counts clues read by heads of their
    own; focused_by_head[h]: how often head h gives most of its weight to some clue."""
    on_clue, older = clue_weights(weights, clue_columns, window_types)
    return {
        "share": on_clue.mean(0).tolist(),
        "older": older.mean(0).tolist(),
        "best": on_clue.max(1).mean(0).tolist(),
        "focused": float((on_clue.max(1) > FOCUS).sum(1).mean()),
        "focused_by_head": (on_clue.max(2) > FOCUS).mean(0).tolist(),
    }


def score_queries(model: Decoder, tokens: np.ndarray, key: dict[str, np.ndarray], batch_size: int) -> dict:
    """Accuracy and mean answer NLL over the test queries, and the clue attention of every layer."""
    windows, columns, kept = query_windows(tokens, key["queries"], key["clue_positions"], model.config.context)
    if not len(kept):
        raise ConfigError(
            f"no test query has all its clues within model.context={model.config.context} tokens "
            "of it: set data.segment_max below model.context"
        )
    answers = key["answers"][kept]
    correct, nll, rows = predict_at_queries(model, windows, answers, batch_size)
    types = key["token_types"][windows]
    return {
        "queries": len(kept),
        "accuracy": float(correct.mean()),
        "answer_nll": float(nll.mean()),
        "layers": [clue_attention(rows[:, layer], columns, types) for layer in range(rows.shape[1])],
    }
