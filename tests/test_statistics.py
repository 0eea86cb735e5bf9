import math

import numpy as np
import pytest
from scipy import stats

from headstudy.analysis.statistics import (
    additive_fit,
    against_null,
    contrast,
    holm,
    mean_ci95,
    median_interval,
    normality_p,
    paired_difference,
    per_seed_contrast,
    perplexity_ci95,
    polynomial_trend,
    sign_test,
    union_combinations,
    variance_ratio,
    verdict,
)

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
        [math.expm1(np.mean(log_ratios) - half_width), math.expm1(np.mean(log_ratios) + half_width)], rel=1e-5
    )
    assert comparison["diff_mean"] == pytest.approx(-7 / 3)  # diffs -2, -2, -3
    assert comparison["significant"] is True


def test_median_interval_takes_the_order_statistics_whose_sign_test_coverage_reaches_95_percent():
    values = np.arange(10.0)[::-1]  # order must not matter
    median, low, high, coverage = median_interval(values)
    assert median == 4.5
    # x(2) and x(9): 1 - 2 P(Binomial(10, 1/2) <= 1) = 1 - 22/1024; x(3), x(8) would cover only 89%.
    assert (low, high) == (1.0, 8.0)
    assert coverage == pytest.approx(1 - 22 / 1024)


def test_median_interval_of_five_values_is_their_range_with_its_own_coverage_below_95_percent():
    median, low, high, coverage = median_interval([3.0, -1.0, 2.0, 5.0, 0.0])
    assert (median, low, high) == (2.0, -1.0, 5.0)
    assert coverage == pytest.approx(1 - 2 / 32)


def test_sign_test_is_the_exact_two_sided_binomial_p():
    assert sign_test([-0.1] * 5) == pytest.approx(2 / 32)
    assert sign_test([-0.1] * 10) == pytest.approx(2 / 1024)
    assert sign_test([-0.1, 0.2, -0.3, 0.0]) == pytest.approx(1.0)  # the zero is dropped: 2 of 3
    assert math.isnan(sign_test([0.0, 0.0]))


def test_normality_is_rejected_for_one_collapsed_seed_and_not_for_a_regular_scatter():
    # The stabilised study's seeds 1-5: four differences of a few percent and one collapse.
    assert normality_p([-0.012, -0.028, -0.023, -0.036, -0.819]) < 0.01
    assert normality_p([-0.038, -0.037, -0.035, -0.047, -0.082]) > 0.01
    assert math.isnan(normality_p([-0.1, -0.2]))


def test_a_collapsed_seed_turns_the_verdict_to_the_median_and_the_sign_test():
    one_head = {s: 18.0 + 0.05 * s for s in range(1, 11)}
    one_head[5] = 40.0  # collapsed
    four_heads = {s: one_head_ppl * 0.975 if s != 5 else 17.8 for s, one_head_ppl in one_head.items()}
    comparison = paired_difference(one_head, four_heads, "1 head", "4 heads")
    assert comparison["normal"] is False
    assert comparison["median"]["log_ratio"] == pytest.approx(math.log(0.975))
    sentence = verdict(comparison)
    assert sentence.startswith("4 heads better than 1 head")
    assert "median -2.5% per token" in sentence and "sign test p = 0.002" in sentence
    assert "not normal" in sentence

    five_seeds = paired_difference(
        {s: one_head[s] for s in range(1, 6)}, {s: four_heads[s] for s in range(1, 6)}, "1 head", "4 heads"
    )
    assert five_seeds["normal"] is False
    # 5 of 5 seeds is p = 0.0625 at best: the median is stated, no difference claimed at 5%.
    sentence = verdict(five_seeds)
    assert sentence.startswith("Not resolved at the 5% level without assuming normal differences")
    assert "sign test p = 0.062 (the smallest p that so few seeds allow)" in sentence


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


def test_a_log_ratio_per_word_is_the_one_per_token_times_tokens_per_word():
    # B is 10% lower per token in every seed; at 2 tokens per word that is 0.9^2 = 0.81 per word.
    comparison = paired_difference({0: 10.0, 1: 20.0}, {0: 9.0, 1: 18.0}, "A", "B", tokens_per_word=2.0)
    assert comparison["log_ratio"] == pytest.approx(math.log(0.9))
    assert comparison["log_ratio_per_word"] == pytest.approx(2 * math.log(0.9))
    assert comparison["relative_per_word"] == pytest.approx(0.81 - 1)
    # No spread between the seeds: the interval shrinks to the estimate in both units.
    assert comparison["log_ratio_per_word_ci95"] == pytest.approx([2 * math.log(0.9)] * 2)


def test_per_seed_signs_count_the_seeds_where_b_is_lower():
    comparison = paired_difference({0: 10.0, 1: 10.0, 2: 10.0}, {0: 9.0, 1: 11.0, 2: 9.5}, "1 head", "4 heads")
    assert comparison["b_better_in"] == 2
    assert comparison["per_seed_log_ratio"] == pytest.approx([math.log(0.9), math.log(1.1), math.log(0.95)])
    assert "lower perplexity for 4 heads in 2 of 3 seeds" in verdict(comparison)


# Variants x seeds: variant effects 0, 1, 2, seed effects 0, 10, 20, and errors whose every row and
# column sums to 0, so the additive fit's residuals are exactly these errors.
ERRORS = np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
DESIGN = np.array([0.0, 1.0, 2.0])[:, None] + np.array([0.0, 10.0, 20.0])[None, :] + ERRORS


def test_additive_fit_pools_the_residual_variance_over_every_variant():
    fit = additive_fit(DESIGN)
    assert fit["df_residual"] == 4 and fit["df_variant"] == 2
    assert fit["residual_variance"] == pytest.approx(4 / 4)  # sum of squared errors / (V-1)(S-1)
    # Between variants: 3 seeds x ((-1)^2 + 0^2 + 1^2) / 2 = 3 per degree of freedom, against 1.
    assert fit["f"] == pytest.approx(3.0)
    assert fit["p"] == pytest.approx(stats.f.sf(3.0, 2, 4))


def test_a_contrast_uses_the_pooled_variance_and_its_degrees_of_freedom():
    result = contrast(additive_fit(DESIGN), [-1, 0, 1], tokens_per_word=2.0)
    se = math.sqrt(1.0 * 2 / 3)  # residual variance x sum of squared weights / seeds
    half_width = 2.776445 * se  # Student t, 97.5th percentile, 4 degrees of freedom
    assert result["log_ratio"] == pytest.approx(2.0)
    assert result["se"] == pytest.approx(se)
    assert result["log_ratio_ci95"] == pytest.approx([2 - half_width, 2 + half_width], rel=1e-5)
    assert result["log_ratio_per_word"] == pytest.approx(4.0)
    assert result["p"] == pytest.approx(2 * stats.t.sf(2 / se, 4))
    with pytest.raises(ValueError, match="sum to 0"):
        contrast(additive_fit(DESIGN), [1, 0, 0])


def test_with_two_variants_the_pooled_contrast_is_the_paired_comparison():
    ppl_a, ppl_b = {0: 10.0, 1: 12.0, 2: 14.0}, {0: 8.0, 1: 10.0, 2: 11.0}
    paired = paired_difference(ppl_a, ppl_b, "A", "B")
    pooled = contrast(additive_fit(np.log([list(ppl_a.values()), list(ppl_b.values())])), [-1, 1])
    assert pooled["log_ratio"] == pytest.approx(paired["log_ratio"])
    assert pooled["log_ratio_ci95"] == pytest.approx(paired["log_ratio_ci95"])


def test_one_seed_leaves_no_residual_and_claims_nothing():
    fit = additive_fit(np.log([[10.0], [9.0]]))
    assert fit["df_residual"] == 0 and math.isnan(fit["residual_variance"]) and math.isnan(fit["p"])
    result = contrast(fit, [-1, 1])
    assert result["log_ratio"] == pytest.approx(math.log(0.9))
    assert math.isnan(result["log_ratio_ci95"][0]) and result["significant"] is False


def test_holm_multiplies_the_smallest_p_by_the_family_size_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1


def sweep_design(means: np.ndarray, noise: float) -> np.ndarray:
    """Six head counts x two seeds: the given means, a seed effect, and errors that cancel per row
    and per column (so the fitted means are exactly `means`)."""
    errors = noise * np.array([1, -1, 1, -1, 1, -1], dtype=float)
    return np.stack([means + errors, means - errors + 0.3], axis=1)


def test_a_u_shaped_sweep_has_a_positive_quadratic_trend_and_its_minimum_inside():
    x = np.arange(6.0)  # log2 of 1, 2, ..., 32 heads
    trend = polynomial_trend(additive_fit(sweep_design(0.01 * (x - 2.5) ** 2, noise=0.001)), x)
    assert trend["minimum_at"] == pytest.approx(2.5)
    assert trend["quadratic"]["estimate"] > 0 and trend["quadratic"]["significant"]
    assert trend["linear"]["estimate"] == pytest.approx(0, abs=1e-12)  # symmetric about the middle
    assert trend["lack_of_fit_f"] == pytest.approx(0, abs=1e-9)  # the means are exactly quadratic


def test_a_rising_sweep_has_a_positive_linear_trend_and_no_minimum():
    x = np.arange(6.0)
    trend = polynomial_trend(additive_fit(sweep_design(0.01 * x, noise=0.001)), x)
    assert trend["linear"]["estimate"] > 0 and trend["linear"]["significant"]
    assert not trend["quadratic"]["significant"]
    assert trend["minimum_at"] is None


def test_unions_take_every_choice_of_k_members_or_all_when_there_are_fewer():
    assert len(union_combinations(6, 4)) == 15
    assert union_combinations(3, 4) == [(0, 1, 2)]


@pytest.mark.parametrize(
    "observed, complete, position",
    [
        ([2.5, 2.6], True, "above"),
        ([1.0, 1.1], True, "below"),
        ([1.9, 2.5], True, "within"),
        ([2.5, 2.6], False, "undetermined"),  # above a null of too few heads says nothing
        ([1.9, 2.5], False, "not above"),
        ([1.0, 1.1], False, "below"),
    ],
)
def test_a_model_exceeds_the_null_only_when_every_seed_beats_every_union(observed, complete, position):
    assert against_null(observed, [1.8, 2.0, 2.2], complete) == position


def test_a_per_seed_contrast_is_a_student_t_interval_over_the_seeds_contrasts():
    # Per seed, (row 2 - row 1) is 0.1, 0.2 and 0.3: mean 0.2, sd 0.1 on 2 degrees of freedom.
    log_ppl = np.array([[1.0, 2.0, 3.0], [1.5, 2.4, 3.7], [1.6, 2.6, 4.0]])
    result = per_seed_contrast(log_ppl, [0, -1, 1], tokens_per_word=2.0)
    half_width = T_975_2DF * 0.1 / math.sqrt(3)
    assert result["per_seed_log_ratio"] == pytest.approx([0.1, 0.2, 0.3])
    assert result["log_ratio"] == pytest.approx(0.2)
    assert result["log_ratio_ci95"] == pytest.approx([0.2 - half_width, 0.2 + half_width], abs=1e-5)
    assert result["df"] == 2 and result["p"] == pytest.approx(2 * stats.t.sf(0.2 / (0.1 / math.sqrt(3)), 2))
    assert result["log_ratio_per_word"] == pytest.approx(0.4)


def test_a_per_seed_contrast_is_blind_to_a_variant_that_only_shifts_each_seed_alike():
    # Row 0 scatters wildly from seed to seed, but the contrast leaves it out: its interval is
    # that of rows 1 and 2 alone, where a pooled variance would borrow row 0's scatter.
    log_ppl = np.array([[1.0, 9.0, -4.0], [1.5, 2.4, 3.7], [1.6, 2.6, 4.0]])
    alone = per_seed_contrast(log_ppl[1:], [-1, 1])
    within = per_seed_contrast(log_ppl, [0, -1, 1])
    pooled = contrast(additive_fit(log_ppl), [0, -1, 1])
    assert within["log_ratio_ci95"] == pytest.approx(alone["log_ratio_ci95"])
    assert pooled["log_ratio_ci95"][1] - pooled["log_ratio_ci95"][0] > 10 * (
        within["log_ratio_ci95"][1] - within["log_ratio_ci95"][0]
    )


def test_the_variance_ratio_is_the_largest_variant_residual_variance_over_the_smallest():
    # Residuals that sum to 0 over variants and over seeds, so the additive model leaves exactly
    # these: the variants' residual sums of squares are 8, 2 and 2.
    residuals = np.array([[2.0, -2.0], [-1.0, 1.0], [-1.0, 1.0]])
    log_ppl = np.array([[3.0], [3.1], [2.9]]) + np.array([[0.0, 0.5]]) + 0.01 * residuals
    fit = additive_fit(log_ppl)
    assert variance_ratio(fit) == pytest.approx(4.0)
    # Each variant has (V-1)(S-1)/V = 2/3 of a degree of freedom of the 2 pooled ones.
    assert fit["variant_residual_sd"] == pytest.approx(np.sqrt(np.array([8e-4, 2e-4, 2e-4]) / (2 / 3)))
