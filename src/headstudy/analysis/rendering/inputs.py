"""The one reader of the report's numeric inputs: metrics and summaries as JSON, validation
curves as CSV. A missing file, one that does not parse, or one that holds NaN, Infinity or a
value that is no number is refused in one line that names the file, before the report writes
anything: NaN is no result in a CSV file either, and would change the report's sentences silently."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from headstudy.common.errors import ConfigError, first_line
from headstudy.common.files import read_json as read_result

REMEDY = "run `dvc repro` to produce it again"


def read_json(path: Path) -> dict:
    return read_result(Path(path), REMEDY)


def read_curve(path: Path) -> pd.DataFrame:
    """A curve CSV (step, tokens, val_ppl, ...): every column numbers, every number finite."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} not found: {REMEDY}")
    try:
        curve = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise ConfigError(f"{path} is not a CSV table ({first_line(error)}): {REMEDY}") from None
    if curve.empty:
        raise ConfigError(f"{path} holds no rows: {REMEDY}")
    for column in curve.columns:
        values = pd.to_numeric(curve[column], errors="coerce")
        bad = [
            f"line {row + 2}: {raw!r}"
            for row, (raw, value) in enumerate(zip(curve[column], values, strict=True))
            if not math.isfinite(value)
        ]
        if bad:
            raise ConfigError(
                f"{path}: column {column} holds {', '.join(bad[:3])}, which is no finite number: {REMEDY}"
            )
    return curve
