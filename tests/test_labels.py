"""A variant's name in every report: one function gives it, and a variant with a settings file
never shares the name of its bare head count (1-mix is not 1, 4-nomix is not 4)."""

from __future__ import annotations

import ast

from conftest import ROOT

from headstudy.analysis.rendering.wording import label, mid_sentence
from headstudy.analysis.sections.clue_accuracy import accuracy_rows
from headstudy.analysis.sections.heads import heads_blocks

VARIANTS = ["1", "1-mix", "4-nomix", "4"]


def test_every_variant_of_the_2x2_gets_its_own_label():
    names = [label(v, {}) for v in VARIANTS]
    assert len(set(names)) == len(VARIANTS), names
    assert label("1-mix", {"1-mix": "1 head + output projection"}) == "1 head + output projection"


def test_a_label_inside_a_sentence_keeps_its_acronyms():
    assert mid_sentence("1 head + wider MLP") == "1 head + wider MLP"
    assert mid_sentence("Wide control") == "wide control"
    assert mid_sentence("MLP-only model") == "MLP-only model"


def test_no_report_lowercases_a_whole_label():
    """str.lower() on a label would turn "wider MLP" into "wider mlp" mid-sentence."""
    sources = (ROOT / "src" / "headstudy").rglob("*.py")
    offenders = [str(path) for path in sources if "label(" in path.read_text() and ").lower()" in path.read_text()]
    assert not offenders


def test_label_has_one_home():
    homes = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "src").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "label"
    ]
    assert homes == ["src/headstudy/analysis/rendering/wording.py"]


def test_the_spotlight_table_keeps_1_mix_and_4_nomix_apart():
    models = [
        {
            "variant": variant,
            "k": 2,
            "seed": 0,
            "accuracy": 0.5,
            "clues_focused": 1.0,
            "attention": [{"best": [0.5, 0.5]}],
            "heads": int(variant[0]),
            "params": 100,
            "chance": 1 / 9,
            "one_clue_best": 1 / 3,
        }
        for variant in VARIANTS
    ]
    rows = accuracy_rows(models, VARIANTS, [2], {})
    assert len({row["label"] for row in rows}) == len(VARIANTS)


def test_the_heads_table_keeps_1_mix_and_4_nomix_apart():
    score = {"mean": 0.1, "sd": 0.0}
    rows = [
        {
            "variant": variant,
            "layer": 0,
            "rank": 0,
            "heads": int(variant[0]),
            "role": "mixed",
            "seeds": [0],
            **{
                key: score
                for key in (
                    "previous_token",
                    "self",
                    "first_position",
                    "distance",
                    "entropy",
                    "uniform_entropy",
                    "ablation_delta_ppl",
                )
            },
        }
        for variant in VARIANTS
    ]
    heads = {
        "roles": {},
        "rows": rows,
        "models": [],
        "layers": [],
        "substantial_weight": 0.2,
        "spotlight": {},
        "sentence": "a",
        "figures": {"attention_maps": [], "head_scores": "head_scores.png"},
    }
    table = next(content for kind, content in heads_blocks(heads, {}) if kind == "table")
    assert table["Model"].nunique() == len(VARIANTS)
