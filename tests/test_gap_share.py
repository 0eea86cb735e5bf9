"""The share of one comparison's gap that a third variant closes (analysis/gap_share.py,
report.share): the ratio on seeds with known log-ratios, a collapsed seed left out and named, the
bootstrap interval's spread, and the setting refused by key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headstudy.analysis.gap_share import check_share, gap_share, share_blocks
from headstudy.common.errors import ConfigError

SHARE = {"gap": [1, 4], "closed_by": "1-wide", "collapse_above": 30, "resamples": 2000, "seed": 0}


def rows(log_b: list[float], log_c: list[float], base: list[float] | None = None) -> list[dict]:
    """Per-variant rows as the report builds them, B and C at the given log-ratios against A."""
    base = base or [18.0] * len(log_b)
    seeds = list(range(1, len(log_b) + 1))
    return [
        {"variant": "1", "seeds": seeds, "test_ppl": base},
        {"variant": "4", "seeds": seeds, "test_ppl": [a * math.exp(d) for a, d in zip(base, log_b, strict=True)]},
        {"variant": "1-wide", "seeds": seeds, "test_ppl": [a * math.exp(d) for a, d in zip(base, log_c, strict=True)]},
    ]


def test_the_share_is_the_ratio_of_mean_log_ratios_and_certain_when_every_seed_agrees():
    result = gap_share(rows([-0.04] * 5, [-0.01] * 5), SHARE)
    assert result["share"] == pytest.approx(0.25)
    assert (result["low"], result["high"]) == pytest.approx((0.25, 0.25))
    assert result["seeds"] == [1, 2, 3, 4, 5] and result["collapsed_seeds"] == []


def test_a_seed_where_a_model_collapsed_is_left_out_and_named():
    found = gap_share(rows([-0.04, -0.03, -0.8], [-0.01, -0.02, -0.7], base=[18.0, 18.0, 40.0]), SHARE)
    assert found["seeds"] == [1, 2] and found["collapsed_seeds"] == [3]
    assert found["share"] == pytest.approx((-0.015) / (-0.035))
    [_, (_, text)] = share_blocks(found, {"4": "4 heads", "1": "1 head", "1-wide": "1 head + wider MLP"})
    assert "seed 3 left out, where a model is above 30" in text and text.startswith("Exploratory.")


def test_the_interval_spreads_with_the_seeds_and_holds_the_estimate():
    rng = np.random.default_rng(1)
    log_b = list(-0.03 + 0.005 * rng.standard_normal(10))
    log_c = list(-0.012 + 0.005 * rng.standard_normal(10))
    found = gap_share(rows(log_b, log_c), SHARE)
    assert found["low"] < found["share"] < found["high"]
    assert 0 < found["low"] and found["high"] < 1


def test_fewer_than_two_uncollapsed_seeds_give_no_share():
    found = gap_share(rows([-0.04, -0.8], [-0.01, -0.7], base=[18.0, 40.0]), SHARE)
    assert math.isnan(found["share"])
    assert "no share" in share_blocks(found, {})[1][1]


@pytest.mark.parametrize(
    "change, named",
    [
        ({"gap": [1]}, r"report\.share\.gap in params\.yaml: expected a pair"),
        ({"closed_by": "3"}, r"report\.share in params\.yaml names variant '3'"),
        ({"collapse_above": -1}, r"report\.share\.collapse_above in params\.yaml: expected a positive"),
        ({"resamples": 0}, r"report\.share\.resamples in params\.yaml: expected a whole number"),
        ({"seeds": 1}, r"report\.share in params\.yaml: expected \{gap"),
    ],
)
def test_a_bad_share_setting_is_refused_by_key(change, named):
    with pytest.raises(ConfigError, match=named):
        check_share({**SHARE, **change}, ["1", "4", "1-wide"], "params.yaml")


def test_a_list_of_shares_is_checked_item_by_item_and_a_bad_one_named_by_its_place():
    check_share([SHARE, {**SHARE, "closed_by": "4-nomix"}], ["1", "4", "1-wide", "4-nomix"], "params.yaml")
    with pytest.raises(ConfigError, match=r"report\.share\[1\] in params\.yaml names variant '1-mix'"):
        check_share([SHARE, {**SHARE, "closed_by": "1-mix"}], ["1", "4", "1-wide"], "params.yaml")
