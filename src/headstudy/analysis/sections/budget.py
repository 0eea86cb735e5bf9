"""Whether the study trained long enough: its own curves against the stated criterion, and the
long runs of studies/budget where the study's budget is one of their points."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering.inputs import read_curve
from headstudy.analysis.rendering.wording import label, mid_sentence
from headstudy.common.errors import ConfigError


def no_answer(rows: list[dict], settings: dict) -> str | None:
    """Why the study gives no answer, when a variant is not far enough below the bigram: the
    budget's criterion (report.budget.beat_bigram_by) where the study states one, else beating the
    bigram at all. A comparison of models that are undertrained or broken is no result, whatever
    its interval."""
    margin = (settings.get("budget") or {}).get("beat_bigram_by", 0.0)
    worst = min(rows, key=lambda r: r["below_bigram"])
    if worst["below_bigram"] >= margin and worst["below_bigram"] > 0:
        return None
    where = (
        f"{worst['below_bigram']:.1%} below the bigram"
        if worst["below_bigram"] > 0
        else f"worse than the bigram by {-worst['below_bigram']:.1%}"
    )
    asked = f"at least {margin:.0%} below it (report.budget)" if margin else "below it"
    return (
        f"No answer: the models are undertrained ({mid_sentence(worst['label'])} is {where}, and every variant must be "
        f"{asked}); the comparisons below are not a result."
    )


def budget_section(rows, found, curves, stats, settings, figure_dir) -> tuple[list, dict]:
    """The budget paragraph from the study's own curves, the criterion of report.budget, and the
    long runs' evidence with its figure when they were validated at this study's budget."""
    budget = settings["budget"]
    mean_curves = curves.groupby(["variant", "tokens"])["val_ppl"].mean().unstack("variant")
    tokens = int(mean_curves.index.max())
    epochs = tokens / stats["splits"]["train"]["tokens"]
    last = mean_curves.iloc[-1]
    still = float((1 - last / mean_curves.iloc[-2]).max()) if len(mean_curves) > 1 else None
    final_order = list(last.sort_values().index)
    changes = [int(t) for t, row in mean_curves.iterrows() if list(row.sort_values().index) != final_order]
    worst = min(rows, key=lambda r: r["below_bigram"])
    beats = worst["below_bigram"] >= budget["beat_bigram_by"]
    result = {
        "tokens": tokens,
        "epochs": epochs,
        "last_interval_improvement": still,
        "ranking_changes": len(changes),
        "weakest_below_bigram": worst["below_bigram"],
    }
    text = (
        f"Each model trained on {tokens / 1e6:.2f} million tokens, {epochs:.1f} epochs of the training split. "
        + (
            "With one validation point, the curves cannot show how much training still improved. "
            if still is None
            else "Over the last validation interval the mean validation perplexity of every variant fell by at most "
            f"{still:.2%}. "
        )
        + (
            "With one variant there is no ranking to follow. "
            if len(rows) < 2
            else "The ranking of the variants by mean validation perplexity "
            + (
                "is the final one at every validation point. "
                if not changes
                else f"differs from the final one at {len(changes)} of {len(mean_curves)} validation points, "
                "the last at "
                f"{changes[-1] / 1e6:.2f} million tokens. "
            )
        )
        + f"The budget's criterion (report.budget) asks that every variant end at least {budget['beat_bigram_by']:.0%} "
        f"below the bigram in test perplexity: the weakest, {mid_sentence(worst['label'])}, is "
        f"{worst['below_bigram']:.1%} "
        f"below, so this part {'is met' if beats else 'is not'}"
    )
    met = beats
    first = found[0] if found else None
    if first and len(mean_curves) > 1:
        gap = mean_curves[first["variant_b"]] / mean_curves[first["variant_a"]] - 1
        quarter_start = gap.index[gap.index >= 0.75 * tokens][0]
        drift = float(abs(gap.iloc[-1] - gap.loc[quarter_start]))
        stable = drift < budget["max_gap_drift"]
        met = beats and stable
        result["gap_last_quarter_drift"] = drift
        text += (
            f"; and that the relative gap in validation perplexity of {mid_sentence(first['b'])} against "
            f"{mid_sentence(first['a'])} move by less than {budget['max_gap_drift'] * 100:g} points over the last "
            f"quarter of training: it moved {drift * 100:.1f} points, from {gap.loc[quarter_start]:+.1%} to "
            f"{gap.iloc[-1]:+.1%}, so this part {'is met' if stable else 'is not'}"
        )
        last_quarter = gap.loc[quarter_start:].abs().diff().dropna()
        widened = int((last_quarter > 0).sum())
        text += (
            ". So the gap moves less than the criterion allows at this budget, which does not say it has stopped "
            f"moving (it widened at {widened} of the last {len(last_quarter)} validations) or that the models have "
            "converged."
            if met
            else ". So at this budget the comparisons may measure how fast the variants learn rather than where "
            "they end."
        )
    else:
        met = False  # half a criterion is not a criterion met
        text += (
            "; its second part, the stability of the first comparison's gap, needs a comparison and two "
            "validation points, so the criterion is not checked in full."
        )
    result["criterion_met"] = bool(met)
    blocks = [("heading", "Budget"), ("text", text)]
    evidence_blocks, result["evidence"] = budget_evidence(Path(budget["evidence"]), tokens, settings, figure_dir)
    return blocks + evidence_blocks, result


def evidence_curves(evidence_dir: Path) -> dict[Path, pd.DataFrame]:
    """The curves of the two long runs behind the budget, each checked by the report's reader."""
    runs = sorted(Path(evidence_dir).glob("h*-s*.csv"))
    if len(runs) != 2:
        raise ConfigError(
            f"report.budget.evidence={evidence_dir}: expected the curves of two long runs "
            f"(hA-sS.csv and hB-sS.csv), found {len(runs)}"
        )
    return {path: read_curve(path) for path in runs}


def budget_evidence(evidence_dir: Path, tokens: int, settings: dict, figure_dir: Path) -> tuple[list, dict]:
    """The long runs behind the budget, shown only when they were validated at exactly this
    study's budget: otherwise their gap at "this budget" would be borrowed from another one."""
    evidence = {
        "{}, seed {}".format(label(variant, settings.get("labels", {})), seed): curve
        for p, curve in evidence_curves(evidence_dir).items()
        for variant, seed in [p.stem[1:].rsplit("-s", 1)]
    }
    (name_a, curve_a), (name_b, curve_b) = evidence.items()
    long_gap = (curve_b.set_index("tokens")["val_ppl"] / curve_a.set_index("tokens")["val_ppl"] - 1).rename(
        f"{name_b} against {name_a}"
    )
    applies = tokens in long_gap.index
    # The figure is a declared output of the stage, so it is drawn either way; only a budget the
    # long runs were validated at is marked on it, and only then is it part of the report.
    figure = report_figures.budget_evidence(
        evidence, long_gap, tokens if applies else None, figure_dir / "budget_evidence.png"
    )
    if not applies:
        return [
            (
                "text",
                f"The budget evidence in {evidence_dir} (two long runs, validated every "
                f"{long_gap.index[1] - long_gap.index[0]:,} tokens up to {long_gap.index.max() / 1e6:.1f} "
                f"million) has no validation point at this study's {tokens:,} tokens, so it says nothing "
                "about this budget and is not shown.",
            )
        ], {}
    at_budget = float(long_gap.loc[tokens])
    return [
        (
            "text",
            f"Evidence for the budget ({evidence_dir}): one long run per head count ({' and '.join(evidence)}), "
            f"{long_gap.index.max() / 1e6:.1f} million tokens under one schedule, validated every "
            f"{long_gap.index[1] - long_gap.index[0]:,} tokens. The relative gap goes from "
            f"{long_gap.iloc[0]:+.1%} at the first validation to {at_budget:+.1%} at this study's budget and "
            f"{long_gap.iloc[-1]:+.1%} at the end. Points before the end of a long run are taken at a higher "
            "learning rate than a run of that length ends with, so they overstate the perplexity such a run "
            "reaches.",
        ),
        (
            "figure",
            (
                figure,
                "The long runs: validation perplexity against training tokens (left) and the relative gap "
                "between them (right), this study's budget marked.",
            ),
        ),
    ], {
        "gap_first": float(long_gap.iloc[0]),
        "gap_at_budget": at_budget,
        "gap_last": float(long_gap.iloc[-1]),
        "tokens": int(long_gap.index.max()),
    }
