"""The README's tables from the committed report summaries: 4 heads against 1 head under each
learning-rate protocol, and the default study's pre-stated comparisons (tests/test_studies.py
checks that the README holds both as printed).

    python tools/protocol_table.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from headstudy.analysis.rendering.wording import p_value

ROOT = Path(__file__).resolve().parents[1]
# (protocol, the study that trains 1 and 4 heads under it), the pre-chosen headline first.
PROTOCOLS = [
    ("20% warm-up, own rates (the headline)", "studies/stabilised"),
    ("5% warm-up, own rates (the default study)", "."),
    ("5% warm-up, one shared rate: the single head's best, 0.003, for both", "studies/shared-rate"),
]


def four_against_one(study: str, root: Path = ROOT) -> tuple[dict, dict]:
    """The study's comparison of 4 heads against 1 head, and its rows by variant."""
    summary = json.loads((root / study / "reports" / "summary.json").read_text())
    [comparison] = [c for c in summary["comparisons"] if (c["variant_a"], c["variant_b"]) == ("1", "4")]
    return comparison, {row["variant"]: row for row in summary["rows"]}


def percent(log_ratio: float) -> str:
    return f"{math.expm1(log_ratio):+.1%}"


def table(root: Path = ROOT) -> str:
    lines = [
        "| protocol | rates (1 head, 4 heads) | seeds | 4 heads better | median per token [interval, coverage] "
        "| median per word | mean per token [95% t CI] | Shapiro-Wilk p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, study in PROTOCOLS:
        c, rows = four_against_one(study, root)
        median = c["median"]
        low, high = median["log_ratio_ci95"]
        seeds = c["seeds"]
        lines.append(
            f"| {name} ([report]({Path(study, 'reports', 'results.md').as_posix()})) "
            f"| {rows['1']['lr']:g}, {rows['4']['lr']:g} | {seeds[0]}-{seeds[-1]} "
            f"| {c['b_better_in']}/{len(seeds)} (sign test p = {p_value(c['sign_p'])}) "
            f"| {median['log_ratio']:+.3f} ({percent(median['log_ratio'])}) [{low:+.3f}, {high:+.3f}], "
            f"{median['coverage']:.1%} | {median['log_ratio_per_word']:+.3f} ({percent(median['log_ratio_per_word'])}) "
            f"| {c['log_ratio']:+.3f} [{c['log_ratio_ci95'][0]:+.3f}, {c['log_ratio_ci95'][1]:+.3f}]"
            f"{'' if c['normal'] else ': no summary, not normal'} | {p_value(c['normality_p'])} |"
        )
    return "\n".join(lines)


def comparisons_table(root: Path = ROOT) -> str:
    """The default study's pre-stated comparisons: mean and t interval, median, seeds, normality."""
    summary = json.loads((root / "reports" / "summary.json").read_text())
    lines = [
        "| 4 heads against | per token: mean [95% t CI] | per word: mean [95% t CI] | median per token "
        "| median per word | seeds 4 heads better | Shapiro-Wilk p |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in summary["comparisons"]:
        low, high = c["log_ratio_ci95"]
        word_low, word_high = c["log_ratio_per_word_ci95"]
        median = c["median"]
        lines.append(
            f"| {c['a']} | {c['log_ratio']:+.3f} ({percent(c['log_ratio'])}) [{low:+.3f}, {high:+.3f}]"
            f"{'' if c['normal'] else ' (not valid: not normal)'} "
            f"| {c['log_ratio_per_word']:+.3f} [{word_low:+.3f}, {word_high:+.3f}] "
            f"| {median['log_ratio']:+.3f} ({percent(median['log_ratio'])}) | {median['log_ratio_per_word']:+.3f} "
            f"| {c['b_better_in']}/{len(c['seeds'])} (sign test p = {p_value(c['sign_p'])}) "
            f"| {p_value(c['normality_p'])} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(comparisons_table())
