import math

import pytest

from headstudy.reporting.statistics import mean_ci95, paired_difference, verdict

T_975_2DF = 4.302653  # Student t, 97.5th percentile, 2 degrees of freedom (printed tables: 4.303)


def test_ci95_of_three_values_uses_student_t_with_two_degrees_of_freedom():
    mean, low, high = mean_ci95([1.0, 2.0, 3.0])  # sd 1, standard error 1/sqrt(3)
    half_width = T_975_2DF / math.sqrt(3)
    assert mean == 2.0
    assert low == pytest.approx(2.0 - half_width, abs=1e-5)
    assert high == pytest.approx(2.0 + half_width, abs=1e-5)


def test_one_value_has_no_interval():
    mean, low, high = mean_ci95([5.0])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)


def test_paired_difference_is_computed_over_common_seeds():
    one_head = {0: 10.0, 1: 12.0, 2: 14.0, 7: 99.0}
    four_heads = {0: 8.0, 1: 10.0, 2: 11.0}
    comparison = paired_difference(one_head, four_heads, 1, 4)
    assert comparison["seeds"] == [0, 1, 2]
    assert comparison["diff_mean"] == pytest.approx(-7 / 3)  # diffs -2, -2, -3
    half_width = T_975_2DF * (math.sqrt(1 / 3) / math.sqrt(3))
    assert comparison["diff_ci95"] == pytest.approx([-7 / 3 - half_width, -7 / 3 + half_width], abs=1e-5)
    assert comparison["relative"] == pytest.approx((-7 / 3) / 12.0)
    assert comparison["significant"] is True


def test_sentence_says_four_heads_better_only_when_the_interval_excludes_zero():
    better = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 8.0, 1: 10.0, 2: 11.0}, 1, 4)
    assert verdict(better).startswith("4 heads better than 1 head")

    unclear = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 9.0, 1: 13.0, 2: 12.0}, 1, 4)
    assert unclear["significant"] is False
    assert verdict(unclear).startswith("No clear difference between 1 and 4 heads")
    assert "better" not in verdict(unclear)

    worse = paired_difference({0: 10.0, 1: 12.0, 2: 14.0}, {0: 12.0, 1: 14.0, 2: 17.0}, 1, 4)
    assert verdict(worse).startswith("1 head better than 4 heads")


def test_one_seed_makes_no_claim():
    single = paired_difference({0: 10.0}, {0: 8.0}, 1, 4)
    assert single["significant"] is False
    assert "no claim is made" in verdict(single)
