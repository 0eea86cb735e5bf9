"""Names of models and variants: the one place that builds or parses them.

A variant is a head count, or a head count and the name of a file of further settings in
conf/variants/ (`4`, `1-mix`, `4-nomix`). A model is a variant trained with one seed, in a
learning-rate study at one grid learning rate, in a multi-clue task study on the task with k
clues: `h4-s0`, `h1-mix-lr0.006-s2`, `h2-k3-s1`."""

from __future__ import annotations

import re

from headstudy.common.errors import ConfigError

VARIANT = re.compile(r"(\d+)(?:-([a-z][a-z0-9_]*))?")
# Files of conf/variants/ that change how the arithmetic rounds, not what it computes
# (conf/variants/avx2.yaml): `4-avx2` is variant 4's model, rounded another way.
ROUNDINGS = ("avx2",)


def parse_variant(variant) -> tuple[int, str | None]:
    """(heads, settings file name or None), or a one-line refusal."""
    match = VARIANT.fullmatch(str(variant))
    if not match or int(match[1]) < 1:
        raise ConfigError(
            f"variant={variant}: expected a head count, optionally followed by -NAME for "
            "conf/variants/NAME.yaml (e.g. 4 or 1-mix)"
        )
    return int(match[1]), match[2]


def computed_variant(variant) -> str:
    """The variant whose model `variant` computes: itself, or `4` for the rounding `4-avx2`."""
    heads, extra = parse_variant(variant)
    return str(heads) if extra in ROUNDINGS else str(variant)


def model_name(variant, seed: int, lr: float | None = None, clues: int | None = None) -> str:
    return (
        f"h{variant}"
        + (f"-lr{lr:g}" if lr is not None else "")
        + (f"-k{clues}" if clues is not None else "")
        + f"-s{seed}"
    )


def task_folder(clues: int) -> str:
    """The prepared data of the multi-clue task with `clues` clues, inside a study's folder."""
    return f"data/k{clues}"
