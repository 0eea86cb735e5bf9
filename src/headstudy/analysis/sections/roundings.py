"""Two roundings of each seed (report.roundings): the same model trained with the default and with
AVX2-pinned CPU kernels (conf/variants/avx2.yaml). A seed's outcome flips when one rounding
collapses (test perplexity above `collapse_above`) and the other does not, or, where neither does,
when their test perplexities differ by more than `within` (a fraction). The flip rate of a pair is
its flipped seeds over its seeds, with the exact (Clopper-Pearson) 95% interval."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from scipy import stats


@dataclass(frozen=True)
class Flips:
    plain: str
    rounded: str
    seeds: list[int]
    plain_ppl: list[float]
    rounded_ppl: list[float]
    flipped: list[bool]
    collapse_above: float
    within: float

    @property
    def count(self) -> int:
        return sum(self.flipped)

    @property
    def interval(self) -> tuple[float, float]:
        return exact_interval(self.count, len(self.seeds))


def outcome_flips(plain: str, rounded: str, ppl: dict[str, dict[int, float]], collapse_above: float, within: float):
    """The seeds both roundings have, and which of them flipped."""
    seeds = sorted(set(ppl[plain]) & set(ppl[rounded]))
    a, b = [ppl[plain][s] for s in seeds], [ppl[rounded][s] for s in seeds]

    def flipped(x: float, y: float) -> bool:
        if (x > collapse_above) != (y > collapse_above):
            return True
        return x <= collapse_above and abs(y / x - 1) > within

    return Flips(
        plain, rounded, seeds, a, b, [flipped(x, y) for x, y in zip(a, b, strict=True)], collapse_above, within
    )


def flips_table(flips: list[Flips], label) -> pd.DataFrame:
    rows = []
    for pair in flips:
        for seed, x, y, flip in zip(pair.seeds, pair.plain_ppl, pair.rounded_ppl, pair.flipped, strict=True):
            rows.append(
                {
                    "variant": label(pair.plain),
                    "seed": seed,
                    "default kernels": f"{x:.3f}" + (" (collapsed)" if x > pair.collapse_above else ""),
                    "AVX2 kernels": f"{y:.3f}" + (" (collapsed)" if y > pair.collapse_above else ""),
                    "relative difference": f"{y / x - 1:+.2e}",
                    "outcome": "flips" if flip else "same",
                }
            )
    return pd.DataFrame(rows)


def exact_interval(count: int, total: int) -> tuple[float, float]:
    """Clopper-Pearson's 95% interval for a rate of count in total."""
    found = stats.binomtest(count, total).proportion_ci(confidence_level=0.95, method="exact")
    return float(found.low), float(found.high)


def collapses(values: list[float], threshold: float) -> str:
    count = sum(value > threshold for value in values)
    low, high = exact_interval(count, len(values))
    return f"{count} of {len(values)} ({low:.0%} to {high:.0%})"


def flips_sentence(pair: Flips, label) -> str:
    low, high = pair.interval
    return (
        f"{label(pair.plain)}: the outcome flips in {pair.count} of {len(pair.seeds)} seeds "
        f"(exact 95% interval for the rate: {low:.0%} to {high:.0%}); it collapses in "
        f"{collapses(pair.plain_ppl, pair.collapse_above)} seeds with the default kernels and in "
        f"{collapses(pair.rounded_ppl, pair.collapse_above)} with AVX2 kernels."
    )


def roundings_section(settings: dict, ppl: dict[str, dict[int, float]], label) -> tuple[list, list[dict]]:
    """The report's blocks and the summary's numbers."""
    flips = [
        outcome_flips(str(a), str(b), ppl, settings["collapse_above"], settings["within"]) for a, b in settings["pairs"]
    ]
    text = (
        f"Each seed trained twice, with the default and with AVX2-pinned CPU kernels. Its outcome flips "
        f"when one rounding collapses (test perplexity above {settings['collapse_above']:g}) and the other "
        f"does not, or, where neither does, when their test perplexities differ by more than "
        f"{settings['within']:.0%}. " + " ".join(flips_sentence(pair, label) for pair in flips)
    )
    summary = [
        {
            "plain": p.plain,
            "rounded": p.rounded,
            "seeds": p.seeds,
            "flipped": p.count,
            "rate_interval": list(p.interval),
            "collapsed": [sum(v > p.collapse_above for v in ppl) for ppl in (p.plain_ppl, p.rounded_ppl)],
        }
        for p in flips
    ]
    return [("heading", "Two roundings of each seed"), ("text", text), ("table", flips_table(flips, label))], summary
