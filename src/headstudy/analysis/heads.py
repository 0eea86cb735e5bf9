"""The report's section "Inside the heads", from the inspect stage's heads.json."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def cell(row: dict, key: str, digits: int = 2) -> str:
    return f"{row[key]['mean']:.{digits}f} ± {row[key]['sd']:.{digits}f}"


def heads_table(rows: list[dict], name) -> pd.DataFrame:
    return pd.DataFrame({
        "Model": [name(r["variant"]) for r in rows],
        "Head": [f"layer {r['layer']}, head {r['head']}" for r in rows],
        "Role": [r["role"] for r in rows],
        "Previous token": [cell(r, "previous_token") for r in rows],
        "Self": [cell(r, "self") for r in rows],
        "First position": [cell(r, "first_position") for r in rows],
        "Distance (tokens)": [cell(r, "distance", 1) for r in rows],
        "Entropy (uniform), nats": [f"{cell(r, 'entropy')} ({r['uniform_entropy']['mean']:.2f})" for r in rows],
        "Perplexity rise when zeroed": [cell(r, "ablation_delta_ppl", 1) for r in rows],
    })


def spotlight_table(rows: list[dict], name, substantial: float) -> pd.DataFrame:
    return pd.DataFrame({
        "Model": [name(r["variant"]) for r in rows],
        "Layer": [str(r["layer"]) for r in rows],
        f"Positions getting > {substantial:g} of some head's weight": [cell(r, "covered_positions") for r in rows],
        "Distinct top-1 targets of the heads": [cell(r, "distinct_top1") for r in rows],
    })


def heads_blocks(heads: dict, labels: dict) -> list:
    def name(variant: str) -> str:
        if variant in labels:
            return labels[variant]
        count = int(variant.partition("-")[0])
        return f"{count} head{'s' if count > 1 else ''}"

    rules = "; ".join(f"{role}: {rule['score'].replace('_', '-')} score above {rule['above']}"
                      for role, rule in heads["roles"].items())
    seeds = ", ".join(map(str, heads["rows"][0]["seeds"])) if heads["rows"] else ""
    return [
        ("heading", "Inside the heads"),
        ("text", "Measured on the whole test split, in every layer, over every query position after the first: "
                 "the mean attention weight on the previous token, on the token itself and on the first position "
                 "of the window; the mean distance attended, in tokens; the entropy of the attention, beside that "
                 "of uniform attention over the visible positions; and the rise in test perplexity when the head's "
                 f"output is zeroed (for a 1-head model that removes attention altogether). Mean ± sd over seeds {seeds}."),
        ("table", heads_table(heads["rows"], name)),
        ("text", f"A head is named for a role only when its score passes the threshold set in conf/inspect/ "
                 f"({rules}); otherwise it is called mixed."),
        ("heading", "Several spotlights?"),
        ("text", "The course chapter pictures several heads as spotlights, each following its own clue. If so, the "
                 "heads of a layer taken together should give substantial weight to more distinct positions than a "
                 "single head does, and pick different top-1 targets. Per query position, mean ± sd over seeds:"),
        ("table", spotlight_table(heads["layers"], name, heads["substantial_weight"])),
        *[("text", claim["sentence"]) for claim in heads["claims"]],
        *([] if heads["claims"] else [("text", "No spotlight comparison: conf/inspect's spotlight variants are not "
                                               "both in the study.")]),
        ("text", f"Attention maps of the sentence \"{heads['sentence']}\", first seed of each model:"),
        *[("figure", Path(path)) for path in heads["figures"]["attention_maps"]],
        ("figure", Path(heads["figures"]["head_scores"])),
    ]
