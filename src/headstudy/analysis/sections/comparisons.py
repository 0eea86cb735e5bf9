"""The study's comparisons: each pair of report.compare as a paired log-ratio per token and per
word, the variants analysed together with seed as a block, and the 2 x 2 of heads and output
projection with its contrasts."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering.wording import (
    interval,
    label,
    mid_sentence,
    p_is,
    p_value,
    percent,
    percent_interval,
    signed,
)
from headstudy.analysis.statistics import (
    additive_fit,
    contrast,
    holm,
    paired_difference,
    per_seed_contrast,
    variance_ratio,
    verdict,
)
from headstudy.formats.names import parse_variant

# The forest plot of every comparison, in the report's figures folder (and first among the study run's artifacts).
FOREST_FIGURE = "comparisons.png"


def comparisons(rows: list[dict], pairs: list[list], tokens_per_word: float) -> list[dict]:
    """The paired comparisons asked for in report.compare that the study has both sides of."""
    by_variant = {r["variant"]: r for r in rows}
    found = []
    for a, b in ((str(a), str(b)) for a, b in pairs):
        if a in by_variant and b in by_variant:
            ra, rb = by_variant[a], by_variant[b]
            found.append(
                {
                    "variant_a": a,
                    "variant_b": b,
                    **paired_difference(
                        dict(zip(ra["seeds"], ra["test_ppl"], strict=False)),
                        dict(zip(rb["seeds"], rb["test_ppl"], strict=False)),
                        ra["label"],
                        rb["label"],
                        tokens_per_word,
                    ),
                }
            )
    return found


def log_ratio_columns(results: list[dict]) -> dict:
    """The columns every comparison table shares: one log-ratio in both units, with its CI."""
    return {
        "Log-ratio per token": [signed(r["log_ratio"]) for r in results],
        "95% CI per token": [interval(*r["log_ratio_ci95"]) for r in results],
        "Change per token": [f"{r['relative']:+.1%}" for r in results],
        "Log-ratio per word": [signed(r["log_ratio_per_word"]) for r in results],
        "95% CI per word": [interval(*r["log_ratio_per_word_ci95"]) for r in results],
        "Change per word": [f"{r['relative_per_word']:+.1%}" for r in results],
    }


def comparison_table(found: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "B against A": [f"{c['b']} against {c['a']}" for c in found],
            "Seeds where B is better": [f"{c['b_better_in']}/{len(c['seeds'])}" for c in found],
            **log_ratio_columns(found),
        }
    )


def robust_table(found: list[dict]) -> pd.DataFrame:
    """What the comparisons say without assuming normal differences: the median log-ratio with the
    sign test's interval (its exact coverage, which 5 seeds cannot bring to 95%), the sign test,
    and the check of normality that decides which summary the verdict uses."""
    return pd.DataFrame(
        {
            "B against A": [f"{c['b']} against {c['a']}" for c in found],
            "Median per token": [signed(c["median"]["log_ratio"]) for c in found],
            "Interval per token": [interval(*c["median"]["log_ratio_ci95"]) for c in found],
            "Median per word": [signed(c["median"]["log_ratio_per_word"]) for c in found],
            "Interval per word": [interval(*c["median"]["log_ratio_per_word_ci95"]) for c in found],
            "Coverage": [percent(c["median"]["coverage"]) for c in found],
            "Sign test p": [p_value(c["sign_p"]) for c in found],
            "Shapiro-Wilk p": [p_value(c["normality_p"]) for c in found],
        }
    )


def claim_sentence(found: list[dict], claim: dict, tokens_per_word: float) -> str | None:
    """The course chapter's comparison beside ours: its corpus and unit are unknown, so only the
    sign of its log-ratio carries over."""
    ours = next((c for c in found if (c["variant_a"], c["variant_b"]) == (str(claim["a"]), str(claim["b"]))), None)
    if ours is None:
        return None
    theirs = math.log(claim["ppl_b"] / claim["ppl_a"])
    same = "the same direction" if (theirs < 0) == (ours["log_ratio"] < 0) else "the opposite direction"
    return (
        f"The course chapter reports {claim['ppl_a']:g} for {mid_sentence(ours['a'])} and {claim['ppl_b']:g} for "
        f"{mid_sentence(ours['b'])}: a log-ratio of {theirs:+.3f} ({math.expm1(theirs):+.1%}) in a unit it does not "
        f"state, on a corpus it does not name. Ours is {ours['log_ratio']:+.3f} per token and "
        f"{ours['log_ratio_per_word']:+.3f} per word ({tokens_per_word:.3f} tokens per word), so the size of a "
        f"change depends on the unit; only its sign carries over, and ours has {same}."
    )


def factorial_cells(variants: list[str]) -> dict[tuple[int, bool], str] | None:
    """The 2 x 2 of head count x output projection, {(heads, projection): variant}, when the
    study has all four cells for two head counts (the smallest and the largest that do)."""
    cells = {}
    for variant in variants:
        heads, extra = parse_variant(variant)
        if extra in (None, "mix", "nomix"):  # a variant's own file of settings decides the projection
            cells[(heads, extra == "mix" or (extra is None and heads > 1))] = variant
    complete = sorted({h for h, _ in cells if (h, True) in cells and (h, False) in cells})
    if len(complete) < 2:
        return None
    return {(h, p): cells[(h, p)] for h in (complete[0], complete[-1]) for p in (False, True)}


def factorial_contrasts(
    fit: dict,
    log_ppl: np.ndarray,
    variants: list[str],
    cells: dict,
    labels: dict,
    tokens_per_word: float,
    pooled: bool,
) -> list[dict]:
    """The main effects, the interaction and the four simple effects of the 2 x 2. The main
    effect of heads and the split with the projection (the chapter's two builds of one and of
    several heads at equal parameters) are pre-stated; the rest are exploratory and their p-values
    Holm-adjusted together. A simple effect compares two variants, so it is their paired
    comparison over seeds; the main effects and the interaction use the pooled residual variance
    when `pooled` (every variant's seeds scatter alike), else per-seed contrasts as well."""
    (few, _), (many, _) = min(cells), max(cells)

    def cell(heads: int, projection: bool) -> str:
        return cells[(heads, projection)]

    def name(heads: int, projection: bool) -> str:
        return mid_sentence(label(cell(heads, projection), labels))

    more, fewer = (f"{many} heads better", f"{many} heads worse")
    helps = ("the projection helps", "the projection hurts")
    # name, label, pre-stated, weights, what a clearly negative and a clearly positive estimate mean
    definitions = [
        (
            "heads",
            f"{many} heads against {few}, at equal projection (main effect of heads)",
            True,
            {cell(many, False): 0.5, cell(few, False): -0.5, cell(many, True): 0.5, cell(few, True): -0.5},
            (more, fewer),
        ),
        (
            "projection",
            "output projection against none, at equal heads (main effect of the projection)",
            False,
            {cell(few, True): 0.5, cell(few, False): -0.5, cell(many, True): 0.5, cell(many, False): -0.5},
            helps,
        ),
        (
            "interaction",
            f"what the projection does for {many} heads minus what it does for {few} (interaction)",
            False,
            {cell(many, True): 1, cell(many, False): -1, cell(few, True): -1, cell(few, False): 1},
            (
                f"the projection does more good with {many} heads than with {few}",
                f"the projection does more good with {few} head{'s' if few > 1 else ''} than with {many}",
            ),
        ),
        (
            "split_with_projection",
            f"the split, with the projection: {name(many, True)} against {name(few, True)}",
            True,
            {cell(many, True): 1, cell(few, True): -1},
            (more, fewer),
        ),
        (
            "split_without_projection",
            f"the split, without the projection: {name(many, False)} against {name(few, False)}",
            False,
            {cell(many, False): 1, cell(few, False): -1},
            (more, fewer),
        ),
        (
            "projection_with_many",
            f"the projection, given {many} heads: {name(many, True)} against {name(many, False)}",
            False,
            {cell(many, True): 1, cell(many, False): -1},
            helps,
        ),
        (
            "projection_with_few",
            f"the projection, given {few} head{'s' if few > 1 else ''}: {name(few, True)} against {name(few, False)}",
            False,
            {cell(few, True): 1, cell(few, False): -1},
            helps,
        ),
    ]
    results = []
    for key, text, pre_stated, weights, meaning in definitions:
        row = [weights.get(v, 0) for v in variants]
        simple = len(weights) == 2
        method = "paired" if simple else "pooled" if pooled else "per-seed"
        if method == "pooled":
            result = contrast(fit, row, tokens_per_word)
        else:
            result = per_seed_contrast(log_ppl, row, tokens_per_word)
            if not result["normal"]:  # one collapsed seed makes the mean: the sign test decides, as for a pair
                result |= {"p": result["sign_p"], "significant": bool(result["sign_p"] < 0.05)}
                method += ", median"
        # (A, B) as in report.compare: B has weight 1, A weight -1
        pair = tuple(sorted(weights, key=weights.get)) if simple else None
        results.append(
            {"name": key, "label": text, "pre_stated": pre_stated, "meaning": meaning, "method": method}
            | {"pair": pair, **result}
        )
    exploratory = [r for r in results if not r["pre_stated"]]
    for result, adjusted in zip(exploratory, holm([r["p"] for r in exploratory]), strict=True):
        result["p_holm"] = adjusted
        result["significant"] = bool(adjusted < 0.05)
    return results


def contrast_sentence(result: dict) -> str:
    low, high = result["log_ratio_ci95"]
    if math.isnan(low):
        return (
            f"{result['label'].capitalize()}: {result['relative']:+.1%} per token; with one seed there is no interval."
        )
    evidence = (
        p_is(result["p"])
        if result["pre_stated"]
        else f"exploratory, Holm-adjusted {p_is(result['p_holm'])} (unadjusted {p_value(result['p'])})"
    )
    if result.get("normal") is False:
        median = result["median"]
        return (
            f"{result['label'].capitalize()}: median {median['relative']:+.1%} per token, "
            f"{median['relative_per_word']:+.1%} per word ({median['coverage']:.1%} distribution-free interval "
            f"{interval(*median['log_ratio_ci95'])} per token; sign test, {evidence}; the per-seed values are not "
            f"normal, Shapiro-Wilk {p_is(result['normality_p'])}, so the mean, {result['relative']:+.1%}, is no "
            f"summary): {contrast_outcome(result, median['log_ratio'])}."
        )
    return (
        f"{result['label'].capitalize()}: {result['relative']:+.1%} per token, {result['relative_per_word']:+.1%} per "
        f"word (log-ratio {result['log_ratio']:+.3f}, 95% CI {interval(low, high)} per token; {evidence}): "
        f"{contrast_outcome(result, result['log_ratio'])}."
    )


def contrast_outcome(result: dict, estimate: float) -> str:
    if result["significant"]:
        return result["meaning"][estimate > 0]
    return "not resolved" + (" after the adjustment" if not result["pre_stated"] and result["p"] < 0.05 else "")


def contrast_table(results: list[dict]) -> pd.DataFrame:
    """One row per contrast; a row whose per-seed values are not normal gives their median, its
    distribution-free interval with that interval's coverage, and the sign test's p."""
    robust = [r.get("normal") is False for r in results]
    columns = log_ratio_columns([r["median"] if median else r for r, median in zip(results, robust, strict=True)])
    if any(robust):
        columns = {name.replace("95% CI", "Interval"): values for name, values in columns.items()}
        columns["Coverage"] = [
            f"{r['median']['coverage']:.1%}" if median else "95%" for r, median in zip(results, robust, strict=True)
        ]
    return pd.DataFrame(
        {
            "Contrast": [r["label"] for r in results],
            "Pre-stated": ["yes" if r["pre_stated"] else "no" for r in results],
            "Analysis": [r["method"] for r in results],
            **columns,
            "p": [p_value(r["p"]) for r in results],
            "p, Holm-adjusted": [p_value(r["p_holm"]) if "p_holm" in r else "" for r in results],
        }
    )


def pooling_check(ratio: float, limit: float | None) -> tuple[bool, str]:
    """Whether a residual variance may be pooled over variants whose largest variance is `ratio`
    times the smallest, by the study's limit (report.pool_if_variance_ratio_below), and why in
    words. A study that sets no limit never pools."""
    if limit is None:
        return False, "and the study sets no limit (report.pool_if_variance_ratio_below)"
    if ratio < limit:
        return True, f"under the limit of {limit:g} (report.pool_if_variance_ratio_below)"
    return False, f"not under the limit of {limit:g} (report.pool_if_variance_ratio_below)"


def factorial_blocks(
    contrasts: list[dict], ratio: float, pooled: bool, outcome: str, compared: set[tuple[str, str]]
) -> list:
    """The 2 x 2's table, and a sentence for each contrast that the paired comparisons above do
    not already give (one verdict per comparison). `pooled` and `outcome` are pooling_check's
    answer for the four variants' variance ratio `ratio`."""
    check = f"Among its four variants the largest residual variance is {ratio:.1f} times the smallest, {outcome}"
    methods = (
        f"{check}, so the main effects and the interaction use the residual variance of the additive model of "
        "these four, pooled."
        if pooled
        else f"{check}, so every contrast is computed within each seed and then given a Student-t interval over the "
        "seeds (per-seed), which assumes nothing about how each variant's seeds scatter."
    )
    if any(c.get("normal") is False for c in contrasts):
        methods += (
            " Where Shapiro-Wilk rejects normal per-seed values (Analysis: median), the table gives their median "
            "with its distribution-free interval and the p of the sign test, which assume only independent seeds."
        )
    return [
        ("heading", "Heads or projection: the 2 x 2"),
        (
            "text",
            "The four variants of the 2 x 2 cross head count with the output projection that mixes the heads. "
            "Below are its two main effects, the interaction, and the four simple effects: each factor at each "
            "level of the other. A simple effect compares two variants, so it is their paired comparison over "
            f"seeds. {methods} Pre-stated, before these results: the main effect of heads and the split with "
            "the projection (the chapter's build of 4 heads against 1 head + projection, at equal parameters). "
            "The rest are exploratory; their p-values are Holm-adjusted together (their CIs are not adjusted).",
        ),
        ("table", contrast_table(contrasts)),
        *[("text", contrast_sentence(c)) for c in contrasts if c.get("pair") not in compared],
    ]


def log_ppl_matrix(rows: list[dict]) -> tuple[np.ndarray, list[int]]:
    """Log test perplexity, variants x the seeds every variant has."""
    seeds = sorted(set.intersection(*(set(r["seeds"]) for r in rows)))
    return np.log([[dict(zip(r["seeds"], r["test_ppl"], strict=False))[s] for s in seeds] for r in rows]), seeds


def pooled_blocks(
    rows: list[dict], found: list[dict], settings: dict, tokens_per_word: float, figure_dir: Path
) -> tuple[list, dict]:
    """Every variant together (additive model, seed as block), the 2 x 2 when the study has it,
    and the forest plot of every comparison."""
    blocks, summary = [], {}
    variants = [r["variant"] for r in rows]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    contrasts = []
    if len(rows) > 1:
        log_ppl, seeds = log_ppl_matrix(rows)
        fit = additive_fit(log_ppl)
        summary["pooled"] = {
            "f": fit["f"],
            "p": fit["p"],
            "df_variant": fit["df_variant"],
            "df_residual": fit["df_residual"],
            "residual_sd": fit["residual_sd"],
        }
        if fit["df_residual"] == 0:
            blocks.append(
                ("text", "With one seed there is no residual variance, so the variants are not analysed together.")
            )
        elif settings.get("sweep"):
            pass  # the sweep's own section analyses the head counts together, with their shape
        else:
            differ = "differ" if fit["p"] < 0.05 else "do not clearly differ"
            ratio, limit = variance_ratio(fit), settings.get("pool_if_variance_ratio_below")
            pooled, outcome = pooling_check(ratio, limit)
            scatter = ", ".join(
                f"{mid_sentence(label(v, labels))} {sd:.4f}"
                for v, sd in zip(variants, fit["variant_residual_sd"], strict=True)
            )
            blocks.append(
                (
                    "text",
                    f"All {len(rows)} variants together, on the seeds they share ({', '.join(map(str, seeds))}): "
                    "log-perplexity = seed effect + variant effect + error, the residual variance pooled "
                    f"over every variant ({fit['df_residual']} degrees of freedom, residual sd "
                    f"{fit['residual_sd']:.4f} in log-perplexity). The variants {differ}: "
                    f"F({fit['df_variant']}, {fit['df_residual']}) = {fit['f']:.2f}, {p_is(fit['p'])}. "
                    "Pooling assumes that every variant's seeds scatter alike. Checked: each variant's own "
                    f"residual sd is {scatter}; the largest variance is {ratio:.1f} times the smallest, "
                    + (f"{outcome}." if pooled else f"{outcome}, so this F test, which pools, is indicative only."),
                )
            )
            summary["pooled"]["variance_ratio"] = ratio
            cells = factorial_cells(variants)
            if cells:
                factorial_rows = [variants.index(v) for v in cells.values()]
                cell_variants = list(cells.values())
                cell_fit = additive_fit(log_ppl[factorial_rows])
                cell_ratio = variance_ratio(cell_fit)
                cell_pooled, cell_outcome = pooling_check(cell_ratio, limit)
                contrasts = factorial_contrasts(
                    cell_fit, log_ppl[factorial_rows], cell_variants, cells, labels, tokens_per_word, cell_pooled
                )
                compared = {(c["variant_a"], c["variant_b"]) for c in found}
                blocks += factorial_blocks(contrasts, cell_ratio, cell_pooled, cell_outcome, compared)
                summary["pooled"]["factorial_variance_ratio"] = cell_ratio
                summary["contrasts"] = {c["name"]: contrast_numbers(c) for c in contrasts}
    forest_rows = [
        {**c, "label": f"{c['b']} against {c['a']}\n(paired, {len(c['seeds'])} seed{'s' * (len(c['seeds']) > 1)})"}
        for c in found
    ]
    forest_rows += [
        {
            **c,
            "label": c["label"].replace(" (", "\n(", 1).replace(": ", ":\n", 1) + f", {c['method']}",
            "kind": "pre-stated" if c["pre_stated"] else "exploratory",
        }
        for c in contrasts
    ]
    claim = settings.get("chapter_claim")
    if claim:
        theirs = math.log(claim["ppl_b"] / claim["ppl_a"])
        for row in forest_rows:
            if (row.get("variant_a"), row.get("variant_b")) == (str(claim["a"]), str(claim["b"])) or row.get(
                "name"
            ) == "chapter":
                row["reference"] = theirs
    # Written even with no comparison, so that the stage's outputs are the same for every study.
    figure = report_figures.forest(
        forest_rows, figure_dir / FOREST_FIGURE, "course chapter (its unit unknown)" if claim else None
    )
    robust = (
        " A square: the median with its distribution-free interval, where the seeds' differences are not normal."
        if any(row.get("normal") is False for row in forest_rows)
        else ""
    )
    caption = (
        "Each comparison of B against A: the change in perplexity with its 95% CI, per token (left) and per "
        "word (right); left of 0, B is better. Hollow: exploratory."
        + robust
        + (" The open diamond: the course chapter's change, in its own unstated unit." if claim else "")
    )
    return blocks + ([("figure", (figure, caption))] if forest_rows else []), summary


def flat_numbers(result: dict) -> dict:
    """One number per key, which `dvc exp show` and `dvc metrics show` can put in columns (they
    show a list as one string)."""
    flat = {}
    for key, value in result.items():
        if key.endswith("ci95"):
            flat[f"{key}_low"], flat[f"{key}_high"] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[key] = value
    return flat


def contrast_numbers(result: dict) -> dict:
    """A contrast's numbers for summary.json and reports/metrics/; where its per-seed values are
    not normal, also the median's, which then stand for it (headline.percent_changes)."""
    if result.get("normal") is not False:
        return flat_numbers(result)
    return flat_numbers(result) | {"normal": False, "median": flat_numbers(result["median"])}


def exp_show_columns(found: list[dict]) -> dict:
    """The comparisons once more, keyed `B_vs_A` with one number per key (`compare.4_vs_1.log_ratio`)."""
    keep = (
        "relative",
        "relative_ci95",
        "log_ratio",
        "log_ratio_ci95",
        "relative_per_word",
        "relative_per_word_ci95",
        "log_ratio_per_word",
        "log_ratio_per_word_ci95",
        "diff_mean",
        "b_better_in",
    )
    return {f"{c['variant_b']}_vs_{c['variant_a']}": flat_numbers({k: c[k] for k in keep}) for c in found}


def stated_estimate(comparison: dict) -> tuple[str, float, str, list[float]]:
    """How the verdict states a comparison of several seeds: ("", the mean's relative change, "95%
    CI", its bounds), or where the seeds' differences are not normal ("median ", the median's
    change, the sign test's interval with its coverage, its bounds)."""
    if comparison["normal"]:
        return "", comparison["relative"], "95% CI", comparison["relative_ci95"]
    median = comparison["median"]
    return "median ", median["relative"], f"{median['coverage']:.1%} interval", median["relative_ci95"]


def headline_line(comparison: dict) -> str:
    """One line of the report's headline box: a comparison's per-token change with its CI, or its
    median with the sign test's interval where the seeds' differences are not normal."""
    a, b, n = comparison["a"], comparison["b"], len(comparison["seeds"])
    if n < 2:
        return (
            f"{b} against {a}: perplexity {comparison['relative']:+.1%} per token (one seed: no confidence interval)."
        )
    word, change, interval, bounds = stated_estimate(comparison)
    line = (
        f"{b} against {a}: {word}perplexity {change:+.1%} per token, {interval} {percent_interval(*bounds)}; "
        f"lower for {b} in {comparison['b_better_in']} of {n} seeds"
    )
    if comparison["normal"]:
        return line + "."
    return (
        f"{line}, sign test {p_is(comparison['sign_p'])} (the differences are not normal: mean "
        f"{comparison['relative']:+.1%})."
    )


def answer_line(comparison: dict) -> str:
    """headline_line in one short line, for the study run's description in MLflow, whose page
    shows about five lines of it before folding the rest away."""
    a, b, n = comparison["a"], comparison["b"], len(comparison["seeds"])
    if n < 2:
        return f"{b} against {a}: {comparison['relative']:+.1%} per token (one seed: no interval)"
    word, change, interval, bounds = stated_estimate(comparison)
    return (
        f"{b} against {a}: {word}{change:+.1%} per token, {interval} {percent_interval(*bounds)}; "
        f"better in {comparison['b_better_in']} of {n} seeds"
    )


def comparison_blocks(found: list[dict], settings: dict, tokens_per_word: float, unanswered: str | None = None) -> list:
    """The comparisons section; where the models are undertrained (`unanswered`, the reason), it
    says so before any number and states no verdict."""
    if not found:
        return [
            ("heading", "The comparisons"),
            (
                "text",
                f"No comparison: none of the pairs in report.compare ({settings.get('compare', [])}) "
                "has both of its variants in study.variants.",
            ),
        ]
    blocks = [
        ("heading", "The comparisons"),
        *([("text", unanswered)] if unanswered else []),
        (
            "text",
            "Each comparison of B against A is the mean over seeds of log ppl(B) - log ppl(A), paired by "
            "seed (same seed, same data order), with a 95% Student-t interval on the seeds' spread; "
            "negative means B is better. The same log-ratio per word is the one per token times "
            f"{tokens_per_word:.3f} tokens per word, so a relative change differs between the units, its "
            "sign does not.",
        ),
        ("table", comparison_table(found)),
        (
            "text",
            "The t interval assumes the per-seed log-ratios are normal; Shapiro-Wilk checks that (a small p "
            "rejects it, and with few seeds it can miss a departure). Beside it, what assumes only "
            "independent seeds: the median log-ratio with the interval the sign test gives (order "
            "statistics, with its exact coverage: below 95% with fewer than 6 seeds), and the sign test. "
            "Where normality is rejected the verdict follows these.",
        ),
        ("table", robust_table(found)),
        *([] if unanswered else [("text", verdict(c)) for c in found]),
    ]
    claim = settings.get("chapter_claim")
    sentence = claim_sentence(found, claim, tokens_per_word) if claim else None
    if sentence:
        blocks.append(("text", sentence))
    return blocks
