"""Stage `spotlight`: the spotlight study's report, from the score stage's metrics: accuracy at
the answer positions against the number of clues k, one line per variant, with 95% CIs over
seeds (with report.success_accuracy: successes out of seeds, medians and every seed); the paired
gap between the two variants of report.compare's first pair at every k, beside the video's 75%
against 35%; where the heads look, clue by clue; which head reads which clue, where the ablate
stage has run; and the runs of report.extra beside the grid.

It reads configs/report.yaml (the study's models, report settings and paths) and, per model,
metrics/NAME.json, metrics/attention/NAME.json and, where they exist, metrics/ablation/NAME.json
and metrics/answers/NAME.json; and each report.extra folder's NAME.json. It writes
reports/results.md, results.html (the same blocks), summary.json, the figures, and metrics/: the
headline numbers, one file each, for `dvc metrics show` (analysis/rendering/headline.py). The
analysis is analysis/sections/clue_accuracy.py's, with the sections of clue_ablation.py,
answer_types.py and extra_runs.py."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from headstudy.analysis.rendering.headline import write_metric_files
from headstudy.analysis.rendering.render import to_html, to_markdown
from headstudy.analysis.sections.clue_accuracy import (
    accuracy_table,
    headline,
    outcome_table,
    spotlight_report,
    success_threshold,
)
from headstudy.analysis.sections.extra_runs import check_runs, extra_settings
from headstudy.analysis.statistics import nan_to_null
from headstudy.common.errors import ConfigError
from headstudy.common.files import read_json, write_atomically, write_json
from headstudy.execution import guards
from headstudy.formats.machines import read_record, trained_on_line


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


def read_per_model(models: list[dict], folder: Path, what: str, belongs) -> dict[str, dict]:
    """A per-model stage's folder/NAME.json of the models it has measured, by name (a study without
    that stage has none); each checked by belongs(file, model), else refused as not `what` of it."""
    found = {}
    for model in models:
        path = folder / f"{model['name']}.json"
        if path.is_file():
            measured = read_json(path)
            if not belongs(measured, model):
                raise ConfigError(
                    f"{path} is not the {what} of {model['name']} ({model['heads']} heads, "
                    f"k = {model['k']}): run `dvc repro` to write it again"
                )
            found[model["name"]] = measured
    return found


def read_ablations(models: list[dict], metrics_dir: Path) -> dict[str, dict]:
    """metrics/ablation/NAME.json: one ablation per head, of the model's number of clues."""

    def belongs(ablation: dict, model: dict) -> bool:
        return ablation.get("clues") == model["k"] and len(ablation.get("ablated", [])) == model["heads"]

    return read_per_model(models, metrics_dir / "ablation", "ablation", belongs)


def read_answers(models: list[dict], metrics_dir: Path) -> dict[str, dict]:
    """metrics/answers/NAME.json: the split by answer type, of the model by name and clues."""

    def belongs(split: dict, model: dict) -> bool:
        return split.get("clues") == model["k"] and split.get("name") == model["name"]

    return read_per_model(models, metrics_dir / "answers", "split by answer type", belongs)


def read_extras(settings: dict) -> list[dict]:
    """report.extra with each folder's score metrics, NAME.json by name, and the answers stage's
    split, answers/NAME.json, for the models that have one; folders are relative to the study's
    folder, where the stage runs."""
    extras = []
    for index, extra in enumerate(extra_settings(settings)):
        folder = Path(extra["metrics"])
        if not folder.is_dir():
            raise ConfigError(
                f"report.extra[{index}].metrics in params.yaml: no folder {folder} in the study's folder (a folder "
                "of score metrics files NAME.json): run the pipeline that writes it, or remove the entry"
            )
        runs = {path.stem: read_json(path) for path in sorted(folder.glob("*.json"))}
        check_runs(index, extra["metrics"], runs)
        answers = {path.stem: read_json(path) for path in sorted((folder / "answers").glob("*.json"))}
        extras.append({**extra, "runs": runs, "answers": answers})
    return extras


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
    threshold = success_threshold(settings)  # refused now, before anything is written
    extras = read_extras(settings)
    ablations = read_ablations(models, metrics_dir)
    answers = read_answers(models, metrics_dir)
    focus = read_json(metrics_dir / "attention" / f"{models[0]['name']}.json")["focus"]
    blocks, summary = spotlight_report(
        models,
        variants,
        ks,
        focus,
        settings,
        reports_dir / "figures",
        ablations=ablations,
        extras=extras,
        answers=answers,
    )
    # The machines under the title and its answer: the study's own models, from its folder's record.
    after = next((i + 1 for i, (kind, _) in enumerate(blocks) if kind == "headline"), 1)
    blocks.insert(after, ("text", trained_on_line(read_record(metrics_dir.parent), [m["name"] for m in models])))
    write_json(reports_dir / "summary.json", nan_to_null(summary))
    write_metric_files(reports_dir / "metrics", headline(summary))
    write_atomically(reports_dir / "results.md", to_markdown(blocks, reports_dir))
    write_atomically(reports_dir / "results.html", to_html(blocks, settings["title"]))
    table = accuracy_table(summary["rows"], ks) if threshold is None else outcome_table(summary["rows"], threshold)
    print(table.to_string(index=False))
    for comparison in summary["comparisons"]:
        print(f"{comparison['b']} against {comparison['a']}: largest gap at k = {comparison['largest']['k']}")
    return summary


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    spotlight(config, OmegaConf.to_container(config.study), OmegaConf.to_container(config.report))
