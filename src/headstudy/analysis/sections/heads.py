"""The report's sections "Inside the heads" and "Several spotlights?", from the inspect stage's
heads.json. Heads are numbered arbitrarily in each trained model, so inspect orders them within
each model by mean attention distance (rank 0 = the most local) before averaging over seeds; the
per-seed table shows whether that order holds the same pattern in every seed."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from headstudy.analysis.rendering.wording import label, mid_sentence, p_is, p_value
from headstudy.analysis.statistics import against_null

POSITION_WORDS = {
    "above": "more than every union of {k} independent single heads",
    "within": "within the range of unions of {k} independent single heads",
    "below": "fewer than every union of {k} independent single heads",
    "not above": "no more than the union of all {n} single-head models",
    "undetermined": "more than the union of all {n} single-head models, but there are fewer than {k}",
}


def cell(row: dict, key: str, digits: int = 2) -> str:
    return f"{row[key]['mean']:.{digits}f} ± {row[key]['sd']:.{digits}f}"


def head_label(row: dict) -> str:
    return f"layer {row['layer']}, " + (f"rank {row['rank']}" if row["heads"] > 1 else "the only head")


def heads_table(rows: list[dict], name) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Model": [name(r["variant"]) for r in rows],
            "Head (by mean distance)": [head_label(r) for r in rows],
            "Role": [r["role"] for r in rows],
            "Previous token": [cell(r, "previous_token") for r in rows],
            "Self": [cell(r, "self") for r in rows],
            "First position": [cell(r, "first_position") for r in rows],
            "Distance (tokens)": [cell(r, "distance", 1) for r in rows],
            "Entropy, nats": [cell(r, "entropy") for r in rows],
            "Uniform entropy, nats": [f"{r['uniform_entropy']['mean']:.2f}" for r in rows],
            "Perplexity rise when zeroed": [cell(r, "ablation_delta_ppl", 1) for r in rows],
        }
    )


def per_seed_table(models: list[dict], name) -> pd.DataFrame | None:
    """Each multi-head model's heads in rank order, per seed: the model's own head number and its
    mean distance, so a reader sees whether every seed learned the same arrangement."""
    lines = []
    for model in models:
        if model["heads"] < 2:
            continue
        for layer in sorted({row["layer"] for row in model["head_scores"]}):
            ranked = sorted((r for r in model["head_scores"] if r["layer"] == layer), key=lambda r: r["rank"])
            lines.append(
                {
                    "Model": name(model["variant"]),
                    "Seed": str(model["seed"]),
                    "Layer": str(layer),
                    **{f"Rank {r['rank']}: distance (head)": f"{r['distance']:.1f} ({r['head']})" for r in ranked},
                }
            )
    return pd.DataFrame(lines).fillna("") if lines else None


def spotlight_table(rows: list[dict], name, substantial: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Model": [name(r["variant"]) for r in rows],
            "Layer": [str(r["layer"]) for r in rows],
            f"Positions getting > {substantial:g} of some head's weight": [cell(r, "covered_positions") for r in rows],
            "Distinct top-1 targets of the heads": [cell(r, "distinct_top1") for r in rows],
        }
    )


def spread(values: list[float]) -> str:
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}–{high}"


def null_table(spotlight: dict) -> pd.DataFrame:
    rows = spotlight["rows"]
    return pd.DataFrame(
        {
            "Layer": [str(r["layer"]) for r in rows],
            "Threshold": [f"{r['threshold']:g}" for r in rows],
            f"{spotlight['heads']} heads, per seed": [", ".join(f"{c:.2f}" for c in r["multi_covered"]) for r in rows],
            f"Unions of {spotlight['null_heads']} single heads": [spread(r["null_covered"]) for r in rows],
            "One single head": [spread(r["single_covered"]) for r in rows],
            "Position": [r["position"] for r in rows],
        }
    )


def null_sentences(spotlight: dict, substantial: float, name) -> list[str]:
    """What the null shows, in words that follow it: the spotlight picture is said to hold only
    where the multi-head model covers more than every union of as many independent single heads."""
    k, n, multi = spotlight["heads"], len(spotlight["singles"]), name(spotlight["multi"])
    members = sorted({name(m["variant"]) for m in spotlight["singles"]})
    seeds = sorted({m["seed"] for m in spotlight["singles"]})
    sentences = [
        f"A null for this measure: {k} heads that share nothing but the data. The union of {spotlight['null_heads']} "
        "single heads taken from independently trained single-head models "
        f"({' and '.join(map(mid_sentence, members))}, seeds "
        f"{', '.join(map(str, seeds))}: {n} models, {spotlight['null_unions']} unions), on the same test windows, "
        f"covers what {k} heads would cover if each attended as a lone head does. Several heads covering more than one "
        f"head is expected by that alone. This is the weaker null: its members are wider than the heads of a "
        f"multi-head model and each trained alone, and lone heads tend to learn alike, so coverage beyond it shows "
        f"that a model's heads differ from each other, not that they divide the work."
    ]
    for layer in sorted({r["layer"] for r in spotlight["rows"]}):
        rows = [r for r in spotlight["rows"] if r["layer"] == layer]
        main = min(rows, key=lambda r: abs(r["threshold"] - substantial))
        words = POSITION_WORDS[main["position"]].format(k=k, n=n)
        consequence = {
            "above": "so the heads of one model differ from each other more than independent single heads do; "
            "against this weaker null that is all the measure shows",
            "within": "so the heads look at more places than one head only as much as unrelated heads would: "
            "this measure gives no evidence that they divide the work",
            "below": "so the heads of one model overlap more than independent heads do: the spotlight picture "
            "does not hold here",
            "not above": "so the spotlight picture is not supported by this measure",
            "undetermined": "so this null cannot decide; more single-head models would",
        }[main["position"]]
        by_position: dict[str, list[str]] = {}
        for r in rows:
            by_position.setdefault(r["position"], []).append(f"{r['threshold']:g}")
        sweep = "; ".join(f"{position} at {', '.join(thresholds)}" for position, thresholds in by_position.items())
        sentences.append(
            f"Layer {layer}, threshold {main['threshold']:g}: {multi} cover "
            f"{', '.join(f'{c:.2f}' for c in main['multi_covered'])} positions per query (one value per seed), "
            f"{words} ({spread(main['null_covered'])}); {consequence}. Over the thresholds "
            f"{rows[0]['threshold']:g} to {rows[-1]['threshold']:g}: {sweep}."
        )
    return sentences


FAIR_POSITION_WORDS = {
    "above": "more than every one",
    "within": "within their range",
    "below": "fewer than every one",
}


def null_range(summary: dict) -> str:
    return f"{summary['min']:.2f}–{summary['max']:.2f}, median {summary['median']:.2f}"


def main_threshold(rows: list[dict], substantial: float) -> dict:
    """The row at the study's own threshold of substantial weight (or the nearest)."""
    return min(rows, key=lambda r: abs(r["threshold"] - substantial))


def union_counting(fair: dict, name) -> str:
    """How many unions each null counted, and whether every union or a seeded sample."""
    counts = [
        f"{name(v['variant'])}: {v['models']} models (seeds {', '.join(map(str, v['seeds']))}), "
        f"{v['cross_model_unions']['counted']:,} cross-model unions of {v['cross_model_unions']['of']:,} and "
        f"{v['rank_matched_unions']['counted']:,} rank-matched unions of {v['rank_matched_unions']['of']:,}"
        for v in fair["variants"]
        if v["available"]
    ]
    sampled = any(
        v["cross_model_unions"]["counted"] < v["cross_model_unions"]["of"]
        or v["rank_matched_unions"]["counted"] < v["rank_matched_unions"]["of"]
        for v in fair["variants"]
        if v["available"]
    )
    how = (
        f"A null of more than {fair['max_unions']:,} unions is a random sample of {fair['max_unions']:,} of them, "
        f"drawn with seed {fair['sample_seed']} (conf/inspect's spotlight.fair_null); each union is counted exactly"
        if sampled
        else "Every union is counted, exactly"
    )
    return (
        f"{'; '.join(counts)}. {how}: each head's cells (window, query, position) above the threshold are packed "
        "into bit masks, a union is their bitwise OR and its coverage the number of bits set."
    )


def fair_null_intro(fair: dict, name) -> str:
    k = next((v["heads"] for v in fair["variants"] if v["available"]), 4)
    return (
        f"A fairer null, built from the multi-head models themselves (docs/compute-plan.md, 2026-12-03, from 00:52). "
        f"Cross-model unions take {k} heads, each from a different model of the same variant, any head: heads of "
        f"the same width, trained in the same kind of model, that never trained together. Rank-matched unions take "
        f"the head of each distance rank (0 to {k - 1}) from a different model, so that every union holds one head of "
        f"each rank, as a model does. {union_counting(fair, name)} A range is no test, so the rank-matched null has "
        "one: a permutation test of the models' mean coverage against the same mean after each rank's heads are "
        "shuffled among the models, as they may be if a head's coverage depends on its rank and not on the heads it "
        f"trained with (conf/inspect's spotlight.fair_null.shuffles and alpha, {fair['alpha']:g}). Beside them, the "
        "pairwise overlap: the attention "
        "mass two heads share per query (the sum over positions of the smaller of their two weights, mean over query "
        "positions; 0 for heads that never look at the same place, 1 for identical heads), for pairs of heads within "
        "one model against pairs of the same two ranks taken from two different models."
    )


def cross_model_words(row: dict, seeds: int) -> str:
    cross = row["cross_model"]
    if cross["position"] == "above":
        return (
            "the heads of one model repeat a role less often than heads of the same kind picked from different models"
        )
    if cross["seeds_above_median"] == seeds:
        return (
            "the heads of one model cover more than most unions of heads picked from different models, which often "
            "repeat a role, but not more than every one"
        )
    if cross["position"] == "below":
        return "heads picked from different models cover more than a model's own heads"
    return "heads picked from different models cover about as much as a model's own heads"


SHUFFLE_WORDS = {
    True: "the heads of one model cover more than heads of the same ranks from other seeds, so what they cover "
    "depends on the heads having trained together, beyond each head's distance rank; that is as far as this measure "
    "goes",
    False: "the heads of one model cover no more than heads of the same ranks from other seeds do by chance. So this "
    "measure shows that the heads of a model differ (a set of different distances, much the same in every seed); it "
    "does not show that they coordinate or divide the work",
}


def shuffle_words(shuffle: dict, alpha: float, position: str) -> str:
    """The rank-shuffle test in a sentence, worded by its p-value against alpha (and, where the
    models' own heads cover less than every rank-matched union, by that)."""
    how = (
        f"exact over all {shuffle['shuffles']:,} shuffles"
        if shuffle["exact"]
        else f"{shuffle['shuffles']:,} random shuffles"
    )
    return (
        f"with each rank's heads shuffled among the models they cover {shuffle['null_mean']:.2f} on average against "
        f"the models' own {shuffle['observed']:.2f} (a permutation test, {how}, one-sided {p_is(shuffle['p'])}): "
        + (
            SHUFFLE_WORDS[True]
            if shuffle["p"] < alpha
            else "the heads of one model overlap more than heads of those ranks trained apart"
            if position == "below"
            else SHUFFLE_WORDS[False]
        )
    )


def single_null_words(variant: dict, row: dict, spotlight: dict) -> str:
    """Where a variant stands against the unions of single heads (the same null for any variant
    with as many heads), or nothing when that null is not at hand."""
    single = [
        r
        for r in spotlight.get("rows", [])
        if (r["layer"], r["threshold"]) == (row["layer"], row["threshold"]) and spotlight["heads"] == variant["heads"]
    ]
    if not single:
        return ""
    position = against_null(row["multi_covered"], single[0]["null_covered"], complete=spotlight["complete"])
    words = POSITION_WORDS[position].format(k=spotlight["heads"], n=len(spotlight["singles"]))
    return f" That is {words} ({spread(single[0]['null_covered'])}, the weaker null)."


def sweep_words(rows: list[dict], key: str) -> str:
    by_position: dict[str, list[str]] = {}
    for r in rows:
        by_position.setdefault(r[key]["position"], []).append(f"{r['threshold']:g}")
    return "; ".join(f"{position} at {', '.join(thresholds)}" for position, thresholds in by_position.items())


def overlap_sentence(variant: dict, layer: int, margin: float, name) -> str:
    summary = next(s for s in variant["overlap_summary"] if s["layer"] == layer)
    difference = summary["within_minus_across"]
    if difference < -margin:
        reading = (
            f"heads of one model share less than heads of the same ranks trained apart, by more than {margin:g}: a "
            "sign that training together pushes them apart"
        )
    elif difference > margin:
        reading = f"heads of one model share more than heads of the same ranks trained apart, by more than {margin:g}"
    else:
        reading = f"within {margin:g} of each other: no sign that training together pushes the heads apart"
    return (
        f"Pairwise overlap, {name(variant['variant'])}, layer {layer}: pairs of heads within one model share "
        f"{summary['within']['mean']:.3f} of a query's attention (sd {summary['within']['sd_over_seeds']:.3f} over "
        f"seeds), pairs of the same two ranks from different models {summary['across']['mean']:.3f} (sd "
        f"{summary['across']['sd_over_pairs']:.3f} over {summary['across']['pairs']} pairs); within minus across "
        f"{difference:+.3f}: {reading}."
    )


def fair_null_sentences(
    variant: dict, spotlight: dict, substantial: float, margin: float, alpha: float, name
) -> list[str]:
    """What the fair null shows for one variant, in words that follow it: more than independent
    single heads (the weaker null), then against heads of the same kind from other models, then
    against a rank-matched set from other seeds, whose permutation test alone decides what may be said."""
    multi, seeds = name(variant["variant"]), variant["models"]
    sentences = []
    for layer in sorted({r["layer"] for r in variant["rows"]}):
        rows = [r for r in variant["rows"] if r["layer"] == layer]
        main = main_threshold(rows, substantial)
        cross, ranked = main["cross_model"], main["rank_matched"]
        sentences.append(
            f"{multi}, layer {layer}, threshold {main['threshold']:g}: they cover "
            f"{', '.join(f'{c:.2f}' for c in main['multi_covered'])} positions per query (one value per seed)."
            f"{single_null_words(variant, main, spotlight)} Against unions of {variant['heads']} heads from "
            f"{variant['heads']} different models of the variant ({null_range(cross)}): "
            f"{FAIR_POSITION_WORDS[cross['position']]}, above the median in {cross['seeds_above_median']} of {seeds} "
            f"seeds: {cross_model_words(main, seeds)}. Against rank-matched unions ({null_range(ranked)}): "
            f"{FAIR_POSITION_WORDS[ranked['position']]}; "
            f"{shuffle_words(main['rank_shuffle'], alpha, ranked['position'])}. Over the "
            f"thresholds {rows[0]['threshold']:g} to {rows[-1]['threshold']:g}, across models: "
            f"{sweep_words(rows, 'cross_model')}; rank-matched: {sweep_words(rows, 'rank_matched')}."
        )
        sentences.append(overlap_sentence(variant, layer, margin, name))
    return sentences


def prediction_sentences(variant: dict, substantial: float, margin: float, name) -> list[str]:
    """The fair null's three predictions (docs/compute-plan.md, 2026-12-03, from 00:52, committed
    before the models were trained), for the predicted variant at the study's threshold in layer 0,
    each said to hold or not."""
    main = main_threshold([r for r in variant["rows"] if r["layer"] == 0], substantial)
    seeds, above_median = variant["models"], main["cross_model"]["seeds_above_median"]
    difference = next(s for s in variant["overlap_summary"] if s["layer"] == 0)["within_minus_across"]
    held = {True: "held", False: "did not hold"}
    return [
        f"The fair null's predictions, committed before the study's models were trained (docs/compute-plan.md, "
        f"2026-12-03, from 00:52), for {name(variant['variant'])} at threshold {main['threshold']:g}, layer 0:",
        f"1. More positions than the median cross-model union: {held[above_median == seeds]} (in {above_median} of "
        f"{seeds} seeds).",
        f"2. Within the range of the rank-matched unions: {held[main['rank_matched']['position'] == 'within']} "
        f"({main['rank_matched']['position']}).",
        f"3. Pairs within a model share less attention than pairs of the same two ranks from different models by "
        f"less than {margin:g}: {held[difference > -margin]} (within minus across {difference:+.3f}).",
    ]


def fair_null_table(variant: dict, name) -> pd.DataFrame:
    rows = variant["rows"]
    return pd.DataFrame(
        {
            "Layer": [str(r["layer"]) for r in rows],
            "Threshold": [f"{r['threshold']:g}" for r in rows],
            f"{name(variant['variant'])}, per seed": [", ".join(f"{c:.2f}" for c in r["multi_covered"]) for r in rows],
            "Heads from different models": [null_range(r["cross_model"]) for r in rows],
            "Position": [r["cross_model"]["position"] for r in rows],
            "One head per rank, different models": [null_range(r["rank_matched"]) for r in rows],
            "Position, rank-matched": [r["rank_matched"]["position"] for r in rows],
            "Rank shuffle: mean, p": [
                f"{r['rank_shuffle']['null_mean']:.2f}, {p_value(r['rank_shuffle']['p'])}" for r in rows
            ],
        }
    )


def overlap_table(variant: dict) -> pd.DataFrame:
    rows = variant["overlap"]
    return pd.DataFrame(
        {
            "Layer": [str(r["layer"]) for r in rows],
            "Ranks": [f"{r['ranks'][0]} and {r['ranks'][1]}" for r in rows],
            "Within one model, per seed": [", ".join(f"{v:.3f}" for v in r["within_by_seed"]) for r in rows],
            "Within: mean ± sd": [f"{r['within']['mean']:.3f} ± {r['within']['sd']:.3f}" for r in rows],
            "Same ranks, different models: mean ± sd": [
                f"{r['across']['mean']:.3f} ± {r['across']['sd']:.3f}" for r in rows
            ],
            "Range over pairs": [f"{r['across']['min']:.3f}–{r['across']['max']:.3f}" for r in rows],
            "Within − across": [f"{r['within_minus_across']:+.3f}" for r in rows],
        }
    )


def fair_null_blocks(heads: dict, name) -> list:
    """The fair null's part of "Several spotlights?": what it is, per variant its sentences and
    tables, the predictions for the predicted variant, and the figure."""
    fair = heads.get("fair_null") or {}
    variants = fair.get("variants", [])
    if not variants:
        return []
    substantial, margin = heads["substantial_weight"], fair["overlap_margin"]
    spotlight = heads.get("spotlight") or {}
    blocks: list = [("text", fair_null_intro(fair, name))] if any(v["available"] for v in variants) else []
    for variant in variants:
        if not variant["available"]:
            why = (
                f"a union takes each of its {variant['heads']} heads from a different model of the variant, and the "
                f"study has {variant['models']}"
                if variant["models"]
                else "the study has no model of it (conf/inspect's spotlight.multi)"
            )
            blocks.append(("text", f"No fair null for {name(variant['variant'])}: {why}."))
            continue
        exploratory = "" if variant["variant"] == fair["predicted"] else " (exploratory: nothing was predicted for it)"
        blocks.append(
            (
                "text",
                f"{name(variant['variant'])}{exploratory}: positions covered per query at every threshold, against "
                "the two fair nulls (the range of their unions, and its median) and the rank shuffle (the mean "
                "coverage with each rank's heads shuffled among the models, and the one-sided p of the models' own):",
            )
        )
        blocks.append(("table", fair_null_table(variant, name)))
        blocks += [
            ("text", sentence)
            for sentence in fair_null_sentences(variant, spotlight, substantial, margin, fair["alpha"], name)
        ]
        blocks.append(("table", overlap_table(variant)))
        if variant["variant"] == fair["predicted"]:
            blocks += [("text", sentence) for sentence in prediction_sentences(variant, substantial, margin, name)]
    for path in heads.get("figures", {}).get("spotlight_nulls", []):
        blocks.append(
            (
                "figure",
                (
                    Path(path),
                    "The spotlight measure against its three nulls, a row per multi-head variant. Left: at each "
                    "threshold, positions covered per query by each seed's own heads (dots) and by unions of as many "
                    "heads (box: quartiles, line: range, tick: median): single heads of 1-head models (grey, the "
                    "weaker null), any heads of different models of the variant (blue), one head of each distance "
                    "rank from different models (orange). Right: the attention mass two heads share per query, pairs "
                    "within one model (a dot per seed) against pairs of the same two ranks from different models.",
                ),
            )
        )
    return blocks


def attention_map_caption(path: Path, labels: dict) -> str:
    """`attention_h4-nomix_layer0.png` (inspect's name): whose map it is."""
    found = re.fullmatch(r"attention_h(.+)_layer(\d+)", path.stem)
    if found is None:
        return f"Attention map {path.stem.replace('_', ' ')}."
    variant, layer = found.groups()
    return (
        f"{label(variant, labels)}, layer {int(layer)}: each head's attention on the sentence, a row per "
        "query token, a column per token it attends to."
    )


def heads_blocks(heads: dict, labels: dict) -> list:
    def name(variant: str) -> str:
        return label(variant, labels)

    rules = "; ".join(
        f"{role}: {rule['score'].replace('_', '-')} score above {rule['above']}"
        for role, rule in heads["roles"].items()
    )
    seeds = ", ".join(map(str, heads["rows"][0]["seeds"])) if heads["rows"] else ""
    blocks = [
        ("heading", "Inside the heads"),
        (
            "text",
            "Measured on the whole test split, in every layer, over every query position after the first: "
            "the mean attention weight on the previous token, on the token itself and on the first position "
            "of the window; the mean distance attended, in tokens; the entropy of the attention, beside that "
            "of uniform attention over the visible positions; and the rise in test perplexity when the head's "
            "output is zeroed (for a 1-head model that removes attention altogether). A head's number means "
            "nothing across trained models, so within each model the heads of a layer are ranked by mean "
            f"attention distance (rank 0 the most local) and averaged over seeds {seeds} by rank: mean ± sd.",
        ),
        ("table", heads_table(heads["rows"], name)),
        (
            "text",
            f"A head is named for a role only when its score passes the threshold set in conf/inspect/ "
            f"({rules}); otherwise it is called mixed.",
        ),
    ]
    per_seed = per_seed_table(heads["models"], name)
    if per_seed is not None:
        blocks += [
            (
                "text",
                "Per seed, each multi-head model's heads in rank order: mean attention distance in "
                "tokens, and the head's own number in that model.",
            ),
            ("table", per_seed),
        ]
    blocks += [
        ("heading", "Several spotlights?"),
        (
            "text",
            "The course chapter pictures several heads as spotlights, each following its own clue. If so, the "
            "heads of a layer taken together should give substantial weight to more distinct positions than a "
            "single head does, and pick different top-1 targets. Per query position, mean ± sd over seeds:",
        ),
        ("table", spotlight_table(heads["layers"], name, heads["substantial_weight"])),
    ]
    spotlight = heads.get("spotlight") or {}
    if spotlight:
        blocks += [("text", sentence) for sentence in null_sentences(spotlight, heads["substantial_weight"], name)]
        blocks.append(("table", null_table(spotlight)))
    else:
        blocks.append(
            (
                "text",
                "No null for the spotlight measure: the study has no model of conf/inspect's "
                "spotlight.multi variant, or no single-head model.",
            )
        )
    blocks += fair_null_blocks(heads, name)
    blocks += [
        (
            "text",
            f'Attention maps of the sentence "{heads["sentence"]}", first seed of each model, heads in '
            "order of mean distance:",
        ),
        *[("figure", (Path(p), attention_map_caption(Path(p), labels))) for p in heads["figures"]["attention_maps"]],
        (
            "figure",
            (
                Path(heads["figures"]["head_scores"]),
                "Each head's scores, a row per head, ordered within each model by mean attention distance: mean "
                "over seeds, the bar one standard deviation over seeds.",
            ),
        ),
    ]
    return blocks
