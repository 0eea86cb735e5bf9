"""A study's stated conclusions as checkable facts, from its models' test perplexities: for each
pre-stated comparison (B against A, paired by seed) the direction of the median per-token
log-ratio, the seeds where B is better, and whether the median's distribution-free interval
excludes 0; for each variant, how many of its models collapsed. Two sets of perplexities (the
committed models', and the same with some retrained on another machine) agree on a conclusion when
these facts are equal."""

from __future__ import annotations

import math

from headstudy.analysis.statistics import median_interval


def comparison_facts(ppl_a: dict[int, float], ppl_b: dict[int, float]) -> dict:
    seeds = sorted(set(ppl_a) & set(ppl_b))
    per_seed = [math.log(ppl_b[seed] / ppl_a[seed]) for seed in seeds]
    median, low, high, coverage = median_interval(per_seed)
    return {
        "median": median,
        "interval": [low, high],
        "coverage": coverage,
        "b_better": sum(value < 0 for value in per_seed),
        "seeds": len(seeds),
    }


def conclusions(ppl: dict[str, dict[int, float]], compare: list[list[str]], collapse_above: float | None) -> list[dict]:
    """Each conclusion: its statement, the fact that decides it, and the numbers behind it; collapse
    counts only where the study states a collapse threshold."""
    found = []
    for a, b in compare:
        facts = comparison_facts(ppl[a], ppl[b])
        low, high = facts["interval"]
        found += [
            {
                "statement": f"{b} against {a}: median per-token log-ratio below 0",
                "fact": facts["median"] < 0,
                "numbers": f"median {facts['median']:+.4f}",
            },
            {
                "statement": f"{b} against {a}: {b} better in {facts['b_better']} of {facts['seeds']} seeds",
                "fact": facts["b_better"],
                "numbers": f"{facts['b_better']}/{facts['seeds']}",
            },
            {
                "statement": f"{b} against {a}: the median's interval excludes 0",
                "fact": bool(high < 0 or low > 0),  # nan (too few seeds) compares False: it claims nothing
                "numbers": f"[{low:+.4f}, {high:+.4f}], {facts['coverage']:.1%}",
            },
        ]
    for variant in sorted({variant for pair in compare for variant in pair} if collapse_above else []):
        collapsed = sorted(seed for seed, value in ppl[variant].items() if value > collapse_above)
        found.append(
            {
                "statement": f"{variant}: {len(collapsed)} of {len(ppl[variant])} models collapse "
                f"(test perplexity above {collapse_above:g})",
                "fact": len(collapsed),
                "numbers": f"seeds {', '.join(map(str, collapsed)) or 'none'}",
            }
        )
    return found


def verdicts(committed: list[dict], retrained: list[dict]) -> list[dict]:
    """Each committed conclusion beside the same with the retrained models in place: holds or changes."""
    return [
        {
            "statement": before["statement"],
            "holds": before["fact"] == after["fact"],
            "committed": before["numbers"],
            "retrained": after["numbers"],
        }
        for before, after in zip(committed, retrained, strict=True)
    ]
