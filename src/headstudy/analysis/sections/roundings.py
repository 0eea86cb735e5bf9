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
        found = stats.binomtest(self.count, len(self.seeds)).proportion_ci(confidence_level=0.95, method="exact")
        return float(found.low), float(found.high)


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


def flips_sentence(pair: Flips, label) -> str:
    low, high = pair.interval
    return (
        f"{label(pair.plain)}: the outcome flips in {pair.count} of {len(pair.seeds)} seeds "
        f"(exact 95% interval for the rate: {low:.0%} to {high:.0%})."
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
        }
        for p in flips
    ]
    return [("heading", "Two roundings of each seed"), ("text", text), ("table", flips_table(flips, label))], summary
