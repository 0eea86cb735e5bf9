"""Stage `spotlight`: the spotlight study's report, from the score stage's metrics: accuracy at
the answer positions against the number of clues k, one line per variant, with 95% CIs over
seeds; the paired gap between the two variants of report.compare's first pair at every k, beside
the video's 75% against 35%; and where the heads look, clue by clue.

It reads configs/report.yaml (the study's models, report settings and paths) and, per model,
metrics/NAME.json and metrics/attention/NAME.json; it writes reports/results.md, results.html
(the same blocks), summary.json, the figures, and metrics/: the headline numbers with their CIs,
one file each, for `dvc metrics show` (analysis/headline.py). The analysis is analysis/clue_accuracy.py's."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from headstudy.analysis.clue_accuracy import accuracy_table, headline, spotlight_report
from headstudy.analysis.headline import write_metric_files
from headstudy.analysis.render import to_html, to_markdown
from headstudy.analysis.statistics import nan_to_null
from headstudy.bookkeeping import guards
from headstudy.common.errors import ConfigError
from headstudy.common.files import read_json, write_atomically, write_json


def read_models(models: list[dict], metrics_dir: Path) -> list[dict]:
    """Every model's metrics and clue attention, with its variant, k and seed."""
    rows = []
    for model in models:
        if model.get("clues") is None:
            raise ConfigError(
                f"model {model['name']} has no number of clues: the spotlight report needs study.clues in params.yaml"
            )
        metrics = read_json(metrics_dir / f"{model['name']}.json")
        attention = read_json(metrics_dir / "attention" / f"{model['name']}.json")
        rows.append(
            {
                "name": model["name"],
                "variant": str(model["variant"]),
                "seed": model["seed"],
                "k": int(model["clues"]),
                **metrics,
                "attention": attention["layers"],
            }
        )
    return rows


def spotlight(config: DictConfig, study: dict, settings: dict) -> dict:
    metrics_dir, reports_dir = Path(config.paths.metrics), Path(config.paths.reports)
    variants = [str(v) for v in study["variants"]]
    ks = sorted(int(k) for k in study.get("clues") or [])
    if not ks:
        raise ConfigError("study.clues in params.yaml is empty: the spotlight report compares numbers of clues")
    models = read_models(
        OmegaConf.to_container(config.models) if OmegaConf.is_config(config.models) else list(config.models),
        metrics_dir,
    )
    focus = read_json(metrics_dir / "attention" / f"{models[0]['name']}.json")["focus"]
    blocks, summary = spotlight_report(models, variants, ks, focus, settings, reports_dir / "figures")
    write_json(reports_dir / "summary.json", nan_to_null(summary))
    write_metric_files(reports_dir / "metrics", headline(summary))
    write_atomically(reports_dir / "results.md", to_markdown(blocks, reports_dir))
    write_atomically(reports_dir / "results.html", to_html(blocks, settings["title"]))
    print(accuracy_table(summary["rows"], ks).to_string(index=False))
    for comparison in summary["comparisons"]:
        print(f"{comparison['b']} against {comparison['a']}: largest gap at k = {comparison['largest']['k']}")
    return summary


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    spotlight(config, OmegaConf.to_container(config.study), OmegaConf.to_container(config.report))
