"""How the report writes numbers and names: one format for each kind of number."""

from __future__ import annotations

import math

from headstudy.formats.names import parse_variant


def label(variant: str, labels: dict) -> str:
    """report.labels' name for a variant, or its head count (and its settings file, which the
    count alone would hide: 1-mix is not 1)."""
    if variant in labels:
        return labels[variant]
    heads, extra = parse_variant(variant)
    return f"{heads} head{'s' if heads > 1 else ''}" + (f" ({variant})" if extra else "")


def mid_sentence(name: str) -> str:
    """A variant's name inside a sentence: its first letter lower-cased ("4 heads", "wider MLP"),
    an acronym left as written ("MLP"), the rest as report.labels writes it."""
    acronym = name[:2].isalpha() and name[:2].isupper()
    return name if acronym else name[:1].lower() + name[1:]


def possessive(name: str) -> str:
    """ "4 heads' lead", "1 head's lead"."""
    return name + ("'" if name.endswith("s") else "'s")


def signed(value: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.{digits}f}"


def interval(low: float, high: float, digits: int = 3, sign: bool = True) -> str:
    if math.isnan(low):
        return "n/a"
    form = f"{'+' if sign else ''}.{digits}f"
    return f"[{low:{form}}, {high:{form}}]"


def percent_interval(low: float, high: float) -> str:
    return "n/a" if math.isnan(low) else f"[{low:+.1%}, {high:+.1%}]"


def percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def p_value(p: float) -> str:
    return "n/a" if math.isnan(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def p_is(p: float) -> str:
    """`p = 0.012` or `p < 0.001`, for sentences."""
    text = p_value(p)
    return f"p {text[0]} {text[1:]}" if text.startswith("<") else f"p = {text}"
