"""Stage `cliff`: the report of a diagnosis study (studies/lr-cliff), from the diagnose stage's
metrics/diagnostics/NAME.csv and NAME.json: a figure per quantity over the training steps (loss,
gradient norm, attention entropy, largest attention logit; one line per run) and the validation
curves, and a table of each run's final validation perplexity beside the learning-rate study's
at the same rate (report.reference, its summary.json) and what the steps showed.

It reads configs/report.yaml (the study's runs, report settings and paths) and writes
reports/results.md, reports/summary.json and reports/figures/. The analysis is analysis/sections/cliff.py's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from headstudy.analysis.rendering.render import to_markdown
from headstudy.analysis.sections.cliff import QUANTITIES, quantity_figure, run_summary, summary_table, validation_figure
from headstudy.analysis.statistics import nan_to_null
from headstudy.common.errors import ConfigError
from headstudy.common.files import read_json, write_atomically, write_json
from headstudy.execution import guards
from headstudy.formats.machines import read_record, trained_on_line


def cliff(config: DictConfig) -> dict:
    settings = OmegaConf.to_container(config.report)
    runs_listed = OmegaConf.to_container(config.get("runs") or OmegaConf.create([]))
    if not runs_listed:
        raise ConfigError("params.yaml has no study.arms: the cliff report reads the runs of a diagnosis study")
    if not settings.get("reference"):
        raise ConfigError("report.reference in params.yaml: the learning-rate study's summary.json to compare with")
    folder, reports = Path(config.paths.metrics) / "diagnostics", Path(config.paths.reports)
    runs = [{**read_json(folder / f"{run['name']}.json"), "arm": run["arm"]} for run in runs_listed]
    steps = {run["name"]: pd.read_csv(folder / f"{run['name']}.csv") for run in runs}
    lr_summary = read_json(Path(settings["reference"]))
    compare = [str(variant) for variant in settings.get("compare_with", [])]
    labels = {str(key): value for key, value in (settings.get("labels") or {}).items()}
    rows = [run_summary(run, steps[run["name"]], lr_summary, compare) for run in runs]
    window = min(run["probe_every"] for run in runs)
    figures = [
        quantity_figure(quantity, runs, steps, reports / "figures", window, runs[0]["context"])
        for quantity in QUANTITIES
    ]
    study = OmegaConf.to_container(config.study)
    blocks = [
        ("title", settings["title"]),
        (
            "text",
            f"Runs: variant {', '.join(map(str, study['variants']))} x learning rates "
            f"{', '.join(f'{lr:g}' for lr in study.get('lrs') or [])} x seed "
            f"{', '.join(map(str, study['seeds']))} x arms {', '.join(study['arms'])}, each trained for "
            f"{runs[0]['steps']:,} steps as the train stage trains it; the attention probed every "
            f"{runs[0]['probe_every']} steps on the first {runs[0]['probe_windows']} validation windows. "
            f"The learning-rate study's numbers come from {settings['reference']}. "
            + trained_on_line(read_record(Path(config.paths.metrics).parent), [run["name"] for run in runs]),
        ),
        ("heading", "Each run"),
        (
            "text",
            "Final validation perplexity of each run beside the learning-rate study's final validation "
            "perplexity at the same rate (seed 0), and what its steps showed: the gradient norm before "
            "clipping, the share of steps whose norm passed the clipping threshold, the lowest mean "
            "attention entropy of any head and the largest attention logit, each with the step of the probe.",
        ),
        ("table", summary_table(rows, labels)),
        ("heading", "Over the steps"),
        *[("figure", figure) for figure in figures],
        ("figure", validation_figure(runs, reports / "figures")),
    ]
    write_json(reports / "summary.json", nan_to_null({"runs": rows}))
    write_atomically(reports / "results.md", to_markdown(blocks, reports))
    print(summary_table(rows, labels).to_string(index=False))
    return {"runs": rows}


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    cliff(config)
