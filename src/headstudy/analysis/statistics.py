"""Confidence intervals over seeds, the paired comparison of two model variants, and the
sentences that state their results. Student t from scipy; nothing here is specific to attention.

Perplexity is exp(mean NLL per token), so intervals are computed on log-perplexity (the NLL,
where seed-to-seed noise is roughly symmetric) and exponentiated: a perplexity interval is then
always positive, and a comparison is a ratio of perplexities.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def mean_ci95(values) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval; with one value the interval is undefined (nan)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half_width = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, float(mean - half_width), float(mean + half_width)


def perplexity_ci95(perplexities) -> tuple[float, float, float]:
    """Geometric mean over seeds and its 95% interval: the Student-t interval of the mean
    log-perplexity, exponentiated."""
    mean, low, high = mean_ci95(np.log(np.asarray(perplexities, dtype=float)))
    return math.exp(mean), math.exp(low), math.exp(high)


def paired_difference(ppl_a: dict[int, float], ppl_b: dict[int, float], name_a: str, name_b: str) -> dict:
    """B against A over the seeds both have: same seed, same data order, so seed-to-seed
    variation cancels. `relative` is B's perplexity / A's − 1, from the mean paired difference
    of log-perplexity; negative means B is better. `diff_mean` is the mean paired difference in
    perplexity itself, for reading."""
    seeds = sorted(set(ppl_a) & set(ppl_b))
    if not seeds:
        raise ValueError(f"no seed has both {name_a} and {name_b}")
    log_ratio, low, high = mean_ci95([math.log(ppl_b[s] / ppl_a[s]) for s in seeds])
    diff_mean, diff_low, diff_high = mean_ci95([ppl_b[s] - ppl_a[s] for s in seeds])
    return {
        "a": name_a,
        "b": name_b,
        "seeds": seeds,
        "diff_mean": diff_mean,
        "diff_ci95": [diff_low, diff_high],
        "log_ratio": log_ratio,
        "log_ratio_ci95": [low, high],
        "relative": math.expm1(log_ratio),
        "relative_ci95": [math.expm1(low), math.expm1(high)],
        "significant": bool(low > 0 or high < 0),  # nan compares False: one seed claims nothing
    }


def verdict(comparison: dict) -> str:
    """The result in words, following the numbers."""
    a, b = comparison["a"], comparison["b"]
    low, high = comparison["relative_ci95"]
    n = len(comparison["seeds"])
    numbers = (f"perplexity {comparison['relative']:+.1%} (mean paired difference "
               f"{comparison['diff_mean']:+.2f})")
    if n < 2:
        return f"With one seed there is no confidence interval, so no claim is made: {b} against {a}, {numbers}."
    interval = f"95% CI [{low:+.1%}, {high:+.1%}] over {n} seeds"
    if not comparison["significant"]:
        return f"No clear difference between {a} and {b}: {numbers}, and the {interval} includes 0."
    better, worse = (b, a) if comparison["relative"] < 0 else (a, b)
    return f"{better} better than {worse}: {b} against {a}, {numbers}, {interval}, which excludes 0."


def share_explained(total: dict, by_parameters: dict) -> float:
    """The share of the log-perplexity gain `total` (e.g. 4 heads against 1 head) that
    `by_parameters` (the matched control against the same baseline) reproduces."""
    return by_parameters["log_ratio"] / total["log_ratio"]


def nan_to_null(value):
    """JSON has no NaN: an interval that one seed cannot give is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: nan_to_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nan_to_null(item) for item in value]
    return value
