"""The share of one comparison's gap that a third variant closes (report.share, one or a list): of
B's lead over A, the part that C reaches. Per seed, d_B = log(ppl_B / ppl_A) and d_C = log(ppl_C / ppl_A) in test
perplexity per token; the share is mean d_C / mean d_B over the seeds where no model of the three
collapsed (test perplexity above collapse_above), so that one failed training does not make the
ratio. A share of 0 means C gains nothing over A, 1 that C gains all of B's lead.

Exploratory by design: its 95% interval is a paired percentile bootstrap over those seeds (each
resample draws seeds with replacement and keeps each seed's three models together), which
undercovers with 10 seeds or fewer; the report says so beside it."""

from __future__ import annotations

import math

import numpy as np

from headstudy.analysis.rendering.wording import possessive
from headstudy.common.errors import ConfigError

KEYS = ("gap", "closed_by", "collapse_above", "resamples", "seed")


def share_settings(share) -> list[tuple[str, object]]:
    """report.share, one setting or a list of them, as (the key a message names, the setting)."""
    if isinstance(share, list):
        return [(f"report.share[{index}]", item) for index, item in enumerate(share)]
    return [("report.share", share)]


def check_share(share, variants: list[str], where: str) -> None:
    """report.share: {gap: [A, B], closed_by: C, collapse_above: PPL, resamples: N, seed: S}, or a
    list of them, each variant in the study; where names the file, for the message."""
    for key, setting in share_settings(share):
        check_one_share(key, setting, variants, where)


def check_one_share(key: str, share, variants: list[str], where: str) -> None:
    expected = "expected {gap: [A, B], closed_by: C, collapse_above: PERPLEXITY, resamples: N, seed: S}"
    if not isinstance(share, dict) or sorted(share) != sorted(KEYS):
        raise ConfigError(f"{key} in {where}: {expected}, got {share!r}")
    gap = share["gap"]
    if not isinstance(gap, list) or len(gap) != 2:
        raise ConfigError(f"{key}.gap in {where}: expected a pair [A, B], got {gap!r}")
    for variant in [*gap, share["closed_by"]]:
        if str(variant) not in variants:
            raise ConfigError(
                f"{key} in {where} names variant {variant!r}, but study.variants ({', '.join(variants)}) "
                "has no such variant"
            )
    limit = share["collapse_above"]
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
        raise ConfigError(f"{key}.collapse_above in {where}: expected a positive perplexity, got {limit!r}")
    for name in ("resamples", "seed"):
        value = share[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "resamples" else 0):
            raise ConfigError(f"{key}.{name} in {where}: expected a whole number, got {value!r}")


def gap_share(rows: list[dict], share: dict) -> dict:
    """The share, its bootstrap interval and the seeds it rests on; rows: the report's per-variant
    rows (seeds and test_ppl)."""
    a, b = (str(variant) for variant in share["gap"])
    c = str(share["closed_by"])
    by_variant = {r["variant"]: dict(zip(r["seeds"], r["test_ppl"], strict=True)) for r in rows}
    seeds = sorted(set(by_variant[a]) & set(by_variant[b]) & set(by_variant[c]))
    limit = share["collapse_above"]
    kept = [seed for seed in seeds if max(by_variant[v][seed] for v in (a, b, c)) <= limit]
    result = {
        "a": a,
        "b": b,
        "c": c,
        "seeds": kept,
        "collapsed_seeds": [seed for seed in seeds if seed not in kept],
        "collapse_above": limit,
        "resamples": share["resamples"],
    }
    if len(kept) < 2:
        return {**result, "share": math.nan, "low": math.nan, "high": math.nan, "gap_b": math.nan, "gap_c": math.nan}
    ppl = {v: np.array([by_variant[v][seed] for seed in kept]) for v in (a, b, c)}
    d_b, d_c = np.log(ppl[b] / ppl[a]), np.log(ppl[c] / ppl[a])
    draws = np.random.default_rng(share["seed"]).integers(0, len(kept), size=(share["resamples"], len(kept)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = d_c[draws].mean(axis=1) / d_b[draws].mean(axis=1)
    low, high = np.nanpercentile(ratios, [2.5, 97.5])
    return {
        **result,
        "gap_b": float(d_b.mean()),
        "gap_c": float(d_c.mean()),
        "share": float(d_c.mean() / d_b.mean()),
        "low": float(low),
        "high": float(high),
    }


def share_blocks(result: dict, labels: dict[str, str]) -> list:
    """The section's heading and its one paragraph."""
    a, b, c = (labels.get(result[key], result[key]) for key in ("a", "b", "c"))
    left_out = (
        f"; seed {', '.join(map(str, result['collapsed_seeds']))} left out, where a model is above "
        f"{result['collapse_above']:g}"
        if result["collapsed_seeds"]
        else ""
    )
    lead = f"{possessive(b)} lead over {a}"
    if math.isnan(result["share"]):
        text = f"Fewer than 2 seeds without a collapse: no share of {lead} is computed{left_out}."
    else:
        seeds = ", ".join(map(str, result["seeds"]))
        text = (
            f"Exploratory. Of {lead} (mean log-ratio of test perplexity per token {result['gap_b']:+.3f} "
            f"over seeds {seeds}{left_out}), {c} reaches {result['gap_c']:+.3f}: a share "
            f"of {100 * result['share']:.0f}%, 95% interval [{100 * result['low']:.0f}%, {100 * result['high']:.0f}%] "
            f"(paired percentile bootstrap over the seeds, {result['resamples']:,} resamples, which undercovers "
            "with this few seeds)."
        )
    return [("heading", f"How much of {possessive(b)} lead {c} closes"), ("text", text)]
