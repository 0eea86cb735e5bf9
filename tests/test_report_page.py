"""The committed report as a reader opens it: headless Chromium loads reports/results.html."""

from __future__ import annotations

import json

import pytest
from browser import check_page
from conftest import ROOT

REPORTS = [ROOT / "reports/results.html", ROOT / "studies/heads-sweep/reports/results.html"]
EVERY_REPORT = [ROOT / "reports/results.html", *sorted(ROOT.glob("studies/*/reports/results.html"))]


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


@pytest.mark.parametrize("report", EVERY_REPORT, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_answer_is_boxed_under_the_title_and_every_section_and_figure_can_be_found(report, tmp_path):
    found = check_page(report, tmp_path, 1280)
    box = found["headline_box"]
    assert box and box["after_title"], "no headline box right under the title"
    summary = json.loads((report.parent / "summary.json").read_text())
    comparisons = summary.get("comparisons") or []
    if summary.get("no_answer"):  # undertrained models: the box says so, and states no interval
        assert box["text"].startswith("No answer: the models are undertrained") and "CI" not in box["text"]
    elif comparisons and "relative_ci95" in comparisons[0]:  # a perplexity study: each pre-stated change with its CI,
        # or with its median and the sign test's interval where the seeds' differences are not normal.
        normal = [comparison.get("normal", True) for comparison in comparisons]
        assert box["text"].count("95% CI") == sum(normal)
        assert box["text"].count("the differences are not normal") == len(normal) - sum(normal)
    # A table of contents whose every link lands on a heading, and every heading linkable.
    assert found["contents"] == [f"#{heading['id']}" for heading in found["headings"]] and found["contents_resolve"]
    assert all(heading["id"] and heading["anchor"] == f"#{heading['id']}" for heading in found["headings"])
    # A numbered caption under every figure.
    assert found["figures"] and all(
        caption.startswith(f"Figure {number}. ") and len(caption) > 40
        for number, caption in enumerate(found["figures"], start=1)
    ), found["figures"]


@pytest.mark.parametrize("report", EVERY_REPORT, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_tables_use_the_page_width_and_fit_a_wide_window_without_scrolling(report, tmp_path):
    wide = check_page(report, tmp_path, 1280)
    assert wide["tables"] > 0 and wide["tables_scrolling"] == 0
    narrow = check_page(report, tmp_path, 800)  # a narrow window: a wide table scrolls in its own box, not the page
    assert not narrow["page_overflows"]
