"""Stage `report`: the study's table from every model (geometric-mean test perplexity over
seeds, 95% CIs on log-perplexity), every comparison as a log-ratio of perplexities per token and
per word with its 95% CI, the variants analysed together (seed as a block), the 2 x 2 of heads and
output projection when the study has it, the budget evidence, a head-count sweep when the study is
one, the n-gram baselines and the figures; or, for a learning-rate study (study.lrs), each
variant's learning rate. As markdown, as self-contained HTML, as summary.json, and as the few
headline numbers with their CIs in reports/metrics/ (`dvc metrics show`).

What the report contains follows `report:` in the study's params.yaml, as the configure stage
wrote it into the report's config file with the study and its models. Every sentence is decided
by the numbers, and nothing in the outputs depends on when or where the report ran.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.gap_share import gap_share, share_blocks, share_settings
from headstudy.analysis.rendering.headline import metric_files, write_metric_files
from headstudy.analysis.rendering.inputs import read_curve, read_json
from headstudy.analysis.rendering.render import to_html, to_markdown
from headstudy.analysis.rendering.wording import interval, label, mid_sentence
from headstudy.analysis.sections.budget import budget_section, evidence_curves, no_answer
from headstudy.analysis.sections.comparisons import (
    FOREST_FIGURE,
    answer_line,
    comparison_blocks,
    comparisons,
    exp_show_columns,
    headline_line,
    pooled_blocks,
)
from headstudy.analysis.sections.heads import heads_blocks
from headstudy.analysis.sections.learning_rates import learning_rate_section, shared_rate_section
from headstudy.analysis.sections.roundings import roundings_section
from headstudy.analysis.sections.sweep import sweep_section
from headstudy.analysis.sections.training_length import other_budget_inputs, training_length_section
from headstudy.analysis.statistics import nan_to_null, perplexity_ci95, verdict
from headstudy.bookkeeping import progress, store, tracking
from headstudy.common.errors import ConfigError
from headstudy.common.files import write_atomically, write_json
from headstudy.execution import guards
from headstudy.formats.machines import read_record, trained_on_line
from headstudy.formats.prepared import load_stats


def study_metrics(metrics: Path, models: list[dict]) -> pd.DataFrame:
    """One row per model of the study; files of models outside it are never read. A partner's
    model (study.partners) is read from the metrics/ of the study that trained it."""
    return pd.DataFrame(
        [
            read_json(Path(m.get("metrics", metrics)) / f"{m['name']}.json")
            | {"variant": str(m["variant"]), "seed": m["seed"]}
            for m in models
        ]
    )


def study_curves(metrics: Path, models: list[dict]) -> pd.DataFrame:
    return pd.concat(
        [
            read_curve(Path(m.get("metrics", metrics)) / "curves" / f"{m['name']}.csv").assign(
                variant=str(m["variant"]), seed=m["seed"], lr=m.get("lr")
            )
            for m in models
        ],
        ignore_index=True,
    )


def machines_line(metrics: Path, models: list[dict]) -> str:
    """The machine kinds that trained the models, from the trained-on.json of each study folder
    that holds some of them (this study's, a partner's)."""
    record = {"models": {}}
    for folder in sorted({Path(m.get("metrics", metrics)).parent for m in models}):
        record["models"] |= read_record(folder)["models"]
    return trained_on_line(record, [m["name"] for m in models])


def provenance(
    study: dict, models: list[dict], curves: pd.DataFrame, experiment: str, metrics: Path
) -> tuple[str, dict]:
    """What was run, stated from the config, the curves and the record of the machines that trained
    the models, never from the clock or the commit; `experiment`, the MLflow experiment of the
    study's runs, is the config's tracking.experiment."""
    last = curves.groupby(["variant", "seed", "lr"], dropna=False)[["step", "tokens"]].max()
    steps, tokens = sorted(set(last["step"].astype(int))), sorted(set(last["tokens"].astype(int)))
    variants, seeds, lrs = [str(v) for v in study["variants"]], list(study["seeds"]), list(study.get("lrs") or [])
    first_own = next(m["name"] for m in models if "metrics" not in m)
    budget = (
        f"{steps[0]:,} steps, {tokens[0] / 1e6:.2f} million training tokens"
        if len(steps) == len(tokens) == 1
        else f"{steps[0]:,} to {steps[-1]:,} steps ({tokens[0] / 1e6:.2f} to {tokens[-1] / 1e6:.2f} million tokens)"
    )
    text = (
        f"Study: variants {', '.join(variants)}"
        + (f" x learning rates {', '.join(f'{lr:g}' for lr in lrs)}" if lrs else "")
        + f" x seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {len(models)} model"
        f"{'s' if len(models) > 1 else ''}, each trained for {budget}. The runs are in "
        f'the MLflow experiment "{experiment}": one parent run per execution of this study, with a '
        f"nested run per model named as the model ({first_own}, ...); `mlflow ui` shows them."
    )
    partners = study.get("partners")
    if partners:
        text += (
            f" The models of variant{'s' if len(partners['variants']) > 1 else ''} "
            f"{' and '.join(map(str, partners['variants']))} were trained by the study in {partners['folder']}, "
            "in its own experiment, configured as this study would configure them (its configure stage checks it)."
        )
    text += " " + machines_line(metrics, models)
    return text, {
        "variants": variants,
        "seeds": seeds,
        **({"lrs": lrs} if lrs else {}),
        "models": len(models),
        "steps": steps[-1],
        "tokens": tokens[-1],
        "mlflow_experiment": experiment,
    }


def perplexity_by_variant(metrics: pd.DataFrame, variants: list[str], labels: dict, bigram: float) -> list[dict]:
    rows = []
    for variant in variants:
        group = metrics[metrics["variant"] == variant].sort_values("seed")
        mean, low, high = perplexity_ci95(group["test_ppl"])
        rows.append(
            {
                "variant": variant,
                "label": label(variant, labels),
                "heads": int(group["heads"].iloc[0]),
                "params": int(group["params"].iloc[0]),
                "lr": float(group["lr"].iloc[0]),  # the peak learning rate it trained at
                "seeds": group["seed"].astype(int).tolist(),
                "test_ppl": group["test_ppl"].tolist(),
                "test_ppl_mean": mean,
                "test_ppl_ci95": [low, high],
                "word_ppl_mean": perplexity_ci95(group["test_word_ppl"])[0],
                "below_bigram": 1 - mean / bigram,
            }
        )
    return rows


def results_table(rows: list[dict], baselines: dict, vocab: int) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "Model": [r["label"] for r in rows],
            "Parameters": [f"{r['params']:,}" for r in rows],
            "Learning rate": [f"{r['lr']:g}" if r.get("lr") else "" for r in rows],
            "Test perplexity": [f"{r['test_ppl_mean']:.2f}" for r in rows],
            "95% CI": [interval(*r["test_ppl_ci95"], digits=2, sign=False) for r in rows],
            "Against the bigram": [f"{-r['below_bigram']:+.1%}" for r in rows],
            "Per-word perplexity": [f"{r['word_ppl_mean']:.2f}" for r in rows],
            "Seeds": [", ".join(map(str, r["seeds"])) for r in rows],
        }
    )
    for name, params in (("unigram", vocab - 1), ("bigram", vocab * (vocab - 1))):
        result = baselines[name]
        table.loc[len(table)] = [
            f"{name.capitalize()} baseline (add-{result['add_k']:g})",
            f"{params:,}",
            "",
            f"{result['test_ppl']:.2f}",
            "",
            "",
            f"{result['test_word_ppl']:.2f}",
            "",
        ]
    return table


def heads_input(path: Path, reports_dir: Path) -> dict:
    """inspect's heads.json, whose figures the report shows: they must lie in this report's
    folder, as inspect writes them for the same paths.reports, or the report would link elsewhere."""
    heads = read_json(path)
    figures = heads.get("figures", {})
    figures_named = [
        *figures.get("attention_maps", []),
        figures.get("head_scores"),
        *figures.get("spotlight_nulls", []),
    ]
    for figure in figures_named:
        inside = isinstance(figure, str) and reports_dir.resolve() in Path(figure).resolve().parents
        if not inside or not Path(figure).is_file():
            raise ConfigError(
                f"{path} names the figure {figure!r}, which is no file under paths.reports={reports_dir}: "
                "run `headstudy inspect` with the same paths.reports (under DVC: `dvc repro inspect`)"
            )
    return heads


def read_inputs(config: DictConfig, study: dict, settings: dict, models: list[dict]) -> dict:
    """Every file the report reads, read and checked before it writes anything: a missing or
    broken input is refused while the previous report is still whole."""
    metrics_dir, reports_dir = Path(config.paths.metrics), Path(config.paths.reports)
    inputs = {"curves": study_curves(metrics_dir, models)}
    if study.get("lrs"):
        return inputs
    inputs["stats"] = load_stats(Path(config.paths.prepared))
    inputs["baselines"] = read_json(Path(config.paths.baselines))
    inputs["metrics"] = study_metrics(metrics_dir, models)
    if settings.get("inspect"):
        inputs["heads"] = heads_input(reports_dir / "heads.json", reports_dir)
    if settings.get("budget"):
        evidence_curves(Path(settings["budget"]["evidence"]))
    if settings.get("length_against"):
        inputs["other_budget"] = other_budget_inputs(Path(settings["length_against"]), models)
    return inputs


def study_report(
    config: DictConfig, study: dict, settings: dict, models: list[dict], inputs: dict
) -> tuple[list, dict]:
    variants = [str(v) for v in study["variants"]]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    figure_dir = Path(config.paths.reports) / "figures"
    stats = inputs["stats"]
    baselines = inputs["baselines"]
    bigram = baselines["bigram"]["test_ppl"]
    test = stats["splits"]["test"]
    tokens_per_word = (test["tokens"] - 1) / (test["words"] + test["lines"])
    rows = perplexity_by_variant(inputs["metrics"], variants, labels, bigram)
    found = comparisons(rows, settings.get("compare", []), tokens_per_word)
    unanswered = no_answer(rows, settings) if found else None
    curves = inputs["curves"]
    header, summary_provenance = provenance(
        study, models, curves, config.tracking.experiment, Path(config.paths.metrics)
    )
    blocks = [
        ("title", settings["title"]),
        *([("headline", [unanswered] if unanswered else [headline_line(c) for c in found])] if found else []),
        ("text", header),
        (
            "text",
            f"Test split of the corpus `{stats['corpus']}`, {test['tokens'] - 1:,} tokens predicted. Perplexity "
            "is per BPE token (lower is better): the geometric mean over seeds, with a 95% Student-t "
            "confidence interval computed on log-perplexity across seeds and exponentiated"
            + (" (none with one seed)." if len(rows[0]["seeds"]) < 2 else "."),
        ),
        ("table", results_table(rows, baselines, stats["vocab_size"])),
        *comparison_blocks(found, settings, tokens_per_word, unanswered),
    ]
    pooled, pooled_summary = pooled_blocks(rows, found, settings, tokens_per_word, figure_dir)
    blocks += pooled
    rounding_summary = {}
    if settings.get("roundings"):
        by_variant = inputs["metrics"].groupby("variant")
        ppl = {
            variant: dict(zip(group["seed"].astype(int), group["test_ppl"], strict=False))
            for variant, group in by_variant
        }
        rounding_blocks, flips = roundings_section(settings["roundings"], ppl, lambda v: label(v, labels))
        blocks += rounding_blocks
        rounding_summary = {"roundings": flips}
    summary = {
        "provenance": summary_provenance,
        "tokens_per_word": tokens_per_word,
        "rows": rows,
        "baselines": {k: baselines[k] for k in ("unigram", "bigram")},
        "comparisons": found,
        "no_answer": unanswered,
        "compare": exp_show_columns(found),
        **pooled_summary,
        **rounding_summary,
    }
    laggards = [r["label"] for r in rows if r["test_ppl_mean"] >= bigram]
    blocks.append(
        (
            "text",
            f"Every model beats the bigram baseline ({bigram:.2f})."
            if not laggards
            else f"Warning: the bigram baseline ({bigram:.2f}) beats {' and '.join(map(mid_sentence, laggards))}: "
            "a transformer that cannot beat a bigram is undertrained or broken.",
        )
    )
    if settings.get("share"):
        summary["share"] = [gap_share(rows, share) for _, share in share_settings(settings["share"])]
        for result in summary["share"]:
            blocks += share_blocks(result, {r["variant"]: r["label"] for r in rows})
    if settings.get("budget"):
        budget_blocks, summary["budget"] = budget_section(rows, found, curves, stats, settings, figure_dir)
        blocks += budget_blocks
    if settings.get("sweep"):
        sweep_blocks, summary["sweep"] = sweep_section(rows, tokens_per_word, figure_dir)
        blocks += sweep_blocks
    if settings.get("length_against"):
        length_blocks, summary["training_length"] = training_length_section(
            found, rows, curves, inputs["other_budget"], Path(settings["length_against"]), tokens_per_word, figure_dir
        )
        blocks += length_blocks
    names = {r["variant"]: r["label"] for r in rows}
    write_curve_table(curves, names, Path(config.paths.reports) / "validation_curves.csv")
    blocks += [
        ("heading", "Figures"),
        (
            "figure",
            (
                report_figures.validation_curves(curves, names, figure_dir / "validation_curves.png"),
                "Validation perplexity per token against training tokens: each variant's mean over seeds as a "
                "line, the band from its lowest to its highest seed.",
            ),
        ),
        (
            "figure",
            (
                report_figures.test_perplexity(rows, figure_dir / "test_perplexity.png"),
                "Test perplexity per token of each variant (geometric mean over seeds, 95% CI); each seed a dot, "
                "the dots of one seed joined across variants, as the comparisons pair them. The axis spans the "
                "results, not 0.",
            ),
        ),
        (
            "text",
            f"Per-word perplexity is exp(total NLL / words), counting one end-of-line per line as the PTB "
            f"convention does: {test['words']:,} words + {test['lines']:,} lines. It equals the per-token "
            f"perplexity to the power tokens/words, {tokens_per_word:.3f} here, so both rank models the same way.",
        ),
    ]
    if settings.get("inspect"):
        blocks += heads_blocks(inputs["heads"], labels)
    progress.print_table(results_table(rows, baselines, stats["vocab_size"]))
    for line in [unanswered] if unanswered else [verdict(comparison) for comparison in found]:
        progress.print_wrapped(line)
    return blocks, summary


def write_curve_table(curves: pd.DataFrame, names: dict[str, str], path: Path) -> None:
    """Validation perplexity against training tokens, a row per variant and point (geometric mean
    over seeds), the variant named as in the report: the table that `dvc plots show` draws, a line
    per model, whichever variants the study has."""
    mean = curves.assign(log_ppl=np.log(curves["val_ppl"])).groupby(["variant", "tokens"], sort=False)["log_ppl"].mean()
    table = pd.DataFrame(
        {
            "model": mean.index.get_level_values("variant").map(names),
            "tokens": mean.index.get_level_values("tokens"),
            "perplexity": np.exp(mean.to_numpy()),
        }
    )
    write_atomically(path, table.to_csv(index=False, float_format="%.4f"))


def learning_rate_report(
    config: DictConfig, study: dict, settings: dict, models: list[dict], inputs: dict
) -> tuple[list, dict]:
    variants = [str(v) for v in study["variants"]]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    curves = inputs["curves"]
    header, summary_provenance = provenance(
        study, models, curves, config.tracking.experiment, Path(config.paths.metrics)
    )
    blocks, summary = learning_rate_section(
        curves,
        variants,
        [float(lr) for lr in study["lrs"]],
        labels,
        list(study["seeds"]),
        Path(config.paths.reports) / "figures",
    )
    shared, shared_summary = shared_rate_section(
        curves,
        settings.get("compare") or [],
        [float(lr) for lr in study["lrs"]],
        labels,
        Path(config.paths.reports) / "figures",
    )
    best = [
        f"{label(v, labels)}: best at learning rate {summary['selected_lr'][v]:g}, final validation perplexity "
        f"{summary['selected_val_ppl'][v]:.2f} (seed{'s' if len(study['seeds']) > 1 else ''} "
        f"{', '.join(map(str, study['seeds']))})."
        for v in variants
    ]
    return [("title", settings["title"]), ("headline", best), ("text", header), *blocks, *shared], {
        "provenance": summary_provenance,
        **summary,
        **shared_summary,
    }


def report(config: DictConfig) -> tuple[dict, list[str]]:
    """Write the report's files; its summary and its answer in short lines (a comparison each)."""
    study, settings = OmegaConf.to_container(config.study), OmegaConf.to_container(config.report)
    models = OmegaConf.to_container(config.models)
    build = learning_rate_report if study.get("lrs") else study_report
    inputs = read_inputs(config, study, settings, models)
    store.check_store()  # the report is logged there once written: a store that cannot be opened stops it first
    blocks, summary = build(config, study, settings, models, inputs)
    reports_dir = Path(config.paths.reports)
    write_json(reports_dir / "summary.json", nan_to_null(summary))
    write_metric_files(reports_dir / "metrics", metric_files(summary))
    write_atomically(reports_dir / "results.md", to_markdown(blocks, reports_dir))
    write_atomically(reports_dir / "results.html", to_html(blocks, settings["title"]))
    if summary.get("no_answer"):
        return summary, [summary["no_answer"]]
    if summary.get("comparisons"):
        return summary, [answer_line(comparison) for comparison in summary["comparisons"]]
    return summary, next((lines for kind, lines in blocks if kind == "headline"), [])


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    summary, headline = report(config)
    reports = Path(config.paths.reports)
    # The forest plot and the report's files, each at the run's top (MLflow lists folders first):
    # the page embeds every figure.
    forest = reports / "figures" / FOREST_FIGURE
    files = [reports / name for name in ("results.html", "results.md", "summary.json")]
    tracking.log_study_report([forest, *files] if forest.exists() else files, summary, headline)
