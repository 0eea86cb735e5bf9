"""A head-count sweep analysed as one design (heads x seed, additive), and compared with
Vaswani et al. (2017) Table 3 row (A)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering.wording import interval, p_is, signed
from headstudy.analysis.sections.comparisons import log_ppl_matrix
from headstudy.analysis.statistics import additive_fit, contrast, polynomial_trend

# Vaswani et al. (2017), Table 3 row (A) and the base model (8 heads): development perplexity
# (per wordpiece, newstest2013 EN-DE) by head count at equal computation, single runs. A fact of
# the literature, not a setting. Their 1-head model keeps its output projection.
VASWANI_TABLE3A_PPL = {1: 5.29, 4: 5.00, 8: 4.92, 16: 4.91, 32: 5.01}


def vaswani_shape() -> str:
    return (
        f"Vaswani et al. (2017, Table 3 row A, with the base model for 8 heads) report development perplexity "
        f"{', '.join(f'{p:.2f}' for p in VASWANI_TABLE3A_PPL.values())} for "
        f"{', '.join(map(str, VASWANI_TABLE3A_PPL))} heads (per wordpiece, English-German, one run each, at equal "
        "computation): lowest at 16 heads with 8 within 0.01, worst with 1 head, and worse again at 32. Their "
        "1-head model keeps its output projection, so it corresponds to our 1-mix, not to a 1-head model without "
        "one."
    )


def sweep_section(rows: list[dict], tokens_per_word: float, figure_dir: Path) -> tuple[list, dict]:
    """Test perplexity against head count, analysed as one design (additive model, seed as
    block): does the head count matter (F), and has the effect the shape Vaswani et al. saw, an
    optimum between few and many heads (a convex quadratic trend in log2 heads with its minimum
    inside the range)?"""
    rows = sorted(rows, key=lambda r: r["heads"])
    heads = [r["heads"] for r in rows]
    log_ppl, seeds = log_ppl_matrix(rows)
    fit = additive_fit(log_ppl)
    best = min(rows, key=lambda r: r["test_ppl_mean"])
    result = {
        "best_heads": best["heads"],
        "f": fit["f"],
        "p": fit["p"],
        "df_heads": fit["df_variant"],
        "df_residual": fit["df_residual"],
        "agrees_with_vaswani": None,
    }
    blocks = [
        ("heading", "Head-count sweep"),
        ("text", f"The lowest mean test perplexity is at {best['heads']} heads ({best['test_ppl_mean']:.2f})."),
    ]
    if fit["df_residual"] == 0 or len(rows) < 3:
        blocks.append(
            (
                "text",
                "With one seed, or fewer than three head counts, the sweep has no residual variance "
                "or no shape to test, so no claim is made about the head count. " + vaswani_shape(),
            )
        )
        return blocks, result
    trend = polynomial_trend(fit, np.log2(heads))
    quadratic, linear = trend["quadratic"], trend["linear"]
    minimum = trend["minimum_at"]
    inside = minimum is not None and math.log2(heads[0]) < minimum < math.log2(heads[-1])
    result |= {
        "linear_t": linear["t"],
        "linear_p": linear["p"],
        "quadratic_t": quadratic["t"],
        "quadratic_p": quadratic["p"],
        "fitted_minimum_heads": 2**minimum if minimum is not None else None,
        "lack_of_fit_p": trend["lack_of_fit_p"],
    }
    matters = fit["p"] < 0.05
    text = (
        f"All {len(rows)} head counts together, on seeds {', '.join(map(str, seeds))}: log-perplexity = seed effect "
        f"+ head-count effect + error, the residual variance pooled over every head count ({fit['df_residual']} "
        f"degrees of freedom). The head count {'matters' if matters else 'has no clear effect'}: "
        f"F({fit['df_variant']}, {fit['df_residual']}) = {fit['f']:.2f}, {p_is(fit['p'])}. Its shape, as "
        f"trends in log2(heads) within the same model: quadratic t = {quadratic['t']:+.2f}, "
        f"{p_is(quadratic['p'])}; linear t = {linear['t']:+.2f}, {p_is(linear['p'])}"
    )
    if not math.isnan(trend["lack_of_fit_p"]):
        text += (
            f"; what the quadratic leaves over gives F({trend['lack_of_fit_df']}, {fit['df_residual']}) = "
            f"{trend['lack_of_fit_f']:.2f}, {p_is(trend['lack_of_fit_p'])}"
        )
    text += "."
    if fit["df_residual"] > len(seeds) - 1:
        text += (
            f" (A comparison of two head counts alone rests on {len(seeds) - 1} degree{'s' if len(seeds) > 2 else ''} "
            f"of freedom; this analysis on {fit['df_residual']}.)"
        )
    if quadratic["significant"]:
        result["agrees_with_vaswani"] = inside
        shape = (
            f"So perplexity has an optimum between few and many heads: the quadratic fit of the means is lowest "
            f"near {2**minimum:.0f} heads. That is the shape of Vaswani et al.'s row."
            if inside
            else "So perplexity is curved, but without an optimum inside the head counts tried: not the shape of "
            "Vaswani et al.'s row."
        )
    else:
        shape = (
            "These seeds resolve no curvature"
            + (", only a trend across the range" if linear["significant"] else "")
            + ", so the sweep can neither confirm nor refute the shape of Vaswani et al.'s row."
        )
    blocks += [("text", text + " " + shape), ("text", vaswani_shape())]
    against_one = {
        h: contrast(fit, [1 if x == h else -1 if x == heads[0] else 0 for x in heads], tokens_per_word)
        for h in heads[1:]
    }
    reference = {h: math.log(p / VASWANI_TABLE3A_PPL[1]) for h, p in VASWANI_TABLE3A_PPL.items() if h > 1}
    table = pd.DataFrame(
        {
            "Heads": [str(h) for h in heads[1:]],
            "This sweep: log-ratio per token": [signed(against_one[h]["log_ratio"]) for h in heads[1:]],
            "95% CI (pooled)": [interval(*against_one[h]["log_ratio_ci95"]) for h in heads[1:]],
            "Log-ratio per word": [signed(against_one[h]["log_ratio_per_word"]) for h in heads[1:]],
            "Vaswani et al.: log-ratio, their unit": [
                signed(reference[h]) if h in reference else "" for h in heads[1:]
            ],
        }
    )
    blocks += [
        (
            "text",
            "Each head count against one head (log-ratio of perplexities; the CI from the pooled residual variance):",
        ),
        ("table", table),
        (
            "figure",
            (
                report_figures.sweep(
                    rows,
                    {h: (c["log_ratio"], *c["log_ratio_ci95"]) for h, c in against_one.items()},
                    reference,
                    "Vaswani et al. 2017, Table 3 (A): one run each, per wordpiece",
                    figure_dir / "sweep.png",
                ),
                "Left: test perplexity against the head count at a fixed width, with 95% CIs over seeds. Right: "
                "each head count against one head (relative change, pooled 95% CI), beside Vaswani et al.'s "
                "row in its own unit.",
            ),
        ),
    ]
    return blocks, result
