"""Does a gap last with more training? The study's comparisons against the same comparisons in a
study of the same models (variants, seeds, learning rates) trained for another budget: the gap at
each budget, paired by seed, and the change of the gap between them, paired by seed too."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering.inputs import read_curve, read_json
from headstudy.analysis.rendering.wording import interval, mid_sentence, percent_interval
from headstudy.analysis.statistics import mean_ci95, paired_difference
from headstudy.common.errors import ConfigError


def other_budget_inputs(folder: Path, models: list[dict]) -> dict:
    """The other study's test perplexity (by variant, then seed) and validation curve of every
    model this study has, by the same names: a model missing there is refused, since a gap over
    fewer seeds would not pair."""
    test_ppl, curves = {}, []
    for model in models:
        name = model["name"]
        path = folder / "metrics" / f"{name}.json"
        if not path.is_file():
            raise ConfigError(
                f"report.length_against={folder}: {path} not found; the study there must have every model "
                f"of this one (same variants and seeds)"
            )
        test_ppl.setdefault(str(model["variant"]), {})[model["seed"]] = read_json(path)["test_ppl"]
        curves.append(
            read_curve(folder / "metrics" / "curves" / f"{name}.csv").assign(
                variant=str(model["variant"]), seed=model["seed"]
            )
        )
    return {"test_ppl": test_ppl, "curves": pd.concat(curves, ignore_index=True)}


def gap_along_training(curves: pd.DataFrame, variant_a: str, variant_b: str) -> pd.DataFrame:
    """B against A in validation perplexity at every validation point: the mean over seeds of the
    paired log-ratio, with its 95% Student-t interval."""
    log_ppl = curves.assign(log_ppl=curves["val_ppl"].map(math.log)).pivot_table(
        index=["tokens", "seed"], columns="variant", values="log_ppl"
    )
    per_seed = (log_ppl[variant_b] - log_ppl[variant_a]).dropna()
    rows = [(tokens, *mean_ci95(group.values)) for tokens, group in per_seed.groupby(level="tokens")]
    return pd.DataFrame(rows, columns=["tokens", "log_ratio", "low", "high"]).set_index("tokens")


def training_length_section(
    found: list[dict],
    rows: list[dict],
    curves: pd.DataFrame,
    other: dict,
    folder: Path,
    tokens_per_word: float,
    figure_dir: Path,
) -> tuple[list, dict]:
    """Each comparison at both budgets, the change of its gap from the shorter budget to the
    longer (per seed: the gap at one minus the gap at the other), and each variant's own change.
    This study's test perplexities are its rows'; the other's come from other_budget_inputs."""
    tokens_here = int(curves["tokens"].max())
    tokens_there = int(other["curves"]["tokens"].max())
    here = {row["variant"]: dict(zip(row["seeds"], row["test_ppl"], strict=True)) for row in rows}
    budgets = {"here": (tokens_here, here, curves), "there": (tokens_there, other["test_ppl"], other["curves"])}
    shorter, longer = sorted(budgets, key=lambda key: budgets[key][0])
    summary = {"tokens": {"shorter": budgets[shorter][0], "longer": budgets[longer][0]}, "other_study": str(folder)}
    lines, gaps = [], {}
    for comparison in found:
        a, b = comparison["variant_a"], comparison["variant_b"]
        at = {
            key: paired_difference(
                budgets[key][1][a],
                budgets[key][1][b],
                comparison["a"],
                comparison["b"],
                tokens_per_word,
            )
            for key in (shorter, longer)
        }
        seeds = at[longer]["seeds"]
        change = [at[longer]["per_seed_log_ratio"][i] - at[shorter]["per_seed_log_ratio"][i] for i in range(len(seeds))]
        change_mean, change_low, change_high = mean_ci95(change)
        name = f"{b}_vs_{a}"
        summary[name] = {
            "shorter": at[shorter],
            "longer": at[longer],
            "change_per_seed": change,
            "change": change_mean,
            "change_ci95": [change_low, change_high],
        }
        gaps[f"{comparison['b']} against {comparison['a']}"] = {
            key: (budgets[key][0], gap_along_training(budgets[key][2], a, b), at[key]) for key in (shorter, longer)
        }

        def stated(result: dict) -> str:
            return (
                f"{result['log_ratio']:+.3f} per token {interval(*result['log_ratio_ci95'])}, "
                f"{result['log_ratio_per_word']:+.3f} per word, {mid_sentence(comparison['b'])} lower in "
                f"{result['b_better_in']} of {len(result['seeds'])} seeds"
            )

        excludes = change_low > 0 or change_high < 0
        lines.append(
            f"{comparison['b']} against {comparison['a']} (paired log-ratio of test perplexity, seeds "
            f"{', '.join(map(str, seeds))}): at {budgets[shorter][0] / 1e6:.1f} million training tokens "
            f"{stated(at[shorter])}; at {budgets[longer][0] / 1e6:.1f} million {stated(at[longer])}. "
            f"From the shorter budget to the longer the gap changed by {change_mean:+.3f} per token "
            f"{interval(change_low, change_high)} (per seed, the gap at one minus the gap at the "
            f"other: {', '.join(f'{value:+.3f}' for value in change)}), "
            + (
                "an interval that excludes 0."
                if excludes
                else "an interval that includes 0: no change of the gap with training length is established."
            )
        )
    for row in rows:
        variant = row["variant"]
        own = paired_difference(
            budgets[shorter][1][variant],
            budgets[longer][1][variant],
            "shorter",
            "longer",
            tokens_per_word,
        )
        summary[f"longer_vs_shorter/{variant}"] = own
        lines.append(
            f"{row['label']}, {budgets[longer][0] / 1e6:.1f} against {budgets[shorter][0] / 1e6:.1f} million tokens: "
            f"test perplexity {own['relative']:+.1%} {percent_interval(*own['relative_ci95'])}."
        )
    figure = report_figures.gap_by_training_length(gaps, figure_dir / "training_length.png")
    intro = (
        f"The same models trained for another budget are in {folder}: the same variants, seeds and learning "
        "rates, each under its own schedule (warm-up and decay stretched to its budget), so each budget's gap "
        "is taken at the end of its own schedule."
    )
    return [
        ("heading", "Training length"),
        ("text", intro),
        *[("text", line) for line in lines],
        (
            "figure",
            (
                figure,
                "One panel per comparison: at each budget, the paired gap in validation perplexity along the run "
                "(mean over seeds, 95% CI band) and in test perplexity at its end (95% CI bar), as relative changes.",
            ),
        ),
    ], summary
