"""The spotlight report on hand-made numbers with a known answer: successes out of seeds and
medians for bimodal outcomes (report.success_accuracy), the paired median gap, the causal check's
section from hand-made ablation files, the runs beside the grid (report.extra), and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headstudy.analysis.sections.clue_ablation import chosen_models, drops, head_table, own_reader_rows
from headstudy.analysis.sections.clue_accuracy import (
    accuracy_rows,
    gaps,
    headline,
    outcome_table,
    spotlight_report,
    success_gap_sentence,
    success_threshold,
)
from headstudy.analysis.sections.extra_runs import extra_blocks, extra_rows, extra_settings, extra_table
from headstudy.common.errors import ConfigError
from headstudy.spotlight import read_ablations, read_extras

# Bimodal: one head learns k = 4 in three seeds of six, four heads in every seed.
ONE_HEAD = [0.95, 0.20, 0.97, 0.25, 0.30, 0.96]
FOUR_HEADS = [0.99, 0.98, 0.99, 0.97, 0.99, 1.00]


def model(variant: str, k: int, seed: int, accuracy: float) -> dict:
    heads = int(variant[0])
    return {
        "name": f"h{variant}-k{k}-s{seed}",
        "variant": variant,
        "k": k,
        "seed": seed,
        "accuracy": accuracy,
        "heads": heads,
        "params": 100 * heads,
        "queries": 1000,
        "chance": 1 / 3**k,
        "one_clue_best": 1 / 3 ** (k - 1),
        "clues_focused": 1.0,
        "attention": [{"best": [0.5] * k, "share": np.full((heads, k), 1 / k).tolist()}],
    }


def study() -> list[dict]:
    return [model("1", 4, seed, value) for seed, value in enumerate(ONE_HEAD)] + [
        model("4", 4, seed, value) for seed, value in enumerate(FOUR_HEADS)
    ]


# Successes, medians and the paired median gap


def test_successes_and_the_median_of_bimodal_seeds():
    one, four = accuracy_rows(study(), ["1", "4"], [4], {}, threshold=0.9)
    assert one["successes"] == 3 and four["successes"] == 6
    assert one["accuracy_median"] == pytest.approx((0.30 + 0.95) / 2)  # between the modes, as any mean would be
    assert one["accuracy_mean"] == pytest.approx(np.mean(ONE_HEAD))  # kept in summary.json
    table = outcome_table([one, four], 0.9)
    assert table["Succeeded (>= 90%)"].tolist() == ["3 of 6", "6 of 6"]
    assert table["Median"].tolist() == ["62.5%", "99.0%"]
    # Every seed's value, in seed order, with the seeds in the header.
    assert table["Per seed (0, 1, 2, 3, 4, 5), %"][0] == "95.0, 20.0, 97.0, 25.0, 30.0, 96.0"
    assert "Mean" not in " ".join(table.columns)


def test_an_accuracy_at_the_threshold_is_a_success():
    [row] = accuracy_rows([model("1", 2, 0, 0.9), model("1", 2, 1, 0.8999)], ["1"], [2], {}, threshold=0.9)
    assert row["successes"] == 1


def test_without_a_threshold_no_successes_are_counted():
    [row] = accuracy_rows(study()[:6], ["1"], [4], {})
    assert "successes" not in row


def test_the_paired_gap_has_a_median_and_each_variants_successes():
    [gap] = gaps(study(), "1", "4", [4], threshold=0.9)
    differences = [b - a for a, b in zip(ONE_HEAD, FOUR_HEADS, strict=True)]
    assert gap["per_seed"] == pytest.approx(differences)
    # Gaps +4, +78, +2, +72, +69, +4 points: the median lies between the third and fourth, (4 + 69) / 2.
    assert gap["diff_median"] == pytest.approx(0.365)
    assert gap["a_successes"] == 3 and gap["b_successes"] == 6
    assert gap["diff_mean"] == pytest.approx(np.mean(differences)) and len(gap["diff_ci95"]) == 2


def test_the_comparison_states_successes_and_the_median_gap_without_an_interval():
    models = [model("1", 4, seed, 0.3) for seed in range(6)] + [model("4", 4, seed, 0.91) for seed in range(6)]
    text, largest = success_gap_sentence(gaps(models, "1", "4", [4], threshold=0.9), {}, None)
    assert "4 heads succeeded in 6 of 6 seeds, 1 head in 0 of 6; median gap +61.0 points" in text
    assert "CI" not in text and "interval" not in text
    assert largest["k"] == 4 and largest["diff_median"] == pytest.approx(0.61)


def test_the_report_with_a_threshold_puts_no_t_interval_over_bimodal_outcomes(tmp_path):
    settings = {"title": "Hand-made", "compare": [[1, 4]], "success_accuracy": 0.9}
    blocks, summary = spotlight_report(study(), ["1", "4"], [4], 0.5, settings, tmp_path)
    texts = " ".join(str(content) for kind, content in blocks if kind in ("text", "headline"))
    assert "1 head in 3 of 6; median gap +36.5 points" in texts
    assert "95% CI" not in texts and "Student-t interval, cut" not in texts
    tables = [content for kind, content in blocks if kind == "table"]
    assert (
        "Succeeded (>= 90%)" in tables[0].columns and "Median gap (4 heads minus 1 head), points" in tables[1].columns
    )
    assert summary["success_accuracy"] == 0.9 and summary["comparisons"][0]["largest"]["by"] == "median"
    assert (tmp_path / "accuracy_by_clues.png").is_file()
    # Without the setting the report is as before: means with their intervals.
    blocks, summary = spotlight_report(
        study(), ["1", "4"], [4], 0.5, {"title": "Hand-made", "compare": [[1, 4]]}, tmp_path
    )
    assert "success_accuracy" not in summary and "Student-t interval" in str(blocks)


def test_the_headline_files_with_a_threshold_are_successes_and_median_gaps(tmp_path):
    settings = {"title": "Hand-made", "compare": [[1, 4]], "success_accuracy": 0.9}
    _, summary = spotlight_report(study(), ["1", "4"], [4], 0.5, settings, tmp_path)
    files = headline(summary)
    assert set(files) == {"successes_of_6/k4/1", "successes_of_6/k4/4", "median_gap_points/4_vs_1/k4"}
    assert files["successes_of_6/k4/1"] == {"estimate": 3} and files["successes_of_6/k4/4"] == {"estimate": 6}
    assert files["median_gap_points/4_vs_1/k4"]["estimate"] == pytest.approx(
        100 * np.median(np.subtract(FOUR_HEADS, ONE_HEAD))
    )
    # dvc metrics show tabulates a column per key: these keep its three.
    assert all(set(numbers) <= {"estimate", "lower", "upper"} for numbers in files.values())


def test_success_accuracy_of_one_and_absent_are_accepted():
    assert success_threshold({"success_accuracy": 1}) == 1.0 and success_threshold({}) is None


# Which head reads which clue: hand-made ablation files


def ablation(name: str, heads: int, clues: int, own: int) -> dict:
    """Head h reads clue h (its zeroing takes that digit from 99% to 40%) for h < min(heads, clues)."""
    ablated = []
    for head in range(heads):
        digits = [0.99] * clues
        if head < clues:
            digits[head] = 0.40
        ablated.append({"head": head, "digit_accuracy": digits, "answer_accuracy": 0.3})
    reader = [{"clue": c, "head": c % heads, "drop": 0.59, "own": c < heads} for c in range(clues)]
    return {
        "name": name,
        "clues": clues,
        "values": 3,
        "chance_digit": 1 / 3,
        "queries": 1000,
        "digit_accuracy": [0.99] * clues,
        "answer_accuracy": 0.97,
        "ablated": ablated,
        "drop_share": 0.5,
        "reader": reader,
        "own_readers": own,
    }


def test_clues_with_a_reader_of_their_own_averaged_over_seeds_for_variants_with_several_heads():
    models = study()
    ablations = {m["name"]: ablation(m["name"], m["heads"], 4, own=4 if m["seed"] % 2 == 0 else 2) for m in models}
    [row] = own_reader_rows(models, ablations, {})  # 1 head: no row, its only head takes every digit
    assert row["variant"] == "4" and row["own_readers"] == [4, 2, 4, 2, 4, 2]
    assert row["own_readers_mean"] == pytest.approx(3.0)


def test_the_head_by_head_table_is_of_the_first_seed_that_succeeded():
    models = [model("4", 4, 0, 0.5), model("4", 4, 1, 0.95), model("4", 2, 0, 0.99), model("4", 4, 2, 0.97)]
    ablations = {m["name"]: ablation(m["name"], 4, m["k"], 4) for m in models}
    assert [m["name"] for m in chosen_models(models, ablations, 0.9)] == ["h4-k4-s1"]
    assert [m["name"] for m in chosen_models(models, ablations, None)] == ["h4-k4-s0"]
    # No seed succeeded: the first seed.
    assert [m["name"] for m in chosen_models(models[:1], ablations, 0.9)] == ["h4-k4-s0"]


def test_the_head_by_head_table_and_the_drops():
    made = ablation("h2-k3-s0", 2, 3, 2)
    table = head_table(made)
    assert table["Head zeroed"].tolist() == ["none", "head 0", "head 1", "chance"]
    assert table["Clue a's digit"].tolist() == ["99.0%", "40.0%", "99.0%", "33.3%"]
    assert table["Clue c's digit"].tolist() == ["99.0%", "99.0%", "99.0%", "33.3%"]
    assert table["Whole answer"].tolist() == ["97.0%", "30.0%", "30.0%", "3.7%"]
    assert table["Own reader of"].tolist() == ["", "a", "b", ""]
    assert drops(made) == pytest.approx(np.array([[0.59, 0, 0], [0, 0.59, 0]]))


def test_the_report_adds_the_causal_section_only_where_ablation_files_exist(tmp_path):
    models = study()
    ablations = {m["name"]: ablation(m["name"], m["heads"], 4, 4) for m in models if m["heads"] == 4}
    blocks, summary = spotlight_report(models, ["1", "4"], [4], 0.5, {"title": "t"}, tmp_path, ablations=ablations)
    assert ("heading", "Which head reads which clue") in blocks
    assert summary["ablation"]["shown"] == ["h4-k4-s0"] and (tmp_path / "ablation_drops.png").is_file()
    blocks, summary = spotlight_report(models, ["1", "4"], [4], 0.5, {"title": "t"}, tmp_path, ablations={})
    assert ("heading", "Which head reads which clue") not in blocks and "ablation" not in summary


def test_an_ablation_file_of_another_model_is_refused(tmp_path):
    (tmp_path / "ablation").mkdir()
    (tmp_path / "ablation" / "h4-k4-s0.json").write_text(json.dumps(ablation("h4-k3-s0", 4, 3, 3)))
    with pytest.raises(ConfigError, match="is not the ablation of h4-k4-s0"):
        read_ablations([model("4", 4, 0, 0.9)], tmp_path)
    assert read_ablations([model("4", 4, 1, 0.9)], tmp_path) == {}  # not ablated: no section, no refusal


# Runs beside the grid


def score_file(heads: int, seed: int, clues: int, accuracy: float) -> dict:
    return {"heads": heads, "seed": seed, "params": 100, "clues": clues, "accuracy": accuracy, "chance": 1 / 27}


def test_the_extra_table_lists_each_run_sorted_by_name_with_its_learning_rate_and_success():
    runs = {
        "h1-lr0.01-k3-s0": score_file(1, 0, 3, 0.31),
        "h1-lr0.001-k3-s0": score_file(1, 0, 3, 0.95),
        "h4-lr1e-05-k3-s0": score_file(4, 0, 3, 0.99),
    }
    rows = extra_rows(runs, 0.9)
    assert [r["name"] for r in rows] == ["h1-lr0.001-k3-s0", "h1-lr0.01-k3-s0", "h4-lr1e-05-k3-s0"]
    assert [r["lr"] for r in rows] == [0.001, 0.01, 1e-05]
    table = extra_table(rows, 0.9)
    assert table["Succeeded (>= 90%)"].tolist() == ["yes", "no", "yes"]
    assert table["Accuracy"].tolist() == ["95.0%", "31.0%", "99.0%"]
    assert table["Learning rate"].tolist() == ["0.001", "0.01", "1e-05"]
    # A longer budget's reruns have no rate in their names, and without a threshold no success column.
    plain = extra_table(extra_rows({"h1-k3-s2": score_file(1, 2, 3, 0.5)}, None), None)
    assert list(plain.columns) == ["Model", "Heads", "Seed", "k", "Accuracy"]


def split_file(conflict: float, other: float, recent: float, old: float) -> dict:
    return {
        "conflict": {"answers": 30, "accuracy": conflict, "recent_digit": recent, "old_digit": old},
        "other": {"answers": 70, "accuracy": other},
    }


def test_the_extra_table_gives_the_split_by_answer_type_where_the_answers_stage_ran(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "k2-longer" / "metrics"
    (folder / "answers").mkdir(parents=True)
    for name in ("h1-k2-s1", "h1-k2-s2"):
        (folder / f"{name}.json").write_text(json.dumps(score_file(1, int(name[-1]), 2, 0.6)))
    (folder / "answers" / "h1-k2-s1.json").write_text(json.dumps(split_file(0.25, 0.9, 0.95, 0.3)))
    settings = {"title": "t", "extra": [{"title": "Longer", "metrics": "k2-longer/metrics"}]}
    [extra] = read_extras(settings)
    blocks, _ = extra_blocks([extra], None)
    assert blocks[1] == (
        "text",
        "Score metrics from k2-longer/metrics/, the split by answer type from k2-longer/metrics/answers/.",
    )
    table = blocks[2][1]
    assert table["Conflict answers"].tolist() == ["25.0%", ""]  # seed 2 has no split: an empty cell
    assert table["Other answers"].tolist() == ["90.0%", ""]
    assert table["Old clue's digit (conflict)"].tolist() == ["30.0%", ""]


def test_the_report_renders_a_table_per_extra_with_its_title_and_note(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "longer" / "metrics" / "attention").mkdir(parents=True)  # the score stage's subfolder: not a run
    (tmp_path / "longer" / "metrics" / "h1-k4-s1.json").write_text(json.dumps(score_file(1, 1, 4, 0.93)))
    settings = {
        "title": "t",
        "success_accuracy": 0.9,
        "extra": [{"title": "Failed seeds, twice the steps", "metrics": "longer/metrics", "note": "6,000 steps"}],
    }
    extras = read_extras(settings)
    blocks, summary = spotlight_report(study(), ["1", "4"], [4], 0.5, settings, tmp_path, extras=extras)
    at = blocks.index(("heading", "Failed seeds, twice the steps"))
    assert blocks[at + 1] == ("text", "6,000 steps. Score metrics from longer/metrics/.")
    assert blocks[at + 2][1]["Succeeded (>= 90%)"].tolist() == ["yes"]
    assert summary["extra"][0]["rows"][0]["name"] == "h1-k4-s1"


@pytest.mark.parametrize(
    "extra, named",
    [
        (
            [{"title": "x", "metrics": "nowhere/metrics"}],
            r"report\.extra\[0\]\.metrics in params\.yaml: no folder nowhere",
        ),
        ([{"title": "x", "metrics": "empty"}], r"report\.extra\[0\]\.metrics in params\.yaml: empty holds no score"),
        ([{"title": "x", "metrics": "odd"}], r"report\.extra\[0\]\.metrics in params\.yaml: odd/h1-k3-s0\.json lacks"),
    ],
)
def test_an_extra_folder_missing_or_without_score_files_is_refused_by_key_and_path(tmp_path, monkeypatch, extra, named):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "h1-k3-s0.json").write_text(json.dumps({"heads": 1, "seed": 0}))
    with pytest.raises(ConfigError, match=named):
        read_extras({"extra": extra})


def test_no_extra_is_no_section():
    assert extra_settings({}) == [] and read_extras({"extra": None}) == []
