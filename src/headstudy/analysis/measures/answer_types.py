"""Which answers a model of the multi-clue task gets wrong: the answers where one recency slope
must serve two clues of different ages, against the others.

A one-layer head scores a key by its token plus its age, `f(type) + g(age)` (studies/spotlight-hard's
README). A clue among the last few tokens, crowded by older tokens of its own type, needs g to fall
steeply; a clue far back needs g flat between it and the query. An answer needs both when one of
its clues is at most RECENT tokens before the query and another at least OLD tokens back: the
conflict in its plainest form, the one the study's README counts (30% of answers at k = 2, 61% at
k = 3). Over the other answers one slope can serve every clue. A model that cannot represent both
slopes loses mostly conflict answers, and within them the digit of one of the two clues; so does
a model part way through learning the task, whatever its heads (studies/spotlight-hard's README:
the old lone clue is learned last), so the split alone does not tell the two apart.

Digits are the ablation's (analysis/measures/ablation.py): digit j's prediction is the most likely value of
its marginal over the answer block."""

from __future__ import annotations

import numpy as np

from headstudy.analysis.measures.ablation import answer_block, answer_digits, answer_probabilities, digit_marginals
from headstudy.analysis.measures.clues import query_windows
from headstudy.common.errors import ConfigError
from headstudy.weights.model import Decoder

# The conflict's definition, as studies/spotlight-hard's README states it: part of what the study
# measures, not a setting to tune.
RECENT = 2
OLD = 10


def conflicting(ages: np.ndarray) -> np.ndarray:
    """(n,) bool: per answer, its clues' ages (n, k) in tokens before the query hold one at most
    RECENT and one at least OLD."""
    ages = np.asarray(ages)
    return (ages.min(axis=1) <= RECENT) & (ages.max(axis=1) >= OLD)


def group_accuracy(correct: np.ndarray, chosen: np.ndarray) -> dict:
    """The number of answers in the group and the share answered; no share for an empty group."""
    count = int(chosen.sum())
    return {"answers": count, "accuracy": float(correct[chosen].mean()) if count else None}


def accuracy_by_answer_type(
    model: Decoder, tokens: np.ndarray, key: dict[str, np.ndarray], task: dict, batch_size: int
) -> dict:
    """Whole-answer accuracy on conflict answers and on the others; within conflict answers, the
    accuracy of the recent clue's digit and of the old clue's digit."""
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
    ages = np.asarray(key["queries"])[kept, None] - np.asarray(key["clue_positions"])[kept]
    conflict = conflicting(ages)
    probabilities, correct = answer_probabilities(model, windows, answers, first, values**clues, batch_size)
    predicted = digit_marginals(probabilities, clues, values).argmax(axis=2)
    digit_right = predicted == answer_digits(answers - first, clues, values)  # (n, clues)
    rows = np.arange(len(kept))
    recent_right = digit_right[rows, ages.argmin(axis=1)]
    old_right = digit_right[rows, ages.argmax(axis=1)]
    return {
        "clues": clues,
        "recent": RECENT,
        "old": OLD,
        "answers": len(kept),
        "accuracy": float(correct.mean()),
        "conflict": {
            **group_accuracy(correct, conflict),
            "recent_digit": group_accuracy(recent_right, conflict)["accuracy"],
            "old_digit": group_accuracy(old_right, conflict)["accuracy"],
        },
        "other": group_accuracy(correct, ~conflict),
    }
