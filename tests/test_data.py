import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from headstudy.common.errors import ConfigError
from headstudy.formats.prepared import load_stats, load_tokens
from headstudy.prepare import prepare
from headstudy.settings.compose import compose_config
from headstudy.weights.batches import stream_batches, training_batch

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran after the cat",
    "the bird sang on the wet street",
    "an animal crossed the street at night",
]


def write_corpus(folder, count=200):
    folder.mkdir()
    lines = [f"{SENTENCES[i % 4]} number {i}" for i in range(count)]
    half = len(lines) // 2
    (folder / "b.txt").write_text("\n".join(lines[half:]))
    (folder / "a.txt").write_text("\n".join(lines[:half]) + "\n\n")
    return lines


def prepare_text_folder(tmp_path, *extra):
    return prepare(
        compose_config(
            [
                "data=textdir",
                f"data.dir={tmp_path / 'corpus'}",
                "data.vocab_size=300",
                f"paths.prepared={tmp_path / 'prepared'}",
                "data.valid_fraction=0.1",
                "data.test_fraction=0.1",
                *extra,
            ]
        )
    )


def test_text_folder_round_trips_through_tokenizer_and_token_files(in_project, tmp_path):
    lines = write_corpus(tmp_path / "corpus")
    prepared = prepare_text_folder(tmp_path)
    tokenizer = Tokenizer.from_file(str(prepared / "tokenizer.json"))
    decoded = "".join(tokenizer.decode(load_tokens(prepared, split).tolist()) for split in ("train", "valid", "test"))
    # Files are read in name order: a.txt, then b.txt.
    assert decoded.splitlines() == lines
    assert tokenizer.get_vocab_size() == 300
    assert load_tokens(prepared, "train").dtype == np.uint16


def test_stats_count_tokens_words_and_lines_per_split(in_project, tmp_path):
    lines = write_corpus(tmp_path / "corpus")
    prepared = prepare_text_folder(tmp_path)
    splits = load_stats(prepared)["splits"]
    assert [splits[s]["lines"] for s in ("train", "valid", "test")] == [160, 20, 20]
    assert splits["valid"]["words"] == sum(len(line.split()) for line in lines[160:180])
    assert all(splits[s]["tokens"] == len(load_tokens(prepared, s)) for s in splits)


def test_empty_text_folder_is_a_clear_error_and_writes_nothing(in_project, tmp_path):
    (tmp_path / "corpus").mkdir()
    with pytest.raises(ConfigError, match="data.dir=.*expected a folder holding .txt files"):
        prepare_text_folder(tmp_path)
    assert not (tmp_path / "prepared").exists()


def test_training_batch_is_a_pure_function_of_seed_and_step():
    tokens = np.arange(10_000, dtype=np.uint16)
    first = training_batch(tokens, 4, 16, seed=3, step=7)
    again = training_batch(tokens, 4, 16, seed=3, step=7)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=False))
    assert not torch.equal(first[0], training_batch(tokens, 4, 16, seed=3, step=8)[0])
    assert not torch.equal(first[0], training_batch(tokens, 4, 16, seed=4, step=7)[0])
    inputs, targets = first
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


@pytest.mark.parametrize("length", [2, 17, 33, 64, 65, 1000])
def test_stream_windows_predict_every_token_after_the_first_exactly_once(length):
    tokens = np.arange(length, dtype=np.uint16)
    pairs = [
        (int(i), int(t))
        for inputs, targets in stream_batches(tokens, context=16, batch_size=3)
        for i, t in zip(inputs.flatten(), targets.flatten(), strict=False)
    ]
    assert [t for _, t in pairs] == list(range(1, length))
    assert all(t == i + 1 for i, t in pairs)


def test_penn_treebank_split_with_another_hash_is_refused_before_any_work(in_project, tmp_path):
    config = compose_config(["data.sha256.test=0000", f"paths.prepared={tmp_path / 'prepared'}"])
    with pytest.raises(ConfigError, match=r"test split has sha256 dd65dff.*expected data\.sha256\.test=0000"):
        prepare(config)
    assert not (tmp_path / "prepared").exists()
