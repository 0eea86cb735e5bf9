"""The spotlight test: the multi-clue task's generator, its prepared data and answer key, the
clue-attention measure on hand-made attention, and the study end to end (`dvc repro` of
studies/spotlight on a tiny copy of the project)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, assert_nothing_half_written
from multiclue_oracle import answer_of
from omegaconf import OmegaConf
from tinyproject import commit, make_project, ran_stages, run

from headstudy.analysis.measures.clues import FOCUS, clue_attention, clue_weights, query_windows, score_queries
from headstudy.analysis.sections.clue_accuracy import gaps
from headstudy.common.errors import ConfigError
from headstudy.formats.prepared import load_stats, load_tokens
from headstudy.formats.queries import load_queries, load_task
from headstudy.tasks.multiclue import MultiClue
from headstudy.weights.model import Decoder
from headstudy.weights.settings import ModelConfig

SETTINGS = yaml.safe_load((ROOT / "conf" / "data" / "multiclue.yaml").read_text())


def task(clues: int = 3, seed: int = 0, **changes) -> MultiClue:
    settings = {**SETTINGS, "clues": clues, "seed": seed, "segments": {"train": 300, "valid": 20, "test": 200}}
    return MultiClue.from_settings(OmegaConf.create({**settings, **changes}))


def bodies(split) -> list[np.ndarray]:
    """Each query's body: the tokens after the previous answer, up to the query."""
    starts = np.concatenate([[0], split.queries[:-1] + 2])
    return [split.tokens[start:query] for start, query in zip(starts, split.queries, strict=False)]


# The generator


@pytest.mark.parametrize("clues", [1, 2, 3, 4])
def test_the_answer_is_the_values_of_the_latest_clue_of_each_type(clues):
    generated = task(clues).generate("test")
    layout = task(clues).layout
    types = layout.token_types()
    assert (generated.tokens[generated.queries] == layout.query_id).all()
    assert (generated.tokens[generated.queries + 1] == generated.answers).all()
    for body, query, places, answer in zip(
        bodies(generated), generated.queries, generated.clue_positions, generated.answers, strict=False
    ):
        assert set(types[body]) >= set(range(layout.clue_types))  # every type in every body
        values = []
        for kind, place in enumerate(places):
            assert types[generated.tokens[place]] == kind  # the clue is of its type ...
            assert kind not in types[generated.tokens[place + 1 : query]]  # ... and the latest of it
            values.append(generated.tokens[place] % layout.values)
        # The answer token is the clues' values as digits, and its text says so.
        assert answer == layout.first_answer(clues) + int("".join(map(str, values)), layout.values)
        assert layout.tokens()[answer] == "=" + "".join(map(str, values))
        assert answer_of(layout, clues, body) == answer


def test_no_distractor_changes_the_answer_and_every_clue_does():
    """Whatever fills the places that are no clue (older tokens of the clue types, noise, types
    after the k-th), the answer stays; a clue's value moves it."""
    clues, made = 3, task(3)
    layout, types = made.layout, made.layout.token_types()
    generated = made.generate("test")
    rng = np.random.default_rng(0)
    checked = 0
    for body, answer in zip(bodies(generated), generated.answers, strict=False):
        latest = {kind: max(i for i, token in enumerate(body) if types[token] == kind) for kind in range(clues)}
        distractors = [i for i in range(len(body)) if i not in latest.values()]
        for _ in range(5):
            changed = body.copy()
            for place in distractors:
                later = [kind for kind, clue_place in latest.items() if clue_place < place]
                # Any noise token, or a clue of a type whose latest clue comes later (so it stays
                # older), or of a type after the k-th.
                kinds = [kind for kind in range(layout.clue_types) if kind >= clues or kind not in later]
                choice = rng.integers(len(kinds) + 1)
                changed[place] = (
                    layout.first_noise + rng.integers(layout.noise)
                    if choice == len(kinds)
                    else layout.clue_id(kinds[choice], rng.integers(layout.values))
                )
            assert answer_of(layout, clues, changed) == answer
            checked += 1
        for kind, place in latest.items():
            moved = body.copy()
            moved[place] = layout.clue_id(kind, (body[place] % layout.values + 1) % layout.values)
            assert answer_of(layout, clues, moved) != answer
    assert checked == 5 * len(generated.queries)


def test_clues_sit_at_random_distances_with_older_tokens_of_their_type_between():
    generated = task(4).generate("train")
    types = task(4).layout.token_types()
    distances = generated.queries[:, None] - generated.clue_positions
    for kind in range(4):  # no fixed offset picks a clue
        assert len(np.unique(distances[:, kind])) >= 10
    older = sum(
        kind in types[body[: place - start]]
        for body, places, start in zip(
            bodies(generated), generated.clue_positions, np.concatenate([[0], generated.queries[:-1] + 2]), strict=False
        )
        for kind, place in enumerate(places)
    )
    assert older > 0.3 * 4 * len(generated.queries)
    lengths = generated.queries - np.concatenate([[-2], generated.queries[:-1]]) - 2
    assert lengths.min() >= SETTINGS["segment_min"] and lengths.max() <= SETTINGS["segment_max"]
    assert abs(lengths.mean() - SETTINGS["segment_mean"]) < 1.0


def test_same_seed_same_data_and_every_k_shares_the_stream_but_its_answers():
    first, again = task(2, seed=5).generate("train"), task(2, seed=5).generate("train")
    assert all(
        np.array_equal(getattr(first, key), getattr(again, key))
        for key in ("tokens", "queries", "clue_positions", "answers")
    )
    assert not np.array_equal(first.tokens, task(2, seed=6).generate("train").tokens)
    assert not np.array_equal(first.tokens[:500], task(2, seed=5).generate("valid").tokens[:500])
    other_k = task(4, seed=5).generate("train")
    answers = np.zeros(len(first.tokens), dtype=bool)
    answers[first.queries + 1] = True
    assert np.array_equal(first.queries, other_k.queries)
    assert np.array_equal(first.tokens[~answers], other_k.tokens[~answers])
    assert np.array_equal(first.clue_positions, other_k.clue_positions[:, :2])


def test_chance_and_the_one_clue_ceiling():
    for clues in (1, 2, 3, 4):
        made = task(clues)
        assert made.chance == pytest.approx(1 / 3**clues)
        assert made.one_clue_best == pytest.approx(1 / 3 ** (clues - 1))
    assert task(1).one_clue_best == 1.0


def test_the_vocabulary_holds_every_token_once_and_the_rest_unused():
    layout = task().layout
    names = layout.tokens()
    assert len(names) == len(set(names)) == layout.vocab_size == SETTINGS["vocab_size"]
    assert layout.needed == 4 * 3 + 8 + 1 + 3 + 9 + 27 + 81
    assert names[layout.query_id] == "?" and names[layout.first_answer(2)] == "=00"
    assert names[layout.needed :] == [f"_{j}" for j in range(layout.vocab_size - layout.needed)]


# The hard settings: long bodies, each with its own mix of clue types (data.type_concentration)

HARD = {"segment_min": 16, "segment_mean": 24, "segment_max": 30, "clue_rate": 0.9, "type_concentration": 0.1}


def type_shares(split, layout) -> np.ndarray:
    """(bodies, clue types): each body's share of each type among its clue-type tokens."""
    types = layout.token_types()
    counts = np.array(
        [np.bincount(types[body][types[body] >= 0], minlength=layout.clue_types) for body in bodies(split)]
    )
    return counts / counts.sum(axis=1, keepdims=True)


def test_without_a_type_concentration_the_stream_is_the_one_generated_before_it():
    """Absent, the setting draws nothing: every task generated before it keeps its bytes (a
    digest of the committed k = 3 stream's first segments, taken before the setting existed)."""
    generated = task(3).generate("test")
    assert generated.tokens[:24].tolist() == [
        int(token) for token in "18 5 10 6 1 20 48 0 14 6 4 3 10 7 18 7 10 4 0 2 5 16 20 58".split()
    ]


@pytest.mark.parametrize("clues", [1, 2, 3])
def test_with_a_type_concentration_the_answer_still_depends_only_on_the_k_clues(clues):
    made = task(clues, **HARD)
    generated = made.generate("test")
    for body, answer in zip(bodies(generated), generated.answers, strict=True):
        assert answer_of(made.layout, clues, body) == answer


def test_with_a_type_concentration_the_same_seed_gives_the_same_data():
    first, again = task(2, seed=5, **HARD).generate("train"), task(2, seed=5, **HARD).generate("train")
    assert all(
        np.array_equal(getattr(first, key), getattr(again, key))
        for key in ("tokens", "queries", "clue_positions", "answers")
    )
    assert not np.array_equal(first.tokens[:300], task(2, seed=6, **HARD).generate("train").tokens[:300])


def test_the_distractor_density_is_what_was_asked():
    """clue_rate: the share of the places beyond the forced one-of-each-type that hold a clue-type
    token; type_concentration: how unevenly a body's clue-type tokens fall on the types (a small
    one crowds each body with one type; none gives every type its even share)."""
    for settings in ({**HARD, "clue_rate": 0.5}, HARD):
        made = task(3, **settings, segments={"train": 2000, "valid": 20, "test": 20})
        generated = made.generate("train")
        types = made.layout.token_types()
        places = sum(len(body) - made.layout.clue_types for body in bodies(generated))
        typed = sum(int((types[body] >= 0).sum()) - made.layout.clue_types for body in bodies(generated))
        assert typed / places == pytest.approx(settings["clue_rate"], abs=0.01)
    crowded = type_shares(
        task(3, **HARD, segments={"train": 2000, "valid": 20, "test": 20}).generate("train"), made.layout
    )
    even = {**HARD}
    even.pop("type_concentration")
    uniform = type_shares(
        task(3, **even, segments={"train": 2000, "valid": 20, "test": 20}).generate("train"), made.layout
    )
    # Dirichlet(0.1) over 4 types gives most of a body to one type (diluted by the four forced
    # tokens); uniform draws give each type about a quarter.
    assert crowded.max(axis=1).mean() > 0.65
    assert uniform.max(axis=1).mean() < 0.45
    assert crowded.mean(axis=0) == pytest.approx([0.25] * 4, abs=0.04)  # no type favoured over the bodies


def test_a_type_concentration_puts_a_recent_crowded_clue_beside_an_old_lone_one():
    """The case one softmax cannot serve with one recency slope: in many answers one clue is among
    the last few tokens with older tokens of its type before it, and another is far back."""
    generated = task(3, **HARD).generate("test")
    ages = generated.queries[:, None] - generated.clue_positions
    assert ((ages.min(axis=1) <= 2) & (ages.max(axis=1) >= 10)).mean() > 0.4
    generated = task(3).generate("test")  # the committed study's task: bodies of mean 10
    ages = generated.queries[:, None] - generated.clue_positions
    assert ((ages.min(axis=1) <= 2) & (ages.max(axis=1) >= 10)).mean() < 0.2


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"clues": 5}, "data.clues"),
        ({"vocab_size": 100}, "data.vocab_size=100 must be at least 141"),
        ({"segment_min": 3}, "data.segment_min"),
        ({"segment_mean": 40}, "data.segment_mean"),
        ({"clue_rate": 1.5}, "data.clue_rate"),
        ({"type_concentration": 0}, "data.type_concentration"),
        ({"type_concentration": "abc"}, "data.type_concentration"),
        ({"segments": {"train": 10, "valid": 0, "test": 5}}, "data.segments.valid"),
    ],
)
def test_bad_settings_are_refused_by_key(changes, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        task(**changes)


# The prepared data and its answer key


def test_prepare_writes_the_task_in_the_prepared_format_with_its_answer_key(tmp_path, monkeypatch):
    from headstudy.prepare import prepare

    monkeypatch.setenv("DVC_STAGE", "test")  # a stage's own output folder, as under dvc repro
    folders = {}
    for clues in (1, 2):
        data = {**SETTINGS, "clues": clues, "segments": {"train": 200, "valid": 20, "test": 50}}
        config = OmegaConf.create({"data": data, "paths": {"prepared": str(tmp_path / f"k{clues}")}})
        folders[clues] = prepare(config)
    prepared = folders[2]
    assert_nothing_half_written(tmp_path)
    stats, test = load_stats(prepared), load_tokens(prepared, "test")
    assert stats["vocab_size"] == 257 and stats["splits"]["test"]["queries"] == 50
    key = load_queries(prepared, test, 257)
    task_file = load_task(prepared)
    assert task_file["clues"] == 2 and task_file["chance"] == pytest.approx(1 / 9)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(prepared / "tokenizer.json"))
    text = tokenizer.decode(test[: key["queries"][0] + 2].tolist())
    assert text.split()[-2] == "?" and text.split()[-1].startswith("=") and len(text.split()[-1]) == 3
    assert tokenizer.encode(text).ids == test[: key["queries"][0] + 2].tolist()
    one = load_tokens(folders[1], "test")
    same = np.ones(len(test), dtype=bool)
    same[key["queries"] + 1] = False
    assert np.array_equal(one[same], test[same]) and not np.array_equal(one, test)


def test_an_answer_key_that_disagrees_with_the_stream_is_refused(tmp_path, monkeypatch):
    from headstudy.prepare import prepare

    monkeypatch.setenv("DVC_STAGE", "test")
    data = {**SETTINGS, "clues": 2, "segments": {"train": 50, "valid": 5, "test": 20}}
    prepared = prepare(OmegaConf.create({"data": data, "paths": {"prepared": str(tmp_path / "k2")}}))
    test = np.array(load_tokens(prepared, "test"))
    test[load_queries(prepared, test, 257)["queries"][3] + 1] = 0
    with pytest.raises(ConfigError, match="answer differs"):
        load_queries(prepared, test, 257)


# The clue-attention measure, on attention made by hand


def test_clue_attention_on_hand_made_patterns():
    # Two queries, window of 6 tokens; clue a at column 3 (an older a at 1), clue b at column 4.
    types = np.array([[-1, 0, -1, 0, 1, -1], [1, 0, -1, 0, 1, -1]])
    columns = np.array([[3, 4], [3, 4]])
    weights = np.zeros((2, 3, 6))
    weights[:, 0, 3] = 1.0  # head 0: all on clue a
    weights[:, 1, 4], weights[:, 1, 0] = 0.6, 0.4  # head 1: most on clue b; on token 0 the rest
    weights[:, 2, [1, 3, 4, 5]] = 0.25  # head 2: spread, a quarter on the older a
    on_clue, older = clue_weights(weights, columns, types)
    assert on_clue[0].tolist() == [[1.0, 0.0], [0.0, 0.6], [0.25, 0.25]]
    assert older[0].tolist() == [[0.0, 0.0], [0.0, 0.0], [0.25, 0.0]]
    assert older[1].tolist() == [[0.0, 0.0], [0.0, 0.4], [0.25, 0.0]]  # token 0 is an older b there
    found = clue_attention(weights, columns, types)
    assert found["share"] == [[1.0, 0.0], [0.0, 0.6], [0.25, 0.25]]
    assert found["best"] == [1.0, 0.6]
    assert found["focused"] == 2.0 and found["focused_by_head"] == [1.0, 1.0, 0.0]
    # One head spread over both clues reads neither with a head of its own.
    spread = np.zeros((2, 1, 6))
    spread[:, 0, [3, 4]] = 0.5
    assert clue_attention(spread, columns, types)["focused"] == 0.0
    assert 0 < FOCUS < 1


def test_windows_end_at_each_query_and_drop_queries_whose_clues_fall_outside():
    tokens = np.arange(40)
    queries = np.array([5, 20, 30])
    clues = np.array([[1, 4], [17, 19], [23, 29]])
    windows, columns, kept = query_windows(tokens, queries, clues, context=8)
    assert kept.tolist() == [1, 2]  # the first query has no full window before it
    assert windows[:, -1].tolist() == [20, 30] and windows.shape == (2, 8)
    assert windows[1].tolist() == list(range(23, 31))
    assert columns.tolist() == [[4, 6], [0, 6]]
    # A clue one token before the window: that query is left out.
    assert query_windows(tokens, queries, np.array([[1, 4], [12, 19], [23, 29]]), 8)[2].tolist() == [2]


def test_scoring_a_model_reads_its_own_attention():
    made = task(2, segment_max=12)
    generated = made.generate("test")
    key = {
        "queries": generated.queries,
        "answers": generated.answers,
        "clue_positions": generated.clue_positions,
        "token_types": made.layout.token_types(),
    }
    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=257, context=16, width=16, n_heads=2, n_layers=1, mlp_hidden=32))
    scored = score_queries(model, generated.tokens, key, batch_size=64)
    assert 0 < scored["queries"] <= len(generated.queries)
    assert 0 <= scored["accuracy"] <= 1 and scored["answer_nll"] > 0
    [layer] = scored["layers"]
    share = np.array(layer["share"])
    assert share.shape == (2, 2) and (share + np.array(layer["older"]) <= 1 + 1e-6).all()
    assert all(not layer.capture_weights for layer in model.attention_layers)


def test_gaps_are_paired_by_seed():
    models = [
        {"variant": v, "k": k, "seed": s, "accuracy": acc}
        for v, k, s, acc in [("1", 2, 0, 0.3), ("1", 2, 1, 0.5), ("4", 2, 0, 0.9), ("4", 2, 1, 0.8), ("4", 2, 2, 0.1)]
    ]
    [gap] = gaps(models, "1", "4", [2, 3])
    assert gap["seeds"] == [0, 1] and gap["per_seed"] == pytest.approx([0.6, 0.3])
    assert gap["diff_mean"] == pytest.approx(0.45) and gap["b_better_in"] == 2


# The study, end to end

TINY_STUDY = {
    "study": {"variants": [1, 2], "clues": [2], "seeds": [0]},
    "data": {"corpus": "multiclue", "segments": {"train": 2000, "valid": 50, "test": 100}},
    "model": {"preset": "tiny", "width": 32, "mlp_hidden": 64, "init_std": 0.1},
    "trainer": {"max_steps": 30, "val_every_steps": 15},
    "threads": 1,
    "report": {
        "title": "Tiny spotlight",
        "compare": [[1, 2]],
        "video_claim": {"single": 1, "multi": 4, "single_accuracy": 0.35, "multi_accuracy": 0.75},
    },
}


@pytest.mark.slow
def test_dvc_repro_of_the_study_scores_every_model_and_reports(tmp_path):
    project = make_project(tmp_path / "project")
    study = project / "studies" / "spotlight"
    study.mkdir(parents=True)
    shutil.copy(ROOT / "studies" / "spotlight" / "dvc.yaml", study / "dvc.yaml")
    params = yaml.safe_load((ROOT / "studies" / "spotlight" / "params.yaml").read_text())
    assert set(params) == set(TINY_STUDY)  # the tiny study sets what the real one sets
    (study / "params.yaml").write_text(yaml.safe_dump(TINY_STUDY))
    commit(project, "tiny spotlight study")

    result = run(project, "dvc", "repro", "studies/spotlight/dvc.yaml")
    prefix = "studies/spotlight/dvc.yaml:"
    assert ran_stages(result.stdout) == {"fingerprint"} | {
        prefix + name
        for name in ("configure", "prepare@2", "train@1-2-0", "train@2-2-0", "score@1-2-0", "score@2-2-0", "spotlight")
    }
    assert_nothing_half_written(study)
    metrics = json.loads((study / "metrics" / "h2-k2-s0.json").read_text())
    assert metrics["heads"] == 2 and metrics["clues"] == 2 and 0 <= metrics["accuracy"] <= 1
    assert metrics["chance"] == pytest.approx(1 / 9) and metrics["one_clue_best"] == pytest.approx(1 / 3)
    attention = json.loads((study / "metrics" / "attention" / "h2-k2-s0.json").read_text())
    assert np.array(attention["layers"][0]["share"]).shape == (2, 2)
    summary = json.loads((study / "reports" / "summary.json").read_text())
    assert [(row["variant"], row["k"]) for row in summary["rows"]] == [("1", 2), ("2", 2)]
    assert summary["comparisons"][0]["largest"]["k"] == 2
    headline = {
        path.relative_to(study / "reports" / "metrics").as_posix(): json.loads(path.read_text())
        for path in (study / "reports" / "metrics").rglob("*.json")
    }
    assert set(headline) == {"accuracy_pct/k2/1.json", "accuracy_pct/k2/2.json", "gap_points/2_vs_1/k2.json"}
    gap = headline["gap_points/2_vs_1/k2.json"]
    assert gap["estimate"] == pytest.approx(100 * summary["comparisons"][0]["by_k"][0]["diff_mean"])
    assert all(set(numbers) <= {"estimate", "lower", "upper"} for numbers in headline.values())
    report = (study / "reports" / "results.md").read_text()
    assert "| 2 heads " in report and "Chance" in report and "75.0%" in report and "Where the heads look" in report
    assert (study / "reports" / "results.html").read_text().count("data:image/png;base64,") == 2
    assert ran_stages(run(project, "dvc", "repro", "studies/spotlight/dvc.yaml").stdout) == set()


def tiny_hard_study(study: dict, **changes) -> dict:
    """studies/spotlight-hard's settings at a tiny size: the hard task's own keys, a tiny model."""
    settings = {
        "study": study,
        "data": {
            "corpus": "multiclue",
            "segments": {"train": 2000, "valid": 50, "test": 100},
            "segment_min": 8,
            "segment_mean": 10,
            "segment_max": 14,
            "clue_rate": 0.9,
            "type_concentration": 0.1,
        },
        "model": {"preset": "tiny", "width": 32, "mlp_hidden": 64, "context": 16, "init_std": 0.1},
        "trainer": {"max_steps": 30, "val_every_steps": 15},
        "threads": 1,
        "report": {"title": "Tiny hard spotlight"},
    }
    for section, values in changes.items():
        settings[section] = {**settings.get(section, {}), **values}
    return settings


@pytest.mark.slow
def test_dvc_repro_of_the_hard_study_and_its_checks_scores_ablates_and_reports(tmp_path):
    """studies/spotlight-hard end to end at a tiny size: its learning-rate check's pipeline, then
    the study itself, whose report reads the check pipelines' metrics. The other pipelines beside
    it (own-rate/, longer/ and the longer budgets) run the same stages with other settings; here
    they hold the learning-rate check's metrics, which is all the report reads."""
    project = make_project(tmp_path / "project")
    source, study = ROOT / "studies" / "spotlight-hard", project / "studies" / "spotlight-hard"
    real = yaml.safe_load((source / "params.yaml").read_text())
    (study / "lr-check").mkdir(parents=True)
    shutil.copy(source / "lr-check" / "dvc.yaml", study / "lr-check" / "dvc.yaml")
    lr_check = tiny_hard_study({"variants": [1], "clues": [2], "seeds": [0], "lrs": [0.003, 0.01]})
    (study / "lr-check" / "params.yaml").write_text(yaml.safe_dump(lr_check))
    checks = ("lr-check", "own-rate", "longer", "k2-lr-check", "k2-longer", "k3-longer", "k2-qk-norm")
    titles = "ABCDEFG"
    main = tiny_hard_study({"variants": [1, 2], "clues": [2], "seeds": [1]})
    main["report"].update(
        success_accuracy=0.9,
        compare=[[1, 2]],
        extra=[{"title": title, "metrics": f"{folder}/metrics"} for title, folder in zip(titles, checks, strict=True)],
    )
    assert set(main["data"]) <= set(real["data"]) | {"segments"}  # the tiny study sets the real one's task keys
    shutil.copy(source / "dvc.yaml", study / "dvc.yaml")
    (study / "params.yaml").write_text(yaml.safe_dump(main))
    commit(project, "tiny hard spotlight study")

    run(project, "dvc", "repro", "studies/spotlight-hard/lr-check/dvc.yaml")
    for folder in checks[1:]:
        shutil.copytree(study / "lr-check" / "metrics", study / folder / "metrics")
    result = run(project, "dvc", "repro", "studies/spotlight-hard/dvc.yaml")
    prefix = "studies/spotlight-hard/dvc.yaml:"
    assert {prefix + f"{stage}@{variant}-2-1" for stage in ("train", "score", "ablate") for variant in (1, 2)} | {
        prefix + "spotlight"
    } <= ran_stages(result.stdout)
    assert_nothing_half_written(study)
    ablation = json.loads((study / "metrics" / "ablation" / "h2-k2-s1.json").read_text())
    assert ablation["heads"] == 2 and len(ablation["ablated"]) == 2 and len(ablation["digit_accuracy"]) == 2
    assert json.loads((study / "data" / "k2" / "task.json").read_text())["type_concentration"] == 0.1
    report = (study / "reports" / "results.md").read_text()
    assert "Which head reads which clue" in report and "Succeeded (>= 90%)" in report
    for title, folder in zip(titles, checks, strict=True):
        assert f"## {title}" in report and f"{folder}/metrics" in report
    assert "h1-lr0.01-k2-s0" in report  # the learning-rate check's models are listed
    assert ran_stages(run(project, "dvc", "repro", "studies/spotlight-hard/dvc.yaml").stdout) == set()


@pytest.mark.parametrize(
    "folder", ["lr-check", "own-rate", "longer", "k2-lr-check", "k2-longer", "k3-longer", "k2-qk-norm"]
)
def test_each_check_of_the_hard_study_trains_the_studys_task_and_models(folder):
    """A DVC params file cannot include another, so each check pipeline repeats the study's
    settings: they must agree but for what the check is about (its grid, steps or rate)."""
    hard = ROOT / "studies" / "spotlight-hard"
    study = yaml.safe_load((hard / "params.yaml").read_text())
    check = yaml.safe_load((hard / folder / "params.yaml").read_text())
    own = {
        "lr-check": (),
        "own-rate": ("optimizer",),
        "longer": ("trainer",),
        "k2-lr-check": ("trainer",),
        "k2-longer": ("trainer",),
        "k3-longer": ("trainer",),
        "k2-qk-norm": ("trainer", "model"),
    }[folder]
    for section in set(study) | set(check):
        if section in ("study", "report", *own):
            continue
        assert check.get(section) == study.get(section), f"{folder}/params.yaml: {section}"
    for section in own:
        changed = {key for key, value in check[section].items() if study.get(section, {}).get(key) != value}
        assert changed == {"optimizer": {"lr"}, "trainer": {"max_steps"}, "model": {"qk_norm"}}[section], changed
