"""Confidence intervals over seeds, paired, per-seed and pooled comparisons of model variants, trends over
a head-count sweep, and a null for the spotlight measure. Student t, F, Shapiro-Wilk and the binomial
from scipy; nothing here is specific to attention.

Perplexity is exp(mean NLL per token), so everything is computed on log-perplexity (the NLL,
where seed-to-seed noise is roughly symmetric) and exponentiated: a perplexity interval is then
always positive, and a comparison is a ratio of perplexities, a log-ratio on this scale. A
log-ratio per token times tokens/words is the log-ratio per word, so both units come from one
estimate; a relative change (ratio - 1) is not unit-free, only the sign of a log-ratio is.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

from headstudy.analysis.rendering.wording import p_is


def mean_ci95(values) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval; with one value the interval is undefined (nan)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half_width = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, float(mean - half_width), float(mean + half_width)


def median_interval(values, level: float = 0.95) -> tuple[float, float, float, float]:
    """Median, its distribution-free interval and that interval's exact coverage: the order
    statistics x(k) and x(n+1-k) with the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k),
    is at least `level` (the interval the sign test inverts; it assumes only independent values).
    Below 6 values no k reaches 95%, and the interval is [min, max] with the coverage it has."""
    values = np.sort(np.asarray(values, dtype=float))
    n = len(values)
    median = float(np.median(values))
    if n < 2:
        return median, math.nan, math.nan, math.nan
    coverage = [1 - 2 * stats.binom.cdf(k - 1, n, 0.5) for k in range(1, n // 2 + 1)]
    k = max((k for k, c in enumerate(coverage, start=1) if c >= level), default=1)
    return median, float(values[k - 1]), float(values[n - k]), float(coverage[k - 1])


def sign_test(values) -> float:
    """Two-sided exact sign test of a zero median: the binomial p of the count of negative values
    among the non-zero ones (nan when none is non-zero)."""
    values = np.asarray(values, dtype=float)
    nonzero = values[values != 0]
    if not len(nonzero):
        return math.nan
    return float(stats.binomtest(int((nonzero < 0).sum()), len(nonzero), 0.5).pvalue)


def normality_p(values) -> float:
    """Shapiro-Wilk p that the values come from a normal distribution: small p means a t interval
    on them is not to be trusted. nan below 3 values, or when all are equal."""
    values = np.asarray(values, dtype=float)
    if len(values) < 3 or np.ptp(values) == 0:
        return math.nan
    return float(stats.shapiro(values).pvalue)


def perplexity_ci95(perplexities) -> tuple[float, float, float]:
    """Geometric mean over seeds and its 95% interval: the Student-t interval of the mean
    log-perplexity, exponentiated."""
    mean, low, high = mean_ci95(np.log(np.asarray(perplexities, dtype=float)))
    return math.exp(mean), math.exp(low), math.exp(high)


def log_ratio_units(log_ratio: float, low: float, high: float, tokens_per_word: float | None) -> dict:
    """A log-ratio of perplexities per token and its interval, with the same per word (times
    tokens/words) and both as relative changes (ratio - 1)."""
    result = {
        "log_ratio": log_ratio,
        "log_ratio_ci95": [low, high],
        "relative": math.expm1(log_ratio),
        "relative_ci95": [math.expm1(low), math.expm1(high)],
    }
    if tokens_per_word is not None:
        per_word = [value * tokens_per_word for value in (log_ratio, low, high)]
        result |= {
            "log_ratio_per_word": per_word[0],
            "log_ratio_per_word_ci95": per_word[1:],
            "relative_per_word": math.expm1(per_word[0]),
            "relative_per_word_ci95": [math.expm1(per_word[1]), math.expm1(per_word[2])],
        }
    return result


def paired_difference(
    ppl_a: dict[int, float], ppl_b: dict[int, float], name_a: str, name_b: str, tokens_per_word: float | None = None
) -> dict:
    """B against A over the seeds both have: same seed, same data order, so seed-to-seed
    variation cancels. `log_ratio` is the mean over seeds of log ppl_B - log ppl_A, with a 95%
    Student-t interval on S - 1 degrees of freedom (negative means B is better); `b_better_in` of
    the `seeds` are the seeds where B's perplexity is lower. `diff_mean` is the mean paired
    difference in perplexity itself, for reading. Beside them, for differences a t interval does
    not fit (one collapsed seed makes the mean): the Shapiro-Wilk p of the per-seed log-ratios
    (`normality_p`), their median with its distribution-free interval and coverage, and the sign
    test's p; `normal` is False when Shapiro-Wilk rejects at 5%."""
    seeds = sorted(set(ppl_a) & set(ppl_b))
    if not seeds:
        raise ValueError(f"no seed has both {name_a} and {name_b}")
    per_seed = [math.log(ppl_b[s] / ppl_a[s]) for s in seeds]
    log_ratio, low, high = mean_ci95(per_seed)
    diff_mean, diff_low, diff_high = mean_ci95([ppl_b[s] - ppl_a[s] for s in seeds])
    return {
        "a": name_a,
        "b": name_b,
        "seeds": seeds,
        "per_seed_log_ratio": per_seed,
        "b_better_in": sum(value < 0 for value in per_seed),
        "diff_mean": diff_mean,
        "diff_ci95": [diff_low, diff_high],
        **log_ratio_units(log_ratio, low, high, tokens_per_word),
        "significant": bool(low > 0 or high < 0),  # nan compares False: one seed claims nothing
        **distribution_free(per_seed, tokens_per_word),
    }


def distribution_free(per_seed, tokens_per_word: float | None) -> dict:
    """What holds for per-seed log-ratios whether or not they are normal: their Shapiro-Wilk p
    (`normal` False where it rejects at 5%; nan, too few seeds to check, leaves the t interval in
    charge), their median with its distribution-free interval and coverage, and the sign test's p."""
    median, median_low, median_high, coverage = median_interval(per_seed)
    shapiro = normality_p(per_seed)
    return {
        "normality_p": shapiro,
        "normal": not shapiro < 0.05,
        "median": {**log_ratio_units(median, median_low, median_high, tokens_per_word), "coverage": coverage},
        "sign_p": sign_test(per_seed),
    }


def verdict(comparison: dict) -> str:
    """The result in words, following the numbers: from the t interval where the seeds'
    differences may be normal, from the median and the sign test where Shapiro-Wilk rejects that."""
    a, b = comparison["a"], comparison["b"]
    low, high = comparison["relative_ci95"]
    n = len(comparison["seeds"])
    numbers = (
        f"perplexity {comparison['relative']:+.1%} per token (mean paired difference {comparison['diff_mean']:+.2f})"
    )
    if n < 2:
        return f"With one seed there is no confidence interval, so no claim is made: {b} against {a}, {numbers}."
    seeds = f"lower perplexity for {b} in {comparison['b_better_in']} of {n} seeds"
    if not comparison["normal"]:
        median = comparison["median"]
        numbers = (
            f"median {median['relative']:+.1%} per token, {median['coverage']:.1%} distribution-free interval "
            f"[{median['relative_ci95'][0]:+.1%}, {median['relative_ci95'][1]:+.1%}]; {seeds}, sign test "
            f"{p_is(comparison['sign_p'])}"
        )
        why = (
            f"the seeds' differences are not normal (Shapiro-Wilk {p_is(comparison['normality_p'])}), so the mean "
            f"({comparison['relative']:+.1%}) and its t interval are no summary"
        )
        if comparison["sign_p"] < 0.05:
            better, worse = (b, a) if median["log_ratio"] < 0 else (a, b)
            return f"{better} better than {worse}: {b} against {a}, {numbers}; {why}."
        floor = " (the smallest p that so few seeds allow)" if comparison["sign_p"] == sign_test([1.0] * n) else ""
        unresolved = "Not resolved at the 5% level without assuming normal differences"
        return f"{unresolved}: {b} against {a}, {numbers}{floor}; {why}."
    interval = f"95% CI [{low:+.1%}, {high:+.1%}] over {n} seeds"
    if not comparison["significant"]:
        return f"No clear difference between {a} and {b}: {numbers}, and the {interval} includes 0; {seeds}."
    better, worse = (b, a) if comparison["relative"] < 0 else (a, b)
    return f"{better} better than {worse}: {b} against {a}, {numbers}, {interval}, which excludes 0; {seeds}."


def additive_fit(log_ppl: np.ndarray) -> dict:
    """The additive two-way model of a complete variants x seeds design, seed as a block:
    log ppl[v, s] = mean + variant effect[v] + seed effect[s] + error. The residual variance is
    pooled over every variant on (V-1)(S-1) degrees of freedom; `f` and `p` test whether the
    variants differ at all (F on V-1 and (V-1)(S-1) degrees of freedom). With one seed there is
    no residual, and variance, F and p are nan."""
    y = np.asarray(log_ppl, dtype=float)
    variants, seeds = y.shape
    variant_means = y.mean(axis=1)
    residuals = y - variant_means[:, None] - y.mean(axis=0)[None, :] + y.mean()
    df_residual = (variants - 1) * (seeds - 1)
    variance = float((residuals**2).sum() / df_residual) if df_residual else math.nan
    df_variant = variants - 1
    between = seeds * float(((variant_means - y.mean()) ** 2).sum()) / df_variant if df_variant else math.nan
    f = between / variance if df_residual and df_variant and variance > 0 else math.nan
    # Each variant's own share of the residuals, on its share of the degrees of freedom: pooling
    # is sound only where these are alike.
    variant_variance = (
        (residuals**2).sum(axis=1) / (df_residual / variants) if df_residual else np.full(variants, np.nan)
    )
    return {
        "variant_means": variant_means.tolist(),
        "variant_residual_sd": np.sqrt(variant_variance).tolist(),
        "seeds": seeds,
        "residual_variance": variance,
        "residual_sd": math.sqrt(variance),
        "df_residual": df_residual,
        "df_variant": df_variant,
        "f": f,
        "p": float(stats.f.sf(f, df_variant, df_residual)) if not math.isnan(f) else math.nan,
    }


def contrast(fit: dict, weights, tokens_per_word: float | None = None) -> dict:
    """A contrast of the variant means (weights summing to 0, in the order of the fit's
    variants), e.g. [-1, 1] for the second against the first: its estimate as a log-ratio with a
    95% interval from the pooled residual variance, t on the fit's residual degrees of freedom,
    and the two-sided p."""
    weights = np.asarray(weights, dtype=float)
    if abs(weights.sum()) > 1e-9:
        raise ValueError(f"contrast weights {weights.tolist()} must sum to 0")
    estimate = float(weights @ np.asarray(fit["variant_means"]))
    se = math.sqrt(fit["residual_variance"] * float(weights @ weights) / fit["seeds"])
    df = fit["df_residual"]
    half_width = stats.t.ppf(0.975, df) * se if df else math.nan
    t = estimate / se if df and se > 0 else math.nan
    p = float(2 * stats.t.sf(abs(t), df)) if not math.isnan(t) else math.nan
    return {
        **log_ratio_units(estimate, estimate - half_width, estimate + half_width, tokens_per_word),
        "se": se,
        "df": df,
        "t": t,
        "p": p,
        "significant": bool(p < 0.05),
    }


def variance_ratio(fit: dict) -> float:
    """The largest variant's residual variance over the smallest's (Hartley's F_max): 1 when
    every variant's seeds scatter alike."""
    variances = np.asarray(fit["variant_residual_sd"]) ** 2
    return float(variances.max() / variances.min()) if variances.min() > 0 else math.inf


def per_seed_contrast(log_ppl: np.ndarray, weights, tokens_per_word: float | None = None) -> dict:
    """A contrast of the variants (rows of log_ppl, seeds as columns; weights summing to 0)
    computed within each seed, then a one-sample Student-t interval over the seeds on S - 1
    degrees of freedom. It assumes nothing about how each variant's seeds scatter, only that
    the seeds are independent: the paired comparison generalised to any contrast, with the same
    distribution_free summary beside it."""
    weights = np.asarray(weights, dtype=float)
    if abs(weights.sum()) > 1e-9:
        raise ValueError(f"contrast weights {weights.tolist()} must sum to 0")
    per_seed = weights @ np.asarray(log_ppl, dtype=float)
    estimate, low, high = mean_ci95(per_seed)
    df = len(per_seed) - 1
    se = float(per_seed.std(ddof=1) / math.sqrt(len(per_seed))) if df else math.nan
    t = estimate / se if df and se > 0 else math.nan
    p = float(2 * stats.t.sf(abs(t), df)) if not math.isnan(t) else math.nan
    return {
        **log_ratio_units(estimate, low, high, tokens_per_word),
        "per_seed_log_ratio": per_seed.tolist(),
        "se": se,
        "df": df,
        "t": t,
        "p": p,
        "significant": bool(p < 0.05),
        **distribution_free(per_seed, tokens_per_word),
    }


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: the family of p-values keeps its error rate at the nominal
    level however many there are; each adjusted p is at least its own."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [math.nan] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def polynomial_trend(fit: dict, x) -> dict:
    """The shape of the variant means against x (e.g. log2 of the head count), within the
    additive model: the linear and the quadratic orthogonal-polynomial contrasts, each with t and
    p on the pooled residual variance; the quadratic least-squares fit of the means and, when it
    is convex, the x of its minimum; and whether the quadratic leaves a significant lack of fit
    (F on V-3 degrees of freedom, nan when V = 3)."""
    x = np.asarray(x, dtype=float)
    means = np.asarray(fit["variant_means"])
    design = np.vander(x, 3, increasing=True)  # columns 1, x, x^2
    orthonormal, _ = np.linalg.qr(design)  # column k: the degree-k trend, orthogonal to lower ones
    trends = {}
    for degree, name in ((1, "linear"), (2, "quadratic")):
        # Signed so that a positive linear trend rises with x and a positive quadratic one is U-shaped.
        weights = orthonormal[:, degree] * np.sign(orthonormal[:, degree] @ x**degree)
        result = contrast(fit, weights)
        trends[name] = {
            "estimate": result["log_ratio"],
            **{key: result[key] for key in ("se", "df", "t", "p", "significant")},
        }
    coefficients, *_ = np.linalg.lstsq(design, means, rcond=None)
    curvature = float(coefficients[2])
    if abs(curvature) < 1e-12 * np.abs(coefficients).max():  # exactly linear means leave round-off here
        curvature = 0.0
    lack = float(((means - design @ coefficients) ** 2).sum()) * fit["seeds"]
    df_lack = len(x) - 3
    f_lack = lack / df_lack / fit["residual_variance"] if df_lack and fit["df_residual"] else math.nan
    return {
        **trends,
        "coefficients": coefficients.tolist(),
        "minimum_at": -float(coefficients[1]) / (2 * curvature) if curvature > 0 else None,
        "lack_of_fit_f": f_lack,
        "lack_of_fit_df": df_lack,
        "lack_of_fit_p": float(stats.f.sf(f_lack, df_lack, fit["df_residual"])) if not math.isnan(f_lack) else math.nan,
    }


def union_combinations(members: int, k: int) -> list[tuple[int, ...]]:
    """Every choice of k of the members (all of them when there are fewer than k)."""
    return list(itertools.combinations(range(members), min(k, members)))


def against_null(observed, null, complete: bool = True) -> str:
    """Where observed values (e.g. a 4-head model's coverage, one value per seed) stand against
    a null distribution (the unions of 4 single heads): 'above' when the lowest observed value
    exceeds the highest null value, 'below' when the highest is under the lowest, otherwise
    'within'. An incomplete null (unions of fewer single heads than asked, because there were
    not enough) lies below the complete one: 'below' it stays 'below', 'within' it becomes 'not
    above', and 'above' it only means 'undetermined'."""
    observed, null = np.asarray(observed, dtype=float), np.asarray(null, dtype=float)
    if observed.min() > null.max():
        return "above" if complete else "undetermined"
    if observed.max() < null.min():
        return "below"
    return "within" if complete else "not above"


def nan_to_null(value):
    """JSON has no NaN: an interval that one seed cannot give is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: nan_to_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nan_to_null(item) for item in value]
    return value
