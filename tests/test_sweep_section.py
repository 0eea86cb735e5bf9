"""The sweep report: the head counts analysed as one design (additive model on log-perplexity,
seed as block), and the comparison with Vaswani et al. (2017), Table 3 row (A), decided from the
shape the numbers have: an optimum between few and many heads, or not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from headstudy.analysis.sweep import sweep_section

HEADS = [1, 2, 4, 8, 16, 32]
# The committed sweep's test perplexities (studies/heads-sweep, seeds 0 and 1).
COMMITTED = {
    1: (18.7251, 18.6496),
    2: (18.6840, 18.6289),
    4: (18.4819, 18.2126),
    8: (18.3277, 18.2898),
    16: (18.4681, 18.3194),
    32: (18.6978, 18.4796),
}


def rows(ppl: dict[int, tuple[float, float]]) -> list[dict]:
    return [
        {
            "heads": h,
            "label": f"{h} heads",
            "seeds": [0, 1],
            "test_ppl": list(p),
            "test_ppl_mean": math.sqrt(p[0] * p[1]),
            "test_ppl_ci95": [min(p), max(p)],
        }
        for h, p in ppl.items()
    ]


def shaped(log_means) -> dict[int, tuple[float, float]]:
    """Two seeds around the given log-perplexities, with a little noise that differs by head count."""
    noise = 0.002 * np.array([1, -1, 1, -1, 1, -1])
    return {h: (math.exp(3 + m + e), math.exp(3.01 + m - e)) for h, m, e in zip(HEADS, log_means, noise, strict=False)}


def test_the_committed_sweep_has_a_head_effect_that_its_pairs_cannot_see(tmp_path):
    blocks, result = sweep_section(rows(COMMITTED), tokens_per_word=1.884, figure_dir=tmp_path)
    assert (result["df_heads"], result["df_residual"]) == (5, 5)
    assert result["f"] == pytest.approx(12.3, abs=0.1)
    assert result["p"] == pytest.approx(stats.f.sf(result["f"], 5, 5)) and result["p"] < 0.01
    assert result["best_heads"] == 8
    text = " ".join(content for kind, content in blocks if kind == "text")
    assert "The head count matters: F(5, 5) = 12.3" in text
    assert "rests on 1 degree of freedom; this analysis on 5" in text
    assert (tmp_path / "sweep.png").is_file()


@pytest.mark.parametrize(
    "log_means, agrees, phrase",
    [
        (0.01 * (np.log2(HEADS) - 2.5) ** 2, True, "That is the shape of Vaswani et al.'s row."),
        (-0.01 * (np.log2(HEADS) - 2.5) ** 2, False, "without an optimum inside the head counts tried"),
        (-0.01 * np.log2(HEADS), None, "These seeds resolve no curvature, only a trend across the range"),
        (np.zeros(6), None, "has no clear effect"),
    ],
)
def test_sweep_agrees_with_vaswani_only_when_the_numbers_show_an_inner_optimum(tmp_path, log_means, agrees, phrase):
    blocks, result = sweep_section(rows(shaped(log_means)), tokens_per_word=1.884, figure_dir=tmp_path)
    assert result["agrees_with_vaswani"] is agrees
    assert phrase in " ".join(content for kind, content in blocks if kind == "text")


def test_one_seed_makes_no_claim_about_the_head_count(tmp_path):
    one_seed = [{**row, "seeds": [0], "test_ppl": row["test_ppl"][:1]} for row in rows(COMMITTED)]
    blocks, result = sweep_section(one_seed, tokens_per_word=1.884, figure_dir=tmp_path)
    assert result["agrees_with_vaswani"] is None and math.isnan(result["p"])
    assert "no claim is made about the head count" in blocks[-1][1]
