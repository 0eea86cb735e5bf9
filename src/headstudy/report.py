"""Stage `report`: the seed's table, from the metrics of every model in the study."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

PARAMS_FILE = Path("params.yaml")
METRICS_DIR = Path("metrics")
REPORTS_DIR = Path("reports")


def study_metrics(heads: list[int], seeds: list[int]) -> pd.DataFrame:
    """One row per (heads, seed) of the study; models outside it are left out."""
    rows = []
    for head_count in heads:
        for seed in seeds:
            path = METRICS_DIR / f"h{head_count}-s{seed}.json"
            if not path.is_file():
                raise FileNotFoundError(f"{path} not found: run `dvc repro` to evaluate h{head_count}-s{seed}")
            rows.append(json.loads(path.read_text()))
    return pd.DataFrame(rows)


def summarise(metrics: pd.DataFrame) -> list[dict]:
    rows = []
    for head_count, group in metrics.groupby("heads", sort=True):
        group = group.sort_values("seed")
        rows.append({
            "heads": int(head_count),
            "params": int(group["params"].iloc[0]),
            "seeds": group["seed"].astype(int).tolist(),
            "test_ppl": group["test_ppl"].tolist(),
            "test_ppl_mean": float(group["test_ppl"].mean()),
            "test_ppl_std": float(group["test_ppl"].std(ddof=1)) if len(group) > 1 else 0.0,
            "mlflow_run_ids": group["mlflow_run_id"].tolist(),
        })
    return rows


def model_label(heads: int) -> str:
    return "One attention head" if heads == 1 else f"{heads} attention heads"


def results_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({
        "Model": [model_label(row["heads"]) for row in rows],
        "Parameters": [f"{row['params']:,}" for row in rows],
        "Test perplexity": [
            f"{row['test_ppl_mean']:.1f} ± {row['test_ppl_std']:.1f}" for row in rows
        ],
        "Seeds": [", ".join(map(str, row["seeds"])) for row in rows],
    })


def render(rows: list[dict]) -> str:
    return "\n".join([
        "# Does attention with four heads beat one head at the same width?",
        "",
        "Test perplexity on the Penn Treebank test split (per BPE token; lower is better):",
        "mean over seeds ± standard deviation across seeds.",
        "",
        results_table(rows).to_markdown(index=False),
        "",
    ])


def main(overrides: list[str]) -> None:
    study = yaml.safe_load(PARAMS_FILE.read_text())["study"]
    rows = summarise(study_metrics(study["heads"], study["seeds"]))
    REPORTS_DIR.mkdir(exist_ok=True)
    (REPORTS_DIR / "summary.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    (REPORTS_DIR / "results.md").write_text(render(rows))
    print(results_table(rows).to_string(index=False))
