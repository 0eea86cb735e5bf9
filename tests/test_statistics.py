import math

import numpy as np
import pytest

from headstudy.reporting.statistics import mean_ci95, paired_difference, perplexity_ci95, share_explained, verdict

T_975_2DF = 4.302653  # Student t, 97.5th percentile, 2 degrees of freedom (printed tables: 4.303)
T_975_1DF = 12.706205


def test_ci95_of_three_values_uses_student_t_with_two_degrees_of_freedom():
    mean, low, high = mean_ci95([1.0, 2.0, 3.0])  # sd 1, standard error 1/sqrt(3)
    half_width = T_975_2DF / math.sqrt(3)
    assert mean == 2.0
    assert low == pytest.approx(2.0 - half_width, abs=1e-5)
    assert high == pytest.approx(2.0 + half_width, abs=1e-5)


def test_one_value_has_no_interval():
    mean, low, high = mean_ci95([5.0])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)


def test_perplexity_interval_of_two_far_apart_seeds_stays_positive():
    # On the perplexities themselves this pair gives [-81.1, 485.5]; on log-perplexity it cannot go below 0.
    ppl = [150.0, 254.0]
    mean, low, high = perplexity_ci95(ppl)
    logs = np.log(ppl)
    half_width = T_975_1DF * logs.std(ddof=1) / math.sqrt(2)
    assert mean == pytest.approx(math.sqrt(150 * 254))  # the geometric mean
    assert low == pytest.approx(math.exp(logs.mean() - half_width), rel=1e-5)
    assert high == pytest.approx(math.exp(logs.mean() + half_width), rel=1e-5)
    assert 0 < low < min(ppl) and high > max(ppl)
    assert mean_ci95(ppl)[1] < 0  # what the plain interval would have said


def test_paired_difference_is_computed_over_common_seeds_on_log_perplexity():
    one_head = {0: 10.0, 1: 12.0, 2: 14.0, 7: 99.0}
    four_heads = {0: 8.0, 1: 10.0, 2: 11.0}
    comparison = paired_difference(one_head, four_heads, "1 head", "4 heads")
    assert comparison["seeds"] == [0, 1, 2]
    log_ratios = [math.log(8 / 10), math.log(10 / 12), math.log(11 / 14)]
    assert comparison["log_ratio"] == pytest.approx(np.mean(log_ratios))
    assert comparison["relative"] == pytest.approx(math.exp(np.mean(log_ratios)) - 1)
    half_width = T_975_2DF * np.std(log_ratios, ddof=1) / math.sqrt(3)
    assert comparison["relative_ci95"] == pytest.approx(
        [math.expm1(np.mean(log_ratios) - half_width), math.expm1(np.mean(log_ratios) + half_width)], rel=1e-5)
    assert comparison["diff_mean"] == pytest.approx(-7 / 3)  # diffs -2, -2, -3
    assert comparison["significant"] is True


def test_sentence_names_the_better_variant_only_when_the_interval_excludes_zero():
    better = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 8.0, 1: 10.0, 2: 11.0}, "1 head", "4 heads")
    assert verdict(better).startswith("4 heads better than 1 head")

    unclear = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 9.0, 1: 13.0, 2: 12.0}, "1 head", "4 heads")
    assert unclear["significant"] is False
    assert verdict(unclear).startswith("No clear difference between 1 head and 4 heads")
    assert "better" not in verdict(unclear)

    worse = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 12.0, 1: 14.0, 2: 17.0}, "1 head", "4 heads")
    assert verdict(worse).startswith("1 head better than 4 heads")


def test_one_seed_makes_no_claim():
    single = paired_difference({0: 10.0}, {0: 8.0}, "1 head", "4 heads")
    assert single["significant"] is False
    assert "no claim is made" in verdict(single)


def test_share_explained_is_the_control_s_part_of_the_log_perplexity_gain():
    total = paired_difference({0: 40.0, 1: 44.0}, {0: 30.0, 1: 33.0}, "1", "4")  # both -25%
    control = paired_difference({0: 40.0, 1: 44.0}, {0: 40.0 * 0.75 ** 0.5, 1: 44.0 * 0.75 ** 0.5}, "1", "1-mix")
    assert share_explained(total, control) == pytest.approx(0.5)
