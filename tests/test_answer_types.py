"""Which answers a model of the multi-clue task gets wrong (analysis/measures/answer_types.py, `headstudy
answers`): the conflict's definition on hand-made ages, the split on a stand-in model that loses
exactly the old clue's digit of conflict answers, and the stage by hand on a tiny model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import assert_nothing_half_written
from test_ablation import MODEL, TASK, headstudy, untrained_model_of_the_task

from headstudy.analysis.measures.ablation import answer_block, answer_digits
from headstudy.analysis.measures.answer_types import OLD, RECENT, accuracy_by_answer_type, conflicting
from headstudy.analysis.measures.clues import query_windows
from headstudy.formats.prepared import load_tokens, prepared_vocab_size
from headstudy.formats.queries import load_queries, load_task


def test_conflict_answers_hold_one_clue_at_most_recent_and_one_at_least_old_tokens_back():
    two = np.array(
        [
            [RECENT, OLD],  # both bounds count
            [1, OLD + 5],
            [RECENT + 1, OLD],  # no recent clue
            [RECENT, OLD - 1],  # no old clue
        ]
    )
    assert conflicting(two).tolist() == [True, True, False, False]
    three = np.array([[OLD, 3, 1], [5, 6, 7]])  # k = 3: any two of the clues make the conflict
    assert conflicting(three).tolist() == [True, False]


class LosesTheOldDigit(torch.nn.Module):
    """A stand-in model that answers every window right, except conflict answers, where it gives the
    answer with the old clue's digit moved to the next value: the one-slope failure, made exact."""

    def __init__(self, targets: dict[bytes, int], vocab_size: int, context: int):
        super().__init__()
        self.targets = targets
        self.config = SimpleNamespace(vocab_size=vocab_size, context=context)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*windows.shape, self.config.vocab_size)
        for row, window in enumerate(windows.numpy()):
            logits[row, -1, self.targets[window.tobytes()]] = 10.0
        return logits


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("answers")
    result = headstudy(folder, "prepare", *TASK, f"paths.prepared={folder / 'prepared'}")
    assert result.returncode == 0, result.stderr
    return folder / "prepared"


def test_a_model_that_loses_the_old_digit_of_conflict_answers_fails_exactly_those(prepared):
    task, test = load_task(prepared), load_tokens(prepared, "test")
    vocab = prepared_vocab_size(prepared)
    key = load_queries(prepared, test, vocab)
    context = 16
    windows, _, kept = query_windows(test, key["queries"], key["clue_positions"], context)
    first, clues, values = answer_block(task, vocab)
    answers = key["answers"][kept]
    ages = key["queries"][kept, None] - key["clue_positions"][kept]
    conflict = conflicting(ages)
    assert 0 < conflict.sum() < len(kept)  # both types occur in this test split
    digits = answer_digits(answers - first, clues, values)
    old = ages.argmax(axis=1)
    digits[conflict, old[conflict]] = (digits[conflict, old[conflict]] + 1) % values
    wrong = first + np.ravel_multi_index(tuple(digits.T), (values,) * clues)
    targets = {window.tobytes(): int(target) for window, target in zip(windows, wrong, strict=False)}
    assert len(targets) == len(kept)  # every window tells its answer apart

    result = accuracy_by_answer_type(LosesTheOldDigit(targets, vocab, context), test, key, task, batch_size=64)

    assert result["conflict"] == {
        "answers": int(conflict.sum()),
        "accuracy": 0.0,
        "recent_digit": 1.0,
        "old_digit": 0.0,
    }
    assert result["other"] == {"answers": len(kept) - int(conflict.sum()), "accuracy": 1.0}
    assert result["accuracy"] == pytest.approx(1 - conflict.mean())


@pytest.mark.slow
def test_answers_writes_the_split_of_one_model(tmp_path, monkeypatch):
    folders, config, _ = untrained_model_of_the_task(tmp_path, monkeypatch, "answers")
    name = config.name

    result = headstudy(tmp_path, "answers", *TASK, *MODEL, *folders)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"answers: {name}: accuracy ")
    written = json.loads((tmp_path / "metrics" / "answers" / f"{name}.json").read_text())
    assert_nothing_half_written(tmp_path / "metrics")
    assert (written["name"], written["heads"], written["clues"]) == (name, 2, 2)
    assert written["conflict"]["answers"] + written["other"]["answers"] == written["answers"] > 0
    assert 0 <= written["conflict"]["accuracy"] <= 1 and 0 <= written["other"]["accuracy"] <= 1


def split(name: str, k: int, conflict: float | None, other: float, recent: float = 0.9, old: float = 0.5) -> dict:
    return {
        "name": name,
        "clues": k,
        "answers": 2000,
        "conflict": {"answers": 600, "accuracy": conflict, "recent_digit": recent, "old_digit": old},
        "other": {"answers": 1400, "accuracy": other},
    }


def test_the_grids_split_is_shown_seed_by_seed_per_k_and_variant_and_only_where_k_has_conflict_answers():
    from headstudy.analysis.sections.answer_types import answer_type_blocks

    models = [
        {"name": f"h{v}-k{k}-s{s}", "variant": v, "k": k, "seed": s, "accuracy": 0.5}
        for v in ("1", "4")
        for k in (1, 2)
        for s in (1, 2)
    ]
    answers = {
        "h1-k1-s1": split("h1-k1-s1", 1, None, 0.9),  # k = 1: no conflict answers, no row
        "h1-k1-s2": split("h1-k1-s2", 1, None, 0.9),
        "h1-k2-s2": split("h1-k2-s2", 2, 0.40, 0.85),  # seed 2 listed before seed 1 as the files come
        "h1-k2-s1": split("h1-k2-s1", 2, 0.50, 0.55),
        "h4-k2-s1": split("h4-k2-s1", 2, 0.99, 0.995),
        "h4-k2-s2": split("h4-k2-s2", 2, 0.98, 0.99),
    }
    blocks, summary = answer_type_blocks(models, answers, ["1", "4"], [1, 2], {"4": "4 heads"})
    assert [row["variant"] for row in summary] == ["1", "4"] and {row["k"] for row in summary} == {2}
    one = summary[0]
    assert one["seeds"] == [1, 2] and one["conflict_answers"] == [0.50, 0.40]
    assert one["points_lower"] == pytest.approx([5.0, 45.0]) and one["median_points_lower"] == pytest.approx(25.0)
    table, digits = [content for kind, content in blocks if kind == "table"]
    assert list(table["Model"]) == list(digits["Model"]) == ["1 head", "4 heads"]
    assert list(table["Conflict >= 10 points lower"]) == ["1 of 2", "0 of 2"]
    assert table["Conflict answers, %"][0] == "50, 40"
    assert set(digits.columns) == {"k", "Model", "Recent clue's digit, %", "Old clue's digit, %"}
    assert "(30% of the answers at k = 2)" in dict(blocks)["text"]
    assert answer_type_blocks(models, {}, ["1", "4"], [1, 2], {}) == ([], [])
