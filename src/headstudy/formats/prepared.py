"""The prepared data on disk: token files per split, the tokenizer and their statistics, read
back with every check a stage needs before it trusts them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from headstudy.common.errors import ConfigError, first_line

SPLITS = ("train", "valid", "test")
TOKENIZER_FILE = "tokenizer.json"
STATS_FILE = "stats.json"


def tokens_path(prepared: Path, split: str) -> Path:
    return Path(prepared) / f"{split}.npy"


def load_tokens(prepared: Path, split: str) -> np.ndarray:
    """The token ids of one split, refused unless they are a readable 1-d integer array whose
    every id names a token of the prepared tokenizer."""
    path = tokens_path(prepared, split)
    if not path.is_file():
        raise ConfigError(f"{path} not found: run the prepare stage first (dvc repro prepare)")
    try:
        # No pickles: a token file is plain numbers, and a pickle could run code.
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ConfigError(
            f"{path} is not a readable .npy token array ({first_line(error)}): "
            "prepare the data again (dvc repro prepare)"
        ) from None
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ConfigError(
            f"{path} holds a {tokens.dtype} array of shape {tokens.shape}: "
            "expected one row of integer token ids (dvc repro prepare)"
        )
    vocab_size = prepared_vocab_size(prepared)
    lowest, highest = (int(tokens.min()), int(tokens.max())) if len(tokens) else (0, 0)
    if lowest < 0 or highest >= vocab_size:
        raise ConfigError(
            f"{path} holds token id {highest if highest >= vocab_size else lowest}, but the "
            f"tokenizer has {vocab_size} tokens (ids 0 to {vocab_size - 1}): prepare the data again"
        )
    return tokens


def load_stats(prepared: Path) -> dict:
    path = Path(prepared) / STATS_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: run the prepare stage first (dvc repro prepare)")
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({first_line(error)}): prepare the data again") from None


def prepared_vocab_size(prepared: Path) -> int:
    """The prepared tokenizer's size, as prepare recorded it beside the token files."""
    vocab_size = load_stats(prepared).get("vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
        raise ConfigError(
            f"{Path(prepared) / STATS_FILE} has no valid vocab_size ({vocab_size!r}): prepare the data again"
        )
    return vocab_size


def check_vocab_size(prepared: Path, vocab_size: int, key: str) -> None:
    """A model or baseline's vocabulary must be the prepared tokenizer's, or ids and rows disagree."""
    prepared_size = prepared_vocab_size(prepared)
    if vocab_size != prepared_size:
        raise ConfigError(
            f"{key}={vocab_size} differs from the prepared tokenizer's {prepared_size} tokens "
            f"({Path(prepared) / STATS_FILE}): set data.vocab_size={prepared_size}, or prepare the "
            f"data again with data.vocab_size={vocab_size}"
        )


def check_length(tokens: np.ndarray, minimum: int, path: Path, needed_for: str) -> None:
    if len(tokens) < minimum:
        raise ConfigError(
            f"{path} holds {len(tokens)} tokens, fewer than the {minimum} that {needed_for} needs: use a larger corpus"
        )


def check_training_data(prepared: Path, vocab_size: int, context: int) -> None:
    """Everything training needs from the prepared data, checked before a run starts."""
    check_vocab_size(prepared, vocab_size, "model.vocab_size")
    check_length(
        load_tokens(prepared, "train"),
        context + 1,
        tokens_path(prepared, "train"),
        f"one training window (model.context={context}, plus its next token)",
    )
    check_length(load_tokens(prepared, "valid"), 2, tokens_path(prepared, "valid"), "validation")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepared_file_hashes(prepared: Path) -> dict[str, str]:
    """sha256 of every prepared file, by its path inside the folder, in name order."""
    prepared = Path(prepared)
    return {
        path.relative_to(prepared).as_posix(): sha256_file(path)
        for path in sorted(prepared.rglob("*"))
        if path.is_file()
    }


def digest_of(file_hashes: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name, file_hash in file_hashes.items():
        digest.update(f"{name}\0{file_hash}\n".encode())
    return digest.hexdigest()


def prepared_digest(prepared: Path) -> str:
    """sha256 over every prepared file's name and content, in name order."""
    return digest_of(prepared_file_hashes(prepared))
