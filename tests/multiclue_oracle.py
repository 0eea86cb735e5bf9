"""A second derivation of the multi-clue task's answers, independent of the generator's, for the
tests to check it against: read off the tokens alone."""

from __future__ import annotations

import numpy as np

from headstudy.tasks.multiclue import Layout


def answer_of(layout: Layout, clues: int, body) -> int:
    """The answer to one body of token ids, read off the tokens alone: the values of the latest
    a, b, ... A second derivation, independent of the generator's, to check it against."""
    latest = []
    for kind in range(clues):
        found = [int(token) for token in body if 0 <= token < layout.first_noise and token // layout.values == kind]
        if not found:
            raise ValueError(f"no token of clue type {kind} in the body")
        latest.append(found[-1] % layout.values)
    return int(layout.answer_id(clues, np.array([latest]))[0])
