"""The sweep report: the head counts analysed as one design (additive model on log-perplexity,
seed as block), and the comparison with Vaswani et al. (2017), Table 3 row (A), decided from the
shape the numbers have: an optimum between few and many heads, or not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ROOT
from omegaconf import OmegaConf
from scipy import stats

from headstudy import report
from headstudy.analysis.sections.sweep import sweep_section
from headstudy.common.files import read_json
from headstudy.formats.runconfig import read_config

HEADS = [1, 2, 4, 8, 16, 32]
SWEEP = ROOT / "studies" / "heads-sweep"


def committed() -> tuple[list[dict], dict]:
    """The committed sweep's rows, from its committed metrics through the report's own reader, and
    the committed report's summary."""
    config = read_config(SWEEP / "configs" / "report.yaml")
    study, settings = OmegaConf.to_container(config.study), OmegaConf.to_container(config.report)
    metrics = report.study_metrics(SWEEP / "metrics", OmegaConf.to_container(config.models))
    bigram = read_json(SWEEP / config.paths.baselines)["bigram"]["test_ppl"]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    rows = report.perplexity_by_variant(metrics, [str(v) for v in study["variants"]], labels, bigram)
    return rows, read_json(SWEEP / "reports" / "summary.json")


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


def test_the_committed_sweep_section_follows_from_the_committed_metrics(tmp_path):
    """What the section says of the committed models is what the committed report says."""
    rows, summary = committed()
    assert [row["heads"] for row in rows] == HEADS
    blocks, result = sweep_section(rows, tokens_per_word=summary["tokens_per_word"], figure_dir=tmp_path)
    assert result == pytest.approx(summary["sweep"], rel=1e-9)
    assert (result["df_heads"], result["df_residual"]) == (5, 5)
    assert result["p"] == pytest.approx(stats.f.sf(result["f"], 5, 5))
    page = (SWEEP / "reports" / "results.md").read_text()
    texts = [content for kind, content in blocks if kind == "text"]
    assert texts and all(text in page for text in texts)
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
    one_seed = [{**row, "seeds": [0], "test_ppl": row["test_ppl"][:1]} for row in committed()[0]]
    blocks, result = sweep_section(one_seed, tokens_per_word=1.884, figure_dir=tmp_path)
    assert result["agrees_with_vaswani"] is None and math.isnan(result["p"])
    assert "no claim is made about the head count" in blocks[-1][1]
