"""The committed report as a reader opens it: headless Chromium loads reports/results.html."""

from __future__ import annotations

import json

import pytest
from browser import check_page
from conftest import ROOT

REPORTS = [ROOT / "reports/results.html", ROOT / "studies/heads-sweep/reports/results.html"]


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("report", [r for r in REPORTS if r.is_file()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_image_loads_and_nothing_is_wider_than_the_page(report, width, tmp_path):
    found = check_page(report, tmp_path, width)
    assert found["images"] >= 3
    assert found["broken"] == 0
    assert not found["page_overflows"]
    assert found["wider_than_page"] == []
    # The headline table is on the page, whole in width, with a row per model and baseline, and a
    # reader sees the model's name and its test perplexity without scrolling it.
    headline = found["headline"]
    rows = json.loads((report.parent / "summary.json").read_text())["rows"]
    assert headline["rows"] == len(rows) + 2  # the unigram and bigram baselines
    assert headline["height"] > 20 * headline["rows"] and 0 < headline["right"] <= width
    assert {"Model", "Test perplexity"} <= set(headline["visible_headers"]), headline["visible_headers"]
