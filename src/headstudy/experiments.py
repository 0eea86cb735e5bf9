"""`headstudy experiments [dvc exp show options]`: the study's DVC experiments in one table that
fits a terminal.

`dvc exp show` has a column for every parameter and metric of every study in the repository
(hundreds). This keeps the study of the folder it runs in: the settings of its params.yaml that
differ between the rows, the test perplexity of each variant, and the per-token change of each
comparison in percent (negative: B is better). Options such as `-A` go to `dvc exp show`."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from headstudy.analysis.headline import numeric_leaves
from headstudy.bookkeeping.provenance import flatten
from headstudy.common.errors import ConfigError

PARAMS = "params.yaml"
METRICS = "reports/metrics.json"
COMPARISON_SUFFIX = "/per_token"


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
    """One row's params of params.yaml (flat) and numbers of reports/metrics.json."""
    data = entry.get("data") or {}
    params = ((data.get("params") or {}).get(PARAMS) or {}).get("data") or {}
    metrics = ((data.get("metrics") or {}).get(METRICS) or {}).get("data") or {}
    return flatten(params), numeric_leaves(metrics)


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


def metric_names(found: list[tuple[str, dict, dict]], prefix: str, suffix: str = "") -> list[str]:
    """What stands between prefix and suffix in the rows' metric names, in order of appearance."""
    return list(
        dict.fromkeys(
            name.removeprefix(prefix).removesuffix(suffix)
            for _, _, metrics in found
            for name in metrics
            if name.startswith(prefix) and name.endswith(suffix)
        )
    )


def table(shown: list[dict]) -> pd.DataFrame:
    found = rows(shown)
    keys = sorted({key for _, params, _ in found for key in params if not key.startswith("report.")})
    changed = [key for key in keys if len({params.get(key) for _, params, _ in found}) > 1]
    variants = metric_names(found, "test_ppl/")
    comparisons = metric_names(found, "change_pct/", COMPARISON_SUFFIX)
    # A setting by its last part (`max_steps`) where that names one of them: the table stays narrow.
    last_parts = [key.rsplit(".", 1)[-1] for key in changed]
    headers = {
        key: part if last_parts.count(part) == 1 else key for key, part in zip(changed, last_parts, strict=False)
    }
    records = []
    for name, params, metrics in found:
        record = {"experiment": name, **{headers[key]: params.get(key, "") for key in changed}}
        record.update({f"ppl {variant}": metrics.get(f"test_ppl/{variant}") for variant in variants})
        record.update(
            {
                f"{pair.replace('_vs_', ' vs ')} %": metrics.get(f"change_pct/{pair}{COMPARISON_SUFFIX}")
                for pair in comparisons
            }
        )
        records.append(record)
    return pd.DataFrame.from_records(records)


def render(frame: pd.DataFrame) -> str:
    formats = {column: "{:.2f}".format for column in frame.columns if column.startswith("ppl ")}
    formats.update({column: "{:+.1f}".format for column in frame.columns if column.endswith(" %")})
    return frame.to_string(index=False, formatters=formats, na_rep="-")


def main(options: list[str]) -> None:
    print(render(table(shown_experiments(options))))
