"""The multi-clue task: a token stream in which the answer at every query is a function of k
clues at once, each the most recent token of its own clue type.

The stream is a run of segments: a body of clues and distractors, the query token `?`, then the
answer token. Every one of the `clue_types` types (a, b, c, d) occurs at least once in every
body, each time with a random value 0..values-1 (tokens `a0`, `b2`, ...). The other places of
the body hold further tokens of random types, older than the latest of their type and so no
clue, or noise tokens (`x0`, `x1`, ...), all in random order. With `type_concentration` set,
each body draws its own mix of types for those places (a Dirichlet with that concentration), so
that one type can crowd a body with older tokens of itself while another occurs once, far back.
The answer is the values of the latest a, b, ... (the first k types) as one token out of
values**k (`=21` for k = 2: the latest a has value 2, the latest b value 1). Types after the
k-th are distractors too. So each clue sits at a random distance before the query, older tokens
of its type and the other clues lie between, and no fixed pattern of attention picks them all.

A body is segment_min tokens plus a geometric number more (mean segment_mean, at most
segment_max): the wait for the next query is memoryless, so counting tokens since the last
query says next to nothing about where the next one comes, and attention has little to do in
this stream besides finding the clues.

All random draws are the same for every k: the streams for k = 1..clue_types differ only in
their answer tokens, so a comparison across k is paired on the same inputs.

Chance, for a model that knows which tokens are answers and nothing else: 1 / values**k. A model
that reads only one of the k clues knows one digit of the answer and must guess the others:
at best 1 / values**(k - 1).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from headstudy.common.errors import ConfigError

QUERY = "?"
SPLIT_NUMBER = {"train": 0, "valid": 1, "test": 2}


@dataclass(frozen=True)
class Layout:
    """The vocabulary by id: clue tokens type by type, the noise tokens, the query token, the
    answer tokens of k = 1, 2, ..., clue_types clues (each block in the order of its digits),
    then unused tokens up to vocab_size."""

    clue_types: int
    values: int
    noise: int
    vocab_size: int

    @property
    def first_noise(self) -> int:
        return self.clue_types * self.values

    @property
    def query_id(self) -> int:
        return self.first_noise + self.noise

    def first_answer(self, clues: int) -> int:
        return self.query_id + 1 + sum(self.values**j for j in range(1, clues))

    @property
    def needed(self) -> int:
        """Tokens the task uses, for every k."""
        return self.first_answer(self.clue_types + 1)

    def clue_id(self, kind, value):
        return np.asarray(kind) * self.values + np.asarray(value)

    def answer_id(self, clues: int, latest: np.ndarray) -> np.ndarray:
        """The answer token of each row of latest values (n, clues): the first clue's value is
        the leading digit."""
        index = np.zeros(len(latest), dtype=np.int64)
        for column in range(clues):
            index = index * self.values + latest[:, column]
        return self.first_answer(clues) + index

    def tokens(self) -> list[str]:
        """Every token's text, by id."""
        names = [
            f"{string.ascii_lowercase[kind]}{value}" for kind in range(self.clue_types) for value in range(self.values)
        ]
        names += [f"x{j}" for j in range(self.noise)] + [QUERY]
        for clues in range(1, self.clue_types + 1):
            names += ["=" + "".join(map(str, digits)) for digits in np.ndindex(*(self.values,) * clues)]
        return names + [f"_{j}" for j in range(self.vocab_size - self.needed)]

    def token_types(self) -> np.ndarray:
        """The clue type (0-based) of every token id; -1 for every token that is no clue."""
        types = np.full(self.vocab_size, -1, dtype=np.int64)
        types[: self.first_noise] = np.repeat(np.arange(self.clue_types), self.values)
        return types


@dataclass(frozen=True)
class Split:
    tokens: np.ndarray  # (n_tokens,) token ids
    queries: np.ndarray  # (n,) place of each query token in the stream: its answer is next
    clue_positions: np.ndarray  # (n, k) place of the latest token of clue type i, for i < k
    answers: np.ndarray  # (n,) the answer token of each query


@dataclass(frozen=True)
class MultiClue:
    layout: Layout
    clues: int
    segment_min: int
    segment_mean: float
    segment_max: int
    clue_rate: float
    segments: dict[str, int]
    seed: int
    type_concentration: float | None = None

    @classmethod
    def from_settings(cls, data) -> MultiClue:
        """The task that conf/data/multiclue.yaml describes; every inconsistency refused by key."""
        problems = []

        def number(key: str, low, high=None, integer: bool = True):
            value = data.get(key)
            kinds = (int,) if integer else (int, float)
            if (
                not isinstance(value, kinds)
                or isinstance(value, bool)
                or value < low
                or (high is not None and value > high)
            ):
                problems.append(
                    f"data.{key} must be {'an integer' if integer else 'a number'} in "
                    f"[{low}, {'inf' if high is None else high}], got {value!r}"
                )
                return low
            return value

        clue_types = number("clue_types", 1, 8)
        values = number("values", 2, 10)  # one digit per clue in an answer token's text
        noise = number("noise_tokens", 0)
        clues = number("clues", 1, clue_types)
        shortest = number("segment_min", clue_types)  # room for every type once
        longest = number("segment_max", shortest)
        mean = number("segment_mean", shortest, longest, integer=False)
        rate = number("clue_rate", 0, 1, integer=False)
        seed = number("seed", 0)
        concentration = data.get("type_concentration")
        if concentration is not None:
            concentration = number("type_concentration", 0.01, 100, integer=False)
        if noise == 0 and rate < 1:
            problems.append(
                "data.noise_tokens=0 leaves nothing for the places that hold no clue: "
                "set data.clue_rate=1 or give noise tokens"
            )
        segments = {}
        counts = data.get("segments") or {}
        for split in SPLIT_NUMBER:
            count = counts.get(split) if hasattr(counts, "get") else None
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                problems.append(f"data.segments.{split} must be a positive integer, got {count!r}")
            segments[split] = count
        layout = Layout(clue_types, values, noise, data.get("vocab_size"))
        if not problems and (not isinstance(layout.vocab_size, int) or layout.vocab_size < layout.needed):
            problems.append(
                f"data.vocab_size={layout.vocab_size!r} must be at least {layout.needed}: "
                f"{clue_types} clue types x {values} values, {noise} noise tokens, the query and "
                f"{layout.needed - layout.query_id - 1} answer tokens (values**j for j = 1..clue_types)"
            )
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(
            layout,
            clues,
            shortest,
            float(mean),
            longest,
            float(rate),
            segments,
            seed,
            None if concentration is None else float(concentration),
        )

    @property
    def chance(self) -> float:
        return 1 / self.layout.values**self.clues

    @property
    def one_clue_best(self) -> float:
        return 1 / self.layout.values ** (self.clues - 1)

    def generate(self, split: str) -> Split:
        """One split: a pure function of (seed, split), the same for every k but its answers."""
        return self.stream(np.random.default_rng([self.seed, SPLIT_NUMBER[split]]), self.segments[split])

    def stream(self, rng: np.random.Generator, count: int) -> Split:
        layout, kinds, longest = self.layout, self.layout.clue_types, self.segment_max
        extra = rng.geometric(1 / (self.segment_mean - self.segment_min + 1), size=count) - 1
        lengths = np.minimum(self.segment_min + extra, longest)
        inside = np.arange(longest)[None, :] < lengths[:, None]  # (count, longest)
        # Every type once, at random places inside the body; every other place a token of a
        # random type with probability clue_rate, else noise.
        order = (rng.random((count, longest)) + ~inside).argsort(axis=1)
        types = self.random_types(rng, count, longest)
        types = np.where(rng.random((count, longest)) < self.clue_rate, types, -1)
        np.put_along_axis(types, order[:, :kinds], np.tile(np.arange(kinds), (count, 1)), axis=1)
        types = np.where(inside, types, -1)
        values = rng.integers(0, layout.values, size=(count, longest))
        noise = rng.integers(0, max(layout.noise, 1), size=(count, longest))
        body = np.where(types >= 0, layout.clue_id(np.maximum(types, 0), values), layout.first_noise + noise)
        latest = latest_of_types(types, self.clues)  # (count, k) places in the body
        answers = layout.answer_id(self.clues, np.take_along_axis(values, latest, axis=1))
        # Each row: the body, the query, the answer, then padding (-1) that the stream leaves out.
        rows = np.full((count, longest + 2), -1, dtype=np.int64)
        rows[:, :longest] = np.where(inside, body, -1)
        rows[np.arange(count), lengths] = layout.query_id
        rows[np.arange(count), lengths + 1] = answers
        starts = np.concatenate([[0], np.cumsum(lengths + 2)[:-1]])
        return Split(rows[rows >= 0], starts + lengths, starts[:, None] + latest, answers)

    def random_types(self, rng: np.random.Generator, count: int, longest: int) -> np.ndarray:
        """(count, longest) clue types for the places that hold no forced token: uniform, or with
        type_concentration, from each body's own Dirichlet mix (small: one or two types crowd a
        body; large: close to uniform)."""
        kinds = self.layout.clue_types
        if self.type_concentration is None:
            return rng.integers(0, kinds, size=(count, longest))
        mix = rng.dirichlet(np.full(kinds, self.type_concentration), size=count)  # (count, kinds)
        cumulative = mix.cumsum(axis=1)
        cumulative[:, -1] = 1.0  # a draw of exactly 1.0 (rounding) stays in the last type
        return (rng.random((count, longest))[:, :, None] >= cumulative[:, None, :]).sum(axis=2)


def latest_of_types(types: np.ndarray, clues: int) -> np.ndarray:
    """(rows, clues): the last place in each row that holds clue type i, for i < clues (every
    type occurs in every row)."""
    places = np.arange(types.shape[1])
    return np.stack([np.where(types == kind, places, -1).max(axis=1) for kind in range(clues)], axis=1)
