"""The causal check of "one head per clue": zero each head of a one-layer model in turn and see
which clues' digits of the answer it takes with it.

An answer token of the multi-clue task is k digits, one per clue, the first clue's value the
leading digit (tasks/multiclue.py, `Layout.answer_id`). At each test query, in the window that
ends at it (analysis/measures/clues.py), the model's next-token probabilities over the values**k answer
tokens give one distribution per digit j: the sum of the probabilities of the answer tokens whose
j-th digit is v. Digit j's prediction is the most likely v; its accuracy is the share of queries
where that is the value of clue j. Chance per digit is 1/values. Whole-answer accuracy is the
score stage's: the most likely next token of the whole vocabulary is the answer.

Zeroing head h (its output multiplied by 0, `CausalSelfAttention.head_mask`) and measuring
again gives the drop of each digit's accuracy, `clean - ablated`. A head reads clue j when
zeroing it takes digit j at least DROP_SHARE of the way from its unablated accuracy to chance.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from headstudy.analysis.measures.clues import query_windows
from headstudy.common.errors import ConfigError
from headstudy.weights.model import CausalSelfAttention, Decoder

# Zeroing a head takes digit j when its accuracy falls at least half the way from its unablated
# value to chance: a head that reads clue j alone should take it all the way.
DROP_SHARE = 0.5


def answer_block(task: dict, vocab_size: int) -> tuple[int, int, int]:
    """(first answer token id, clues, values) of the prepared task's k-clue answer tokens, which
    are the ids first .. first + values**clues - 1 (prepare writes them into task.json)."""
    missing = [key for key in ("first_answer", "answer_tokens", "values") if key not in task]
    if missing:
        raise ConfigError(f"task.json lacks {', '.join(missing)}: prepare the data again")
    first, count, clues, values = (int(task[key]) for key in ("first_answer", "answer_tokens", "clues", "values"))
    if count != values**clues or first < 0 or first + count > vocab_size:
        raise ConfigError(
            f"task.json's answer tokens ({count} from id {first}) are not the {values}**{clues} answers of "
            f"{clues} clues within the vocabulary of {vocab_size}: prepare the data again"
        )
    return first, clues, values


def answer_digits(index: np.ndarray, clues: int, values: int) -> np.ndarray:
    """(n, clues): the digits of each answer's index within its block, the first clue's first."""
    return np.stack(np.unravel_index(np.asarray(index), (values,) * clues), axis=1)


def digit_marginals(probabilities: np.ndarray, clues: int, values: int) -> np.ndarray:
    """(n, clues, values): per query, digit j and value v, the summed probability of the answer
    tokens whose j-th digit is v; probabilities is (n, values**clues), in the answer block's order."""
    grid = np.asarray(probabilities).reshape(-1, *(values,) * clues)
    return np.stack(
        [grid.sum(axis=tuple(1 + other for other in range(clues) if other != digit)) for digit in range(clues)],
        axis=1,
    )


def digit_accuracy(probabilities: np.ndarray, digits: np.ndarray, values: int) -> list[float]:
    """Per digit: the share of queries whose most likely value (of its marginal) is the true one."""
    predicted = digit_marginals(probabilities, digits.shape[1], values).argmax(axis=2)
    return (predicted == digits).mean(axis=0).tolist()


def readers(clean: list[float], ablated: list[list[float]], chance: float) -> tuple[list[dict], int]:
    """Which head each clue depends on, from digit accuracies without ablation (clues,) and with
    each head zeroed (heads, clues).

    reader[j]: the head whose zeroing lowers digit j's accuracy the most (the lowest-numbered of
    equals), that drop, and whether it is clue j's own reader. Zeroing head h *takes* digit i
    when digit i is above chance unablated and drops by at least DROP_SHARE * (clean[i] - chance).
    Clue j has an own reader when its top head takes digit j and no other digit. own_readers, the
    number of such clues, is k for a model with one head per clue, and 0 for a model with one
    head and k >= 2, whose only head takes every digit it had learned."""
    clean_accuracy = np.asarray(clean, dtype=float)
    drops = clean_accuracy[None, :] - np.asarray(ablated, dtype=float)  # (heads, clues)
    needed = DROP_SHARE * (clean_accuracy - chance)
    takes = (clean_accuracy > chance)[None, :] & (drops >= needed[None, :])
    found = []
    for clue in range(len(clean_accuracy)):
        head = int(drops[:, clue].argmax())
        own = bool(takes[head, clue] and takes[head].sum() == 1)
        found.append({"clue": clue, "head": head, "drop": float(drops[head, clue]), "own": own})
    return found, sum(reader["own"] for reader in found)


@contextmanager
def zeroed_head(attention: CausalSelfAttention, head: int) -> Iterator[None]:
    """Within the block, the head's output is zero; afterwards the layer runs unmasked again."""
    mask = torch.ones(attention.n_heads)
    mask[head] = 0.0
    attention.head_mask = mask
    try:
        yield
    finally:
        attention.head_mask = None


@torch.no_grad()
def answer_probabilities(
    model: Decoder, windows: np.ndarray, answers: np.ndarray, first: int, count: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the next-token probabilities of the answer block (n, count), and whether the
    most likely token of the whole vocabulary is the answer (n,)."""
    model.eval()
    probabilities, correct = [], []
    for start in range(0, len(windows), batch_size):
        logits = model(torch.from_numpy(windows[start : start + batch_size]))[:, -1]  # after the query
        probabilities.append(logits.softmax(-1)[:, first : first + count].numpy())
        correct.append((logits.argmax(-1).numpy() == answers[start : start + batch_size]))
    return np.concatenate(probabilities), np.concatenate(correct)


def ablate_heads(model: Decoder, tokens: np.ndarray, key: dict[str, np.ndarray], task: dict, batch_size: int) -> dict:
    """Digit and answer accuracy over the test queries with no head zeroed and with each head of
    the model's one layer zeroed in turn, and each clue's reader (see `readers`)."""
    if model.config.n_layers != 1:
        raise ConfigError(
            f"ablate measures one-layer models, whose query position sees the clues only through its "
            f"heads; this model has model.n_layers={model.config.n_layers}"
        )
    first, clues, values = answer_block(task, model.config.vocab_size)
    windows, _, kept = query_windows(tokens, key["queries"], key["clue_positions"], model.config.context)
    if not len(kept):
        raise ConfigError(
            f"no test query has all its clues within model.context={model.config.context} tokens "
            "of it: set data.segment_max below model.context"
        )
    answers = np.asarray(key["answers"][kept], dtype=np.int64)
    if ((answers < first) | (answers >= first + values**clues)).any():
        raise ConfigError(f"a test answer is no answer token of {clues} clues: prepare the data again")
    digits = answer_digits(answers - first, clues, values)

    def measured() -> dict:
        probabilities, correct = answer_probabilities(model, windows, answers, first, values**clues, batch_size)
        return {
            "digit_accuracy": digit_accuracy(probabilities, digits, values),
            "answer_accuracy": float(correct.mean()),
        }

    clean = measured()
    [attention] = model.attention_layers
    ablated = []
    for head in range(attention.n_heads):
        with zeroed_head(attention, head):
            ablated.append({"head": head, **measured()})
    chance = 1 / values
    found, own = readers(clean["digit_accuracy"], [row["digit_accuracy"] for row in ablated], chance)
    return {
        "clues": clues,
        "values": values,
        "chance_digit": chance,
        "queries": len(kept),
        **clean,
        "ablated": ablated,
        "drop_share": DROP_SHARE,
        "reader": found,
        "own_readers": own,
    }
