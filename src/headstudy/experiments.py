"""`headstudy experiments [dvc exp show options]`: the study's DVC experiments in tables that fit
the terminal.

`dvc exp show` has a column for every parameter and metric of every study in the repository
(hundreds). This keeps the study of the folder it runs in: the settings of its params.yaml that
differ between the rows, the test perplexity of each variant, and each comparison's per-token
change in percent with its interval (negative: B is better), all read from the files of
reports/metrics/ (analysis/rendering/headline.py). Columns that do not fit the terminal's width go to a
second table, each table led by the rows' names. Options such as `-A` go to `dvc exp show`."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap

import pandas as pd

from headstudy.bookkeeping.provenance import flatten
from headstudy.common.errors import ConfigError

PARAMS = "params.yaml"
METRICS = "reports/metrics/"
NAME = "experiment"
NOTE = (
    "ppl: test perplexity per token (geometric mean over seeds). B vs A %: B's change in per-token "
    "perplexity against A, in percent, with its 95% CI (the median with the sign test's interval, "
    "whose coverage the report gives, where the seeds' differences are not normal); negative: B is better."
)


def shown_experiments(options: list[str]) -> list[dict]:
    """What `dvc exp show --json` says, or a one-line error with DVC's own message."""
    # DVC of this environment (a dependency), whether or not its scripts are on PATH.
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "show", "--json", *options], capture_output=True, text=True
    )
    if result.returncode != 0:
        message = next((line for line in result.stderr.splitlines() if line.strip()), "no message")
        raise ConfigError(f"dvc exp show failed: {message}")
    return json.loads(result.stdout or "[]")


def study_data(entry: dict) -> tuple[dict, dict]:
    """One row's params of params.yaml and the files of reports/metrics/, by name
    (`change_pct/4_vs_1`: {estimate, lower, upper})."""
    data = entry.get("data") or {}
    params = ((data.get("params") or {}).get(PARAMS) or {}).get("data") or {}
    metrics = {
        path.removeprefix(METRICS).removesuffix(".json"): (found or {}).get("data") or {}
        for path, found in (data.get("metrics") or {}).items()
        if path.startswith(METRICS) and path.endswith(".json")
    }
    return params, metrics


def short(revision: str) -> str:
    """A commit's hash shortened as git does; `workspace` as it is."""
    return revision[:7] if len(revision) == 40 else revision


def rows(shown: list[dict]) -> list[tuple[str, dict, dict]]:
    """(name, params, metrics): the workspace, each baseline commit, and each experiment of it."""
    found = []
    for baseline in shown:
        found.append((baseline.get("name") or short(baseline["rev"]), *study_data(baseline)))
        for experiment in baseline.get("experiments") or []:
            for revision in experiment.get("revs") or []:
                name = experiment.get("name") or revision.get("name") or short(revision["rev"])
                found.append((name, *study_data(revision)))
    return found


def metric_names(found: list[tuple[str, dict, dict]], prefix: str) -> list[str]:
    """The names after prefix among the rows' metrics files, in order of appearance."""
    names = (name for _, _, metrics in found for name in metrics)
    return list(dict.fromkeys(name.removeprefix(prefix) for name in names if name.startswith(prefix)))


def in_study_order(names: list[str], found: list[tuple[str, dict, dict]], study_order) -> list[str]:
    """names in the order the rows' params.yaml gives them (study_order(params): a list), the
    names it does not give after them, as they came."""
    given = [str(name) for _, params, _ in found for name in study_order(params)]
    return sorted(names, key=lambda name: given.index(name) if name in given else len(given))


def variants_of(params: dict) -> list:
    return list((params.get("study") or {}).get("variants") or [])


def pairs_of(params: dict) -> list[str]:
    return [f"{pair[1]}_vs_{pair[0]}" for pair in (params.get("report") or {}).get("compare") or [] if len(pair) == 2]


def number(numbers: dict, key: str) -> float:
    value = numbers.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def table(shown: list[dict]) -> pd.DataFrame:
    """A row per experiment: its changed settings, `ppl VARIANT`, and per comparison `B vs A %`
    with its CI in `B vs A % low` and `B vs A % high` (render puts the three in one column)."""
    found = rows(shown)
    flat = [flatten(params) for _, params, _ in found]
    keys = sorted({key for params in flat for key in params if not key.startswith("report.")})
    changed = [key for key in keys if len({params.get(key) for params in flat}) > 1]
    variants = in_study_order(metric_names(found, "test_ppl/"), found, variants_of)
    comparisons = in_study_order(metric_names(found, "change_pct/"), found, pairs_of)
    # A setting by its last part (`max_steps`) where that names one of them: the table stays narrow.
    last_parts = [key.rsplit(".", 1)[-1] for key in changed]
    headers = {
        key: part if last_parts.count(part) == 1 else key for key, part in zip(changed, last_parts, strict=False)
    }
    records = []
    for (name, _, metrics), params in zip(found, flat, strict=True):
        record = {NAME: name, **{headers[key]: params.get(key, "") for key in changed}}
        record.update({f"ppl {v}": number(metrics.get(f"test_ppl/{v}", {}), "estimate") for v in variants})
        for pair in comparisons:
            change = metrics.get(f"change_pct/{pair}", {})
            column = f"{pair.replace('_vs_', ' vs ')} %"
            record.update(
                {
                    column: number(change, "estimate"),
                    f"{column} low": number(change, "lower"),
                    f"{column} high": number(change, "upper"),
                }
            )
        records.append(record)
    return pd.DataFrame.from_records(records)


def change_text(estimate: float, low: float, high: float) -> str:
    """`-3.6 [-3.9, -3.2]`; the estimate alone without a CI; `-` when not measured."""
    if math.isnan(estimate):
        return "-"
    if math.isnan(low) or math.isnan(high):
        return f"{estimate:+.1f}"
    return f"{estimate:+.1f} [{low:+.1f}, {high:+.1f}]"


def shown_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text cells: perplexities to 2 decimals, each change with its CI in one column."""
    shown = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        if column.endswith((" % low", " % high")):
            continue
        if column.endswith(" %"):
            shown[column] = [
                change_text(*values)
                for values in zip(frame[column], frame[f"{column} low"], frame[f"{column} high"], strict=True)
            ]
        elif column.startswith("ppl "):
            shown[column] = ["-" if math.isnan(value) else f"{value:.2f}" for value in frame[column]]
        else:
            shown[column] = frame[column].astype(str)
    return shown


def column_width(shown: pd.DataFrame, column: str) -> int:
    return max([len(column), *(len(cell) for cell in shown[column])])


def text_table(shown: pd.DataFrame, columns: list[str]) -> str:
    """The experiments' names left-aligned, every other column right-aligned, two spaces apart."""
    widths = [column_width(shown, column) for column in columns]

    def line(cells: list[str]) -> str:
        first, *others = cells
        return "  ".join([first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(others, widths[1:], strict=True))])

    return "\n".join([line(columns), *(line([row[c] for c in columns]) for _, row in shown.iterrows())])


def render(frame: pd.DataFrame, width: int | None = None) -> str:
    """The table in as few tables as fit `width` (by default the terminal's), each led by the
    experiments' names, then what the columns mean."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    shown = shown_columns(frame)
    parts: list[list[str]] = [[]]
    used = column_width(shown, NAME)
    for column in [column for column in shown.columns if column != NAME]:
        needed = 2 + column_width(shown, column)
        if parts[-1] and used + needed > width:
            parts.append([])
            used = column_width(shown, NAME)
        parts[-1].append(column)
        used += needed
    tables = [text_table(shown, [NAME, *part]) for part in parts]
    return "\n\n".join(tables) + "\n\n" + textwrap.fill(NOTE, width=width)


def main(options: list[str]) -> None:
    frame = table(shown_experiments(options))
    if frame.empty:
        raise ConfigError(
            "nothing to show: `dvc exp show` lists no commit and no experiment here (commit the study, or run "
            "`dvc exp run`)"
        )
    print(render(frame))
    if not any(str(column).startswith("ppl ") for column in frame.columns):
        print(
            "headstudy experiments: warning: no row has test perplexities (reports/metrics/test_ppl/): the study "
            "was not reported in these commits, or DVC could not read their params.yaml or dvc.lock",
            file=sys.stderr,
        )
