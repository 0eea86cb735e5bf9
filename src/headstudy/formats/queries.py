"""The answer key of a generated task, beside its prepared data: where the test split's queries
are, their right answers and where their clues sit (test_queries.npz), and what the task is
(task.json: its settings, chance level and the best accuracy reachable from one clue). The
prepare stage writes both; the score stage reads them back with every check it needs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headstudy.common.errors import ConfigError, first_line
from headstudy.common.files import write_json

QUERIES_FILE = "test_queries.npz"
TASK_FILE = "task.json"
# queries (n,): place of each query token in test.npy, the answer follows it; answers (n,): the
# answer token; clue_positions (n, k): place of each clue; token_types (vocab,): the clue type of
# every token id, -1 for tokens that are no clue.
ARRAYS = ("queries", "answers", "clue_positions", "token_types")


def write_queries(prepared: Path, queries, answers, clue_positions, token_types) -> None:
    np.savez(
        Path(prepared) / QUERIES_FILE,
        queries=np.asarray(queries, dtype=np.int64),
        answers=np.asarray(answers, dtype=np.int64),
        clue_positions=np.asarray(clue_positions, dtype=np.int64),
        token_types=np.asarray(token_types, dtype=np.int64),
    )


def write_task(prepared: Path, task: dict) -> None:
    write_json(Path(prepared) / TASK_FILE, task)


def load_task(prepared: Path) -> dict:
    path = Path(prepared) / TASK_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: {prepared} holds no generated task (data.corpus=multiclue)")
    try:
        task = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({first_line(error)}): prepare the data again") from None
    missing = [key for key in ("clues", "chance", "one_clue_best") if key not in task]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)}: prepare the data again")
    return task


def load_queries(prepared: Path, test: np.ndarray, vocab_size: int) -> dict[str, np.ndarray]:
    """The test split's answer key, refused unless it fits the test stream and vocabulary."""
    test_length = len(test)
    path = Path(prepared) / QUERIES_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: {prepared} holds no generated task (data.corpus=multiclue)")
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {key: saved[key] for key in ARRAYS}
    except (ValueError, OSError, EOFError, KeyError) as error:
        raise ConfigError(
            f"{path} is not a readable answer key ({first_line(error)}): prepare the data again"
        ) from None
    queries, answers, clues, types = (arrays[key] for key in ARRAYS)
    problems = []
    if queries.ndim != 1 or answers.shape != queries.shape or clues.ndim != 2 or len(clues) != len(queries):
        problems.append(
            f"shapes queries {queries.shape}, answers {answers.shape}, clue_positions {clues.shape} disagree"
        )
    elif len(queries) and (queries.min() < 0 or queries.max() >= test_length - 1):
        problems.append(f"a query lies outside the {test_length} test tokens (or has no answer after it)")
    elif clues.size and (clues.min() < 0 or (clues >= queries[:, None]).any()):
        problems.append("a clue does not come before its query")
    elif (np.asarray(test[queries + 1]) != answers).any():
        problems.append("an answer differs from the token after its query in the test split")
    if types.shape != (vocab_size,):
        problems.append(f"token_types has shape {types.shape}, expected ({vocab_size},)")
    if answers.size and (answers.min() < 0 or answers.max() >= vocab_size):
        problems.append(f"an answer is no token id below {vocab_size}")
    if problems:
        raise ConfigError(f"{path}: {'; '.join(problems)}: prepare the data again")
    return arrays
