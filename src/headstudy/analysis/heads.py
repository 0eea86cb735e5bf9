"""The report's sections "Inside the heads" and "Several spotlights?", from the inspect stage's
heads.json. Heads are numbered arbitrarily in each trained model, so inspect orders them within
each model by mean attention distance (rank 0 = the most local) before averaging over seeds; the
per-seed table shows whether that order holds the same pattern in every seed."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from headstudy.analysis.wording import label

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
        f"single heads taken from independently trained single-head models ({' and '.join(members).lower()}, seeds "
        f"{', '.join(map(str, seeds))}: {n} models, {spotlight['null_unions']} unions), on the same test windows, "
        f"covers what {k} heads that each attend as a lone head does would cover. Several heads covering more than one "
        f"head is expected by that alone; a division of labour shows only as coverage beyond this null. The single "
        f"heads are wider than the heads of a multi-head model, so the null is a guide, not an exact match."
    ]
    for layer in sorted({r["layer"] for r in spotlight["rows"]}):
        rows = [r for r in spotlight["rows"] if r["layer"] == layer]
        main = min(rows, key=lambda r: abs(r["threshold"] - substantial))
        words = POSITION_WORDS[main["position"]].format(k=k, n=n)
        consequence = {
            "above": "so the heads of one model spread their weight over more places than independent heads "
            "would: this measure supports the spotlight picture",
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


def attention_map_caption(path: Path, labels: dict) -> str:
    """`attention_h4-nomix_layer0.png` (inspect's name): whose map it is."""
    found = re.fullmatch(r"attention_h(.+)_layer(\d+)", path.stem)
    if found is None:
        return f"Attention map {path.stem.replace('_', ' ')}."
    variant, layer = found.groups()
    return (
        f"{label(variant, labels)}, layer {int(layer) + 1}: each head's attention on the sentence, a row per "
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
