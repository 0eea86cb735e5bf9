"""Confidence intervals over seeds, the paired head-count comparison, and the sentence that
states its result. Student t from scipy; nothing here is specific to attention."""

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


def paired_difference(ppl_a: dict[int, float], ppl_b: dict[int, float], heads_a: int, heads_b: int) -> dict:
    """B minus A over the seeds both have: same seed, same data order, so seed-to-seed
    variation cancels. Negative means B has the lower (better) perplexity."""
    seeds = sorted(set(ppl_a) & set(ppl_b))
    if not seeds:
        raise ValueError(f"no seed has both {heads_a} and {heads_b} heads")
    diffs = [ppl_b[s] - ppl_a[s] for s in seeds]
    diff_mean, low, high = mean_ci95(diffs)
    mean_a = float(np.mean([ppl_a[s] for s in seeds]))
    return {
        "heads_a": heads_a,
        "heads_b": heads_b,
        "seeds": seeds,
        "diff_mean": diff_mean,
        "diff_ci95": [low, high],
        "relative": diff_mean / mean_a,
        "relative_ci95": [low / mean_a, high / mean_a],
        "significant": bool(low > 0 or high < 0),  # nan compares False: one seed claims nothing
    }


def verdict(comparison: dict) -> str:
    """The result in words, following the numbers."""
    a, b = comparison["heads_a"], comparison["heads_b"]
    low, high = comparison["diff_ci95"]
    n = len(comparison["seeds"])
    numbers = (f"mean paired difference {comparison['diff_mean']:+.2f} perplexity "
               f"({comparison['relative']:+.1%})")
    if n < 2:
        return f"With one seed there is no confidence interval, so no claim is made: {numbers}."
    interval = f"95% CI [{low:+.2f}, {high:+.2f}] over {n} seeds"
    if not comparison["significant"]:
        return (f"No clear difference between {a} and {b} heads: {numbers}, and the {interval} "
                "includes 0.")
    better, worse = (b, a) if comparison["diff_mean"] < 0 else (a, b)
    return (f"{_heads(better)} better than {_heads(worse).lower()}: {numbers}, {interval}, "
            "which excludes 0.")


def _heads(count: int) -> str:
    return "1 head" if count == 1 else f"{count} heads"
