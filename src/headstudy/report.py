"""Stage `report`: the study's table from every model (geometric-mean test perplexity over
seeds, 95% CIs on log-perplexity), the paired comparisons, the matched control, the budget
evidence, a head-count sweep when the study is one, the n-gram baselines and the figures; as
markdown, as self-contained HTML and as summary.json.

What the report contains follows `report:` in the study's params.yaml; where files go follows
`paths` in conf/.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from headstudy.analysis import figures
from headstudy.analysis.heads import heads_blocks
from headstudy.analysis.render import to_html, to_markdown
from headstudy.bookkeeping import guards, tracking
from headstudy.formats.errors import ConfigError
from headstudy.formats.files import write_atomically, write_json
from headstudy.formats.names import model_name
from headstudy.formats.prepared import load_stats
from headstudy.analysis.statistics import nan_to_null, paired_difference, perplexity_ci95, share_explained, verdict

def read_json(path: Path) -> dict:
    if not Path(path).is_file():
        raise ConfigError(f"{path} not found: run `dvc repro` to produce it")
    try:
        return json.loads(Path(path).read_text())
    except ValueError as error:
        raise ConfigError(f"{path} is not valid JSON ({error}): run `dvc repro` to produce it again") from None


def label(variant: str, labels: dict) -> str:
    if variant in labels:
        return labels[variant]
    heads = int(variant.partition("-")[0])
    return f"{heads} head{'s' if heads > 1 else ''}"


def study_metrics(metrics: Path, variants: list[str], seeds: list[int]) -> pd.DataFrame:
    """One row per (variant, seed) of the study; files of models outside it are never read."""
    return pd.DataFrame([read_json(metrics / f"{model_name(v, s)}.json") | {"variant": v, "seed": s}
                         for v in variants for s in seeds])


def study_curves(metrics: Path, variants: list[str], seeds: list[int]) -> pd.DataFrame:
    return pd.concat([
        pd.read_csv(metrics / "curves" / f"{model_name(v, s)}.csv").assign(variant=v, seed=s)
        for v in variants for s in seeds
    ], ignore_index=True)


def summarise(metrics: pd.DataFrame, variants: list[str], labels: dict, bigram: float) -> list[dict]:
    rows = []
    for variant in variants:
        group = metrics[metrics["variant"] == variant].sort_values("seed")
        mean, low, high = perplexity_ci95(group["test_ppl"])
        rows.append({
            "variant": variant,
            "label": label(variant, labels),
            "heads": int(group["heads"].iloc[0]),
            "params": int(group["params"].iloc[0]),
            "seeds": group["seed"].astype(int).tolist(),
            "test_ppl": group["test_ppl"].tolist(),
            "test_ppl_mean": mean,
            "test_ppl_ci95": [low, high],
            "word_ppl_mean": perplexity_ci95(group["test_word_ppl"])[0],
            "below_bigram": 1 - mean / bigram,
        })
    return rows


def interval(low: float, high: float, digits: int = 1) -> str:
    return "n/a (one seed)" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def percent_interval(low: float, high: float) -> str:
    return "n/a (one seed)" if math.isnan(low) else f"[{low:+.1%}, {high:+.1%}]"


def results_table(rows: list[dict], baselines: dict, vocab: int) -> pd.DataFrame:
    table = pd.DataFrame({
        "Model": [r["label"] for r in rows],
        "Parameters": [f"{r['params']:,}" for r in rows],
        "Test perplexity": [f"{r['test_ppl_mean']:.2f}" for r in rows],
        "95% CI": [interval(*r["test_ppl_ci95"], digits=2) for r in rows],
        "Against the bigram": [f"{-r['below_bigram']:+.1%}" for r in rows],
        "Per-word perplexity": [f"{r['word_ppl_mean']:.1f}" for r in rows],
        "Seeds": [", ".join(map(str, r["seeds"])) for r in rows],
    })
    for name, params in (("unigram", vocab - 1), ("bigram", vocab * (vocab - 1))):
        result = baselines[name]
        table.loc[len(table)] = [f"{name.capitalize()} baseline (add-{result['add_k']:g})", f"{params:,}",
                                 f"{result['test_ppl']:.2f}", "", "", f"{result['test_word_ppl']:.1f}", ""]
    return table


def comparisons(rows: list[dict], pairs: list[list]) -> list[dict]:
    """The paired comparisons asked for in report.compare that the study has both sides of."""
    by_variant = {r["variant"]: r for r in rows}
    found = []
    for a, b in ((str(a), str(b)) for a, b in pairs):
        if a in by_variant and b in by_variant:
            ra, rb = by_variant[a], by_variant[b]
            found.append({"variant_a": a, "variant_b": b, **paired_difference(
                dict(zip(ra["seeds"], ra["test_ppl"])), dict(zip(rb["seeds"], rb["test_ppl"])), ra["label"], rb["label"])})
    return found


def comparison_table(comparison: dict, rows: list[dict], claim: dict | None) -> pd.DataFrame:
    by_variant = {r["variant"]: r for r in rows}
    a, b = by_variant[comparison["variant_a"]], by_variant[comparison["variant_b"]]
    table = pd.DataFrame({
        "": [f"{a['label']}: perplexity", f"{b['label']}: perplexity",
             "Relative change, paired over seeds", "Difference, paired over seeds"],
        "This study": [
            f"{a['test_ppl_mean']:.2f}", f"{b['test_ppl_mean']:.2f}",
            f"{comparison['relative']:+.1%}, 95% CI {percent_interval(*comparison['relative_ci95'])}",
            f"{comparison['diff_mean']:+.2f}, 95% CI {interval(*comparison['diff_ci95'], digits=2)}",
        ],
    })
    if claim and [comparison["variant_a"], comparison["variant_b"]] == [str(claim["a"]), str(claim["b"])]:
        table["Course chapter"] = [f"{claim['ppl_a']:.1f}", f"{claim['ppl_b']:.1f}",
                                   f"{claim['ppl_b'] / claim['ppl_a'] - 1:+.1%}", f"{claim['ppl_b'] - claim['ppl_a']:+.1f}"]
    return table


def control_sentence(found: list[dict], control: dict) -> tuple[str, dict] | None:
    """How much of the gain of `treatment` over `baseline` the matched `control` (same
    parameters as the treatment, the baseline's heads) reproduces."""
    pairs = {(c["variant_a"], c["variant_b"]): c for c in found}
    baseline, matched, treatment = (str(control[k]) for k in ("baseline", "control", "treatment"))
    total, heads = pairs.get((baseline, treatment)), pairs.get((matched, treatment))
    if total is None or heads is None:
        return None
    rows = {c["variant_a"]: c["a"] for c in found} | {c["variant_b"]: c["b"] for c in found}
    by_parameters = {"log_ratio": total["log_ratio"] - heads["log_ratio"]}
    result = {"baseline": baseline, "control": matched, "treatment": treatment, "seeds": total["seeds"],
              "parameters_log_ratio": by_parameters["log_ratio"], "heads_log_ratio": heads["log_ratio"],
              "total_log_ratio": total["log_ratio"], "share_explained_by_parameters": None}
    if not total["significant"]:
        return (f"{rows[treatment]} and {rows[baseline]} do not differ clearly, so there is no gain for the "
                f"extra parameters to explain."), result
    share = share_explained(total, by_parameters)
    result["share_explained_by_parameters"] = share
    if share <= 0:
        explained = "none of it: the extra parameters alone do not help the single head"
    elif share >= 1:
        explained = "all of it: with as many parameters, more heads add nothing"
    else:
        explained = f"{share:.0%} of it; splitting into heads gives the other {1 - share:.0%}"
    return (f"Of the gain of {rows[treatment].lower()} over {rows[baseline].lower()} ({total['relative']:+.1%} "
            f"perplexity), the extra output projection given to {rows[matched].lower()} explains {explained} "
            f"(log-perplexity shares, means over seeds {', '.join(map(str, total['seeds']))}). At equal "
            f"parameters: {verdict(heads)}"), result


def comparison_blocks(found: list[dict], rows: list[dict], settings: dict) -> list:
    if not found:
        return [("text", f"No comparison: none of the pairs in report.compare ({settings.get('compare', [])}) "
                         "has both of its variants in study.variants.")]
    blocks = [("heading", "The comparisons")]
    for comparison in found:
        blocks += [("text", verdict(comparison)),
                   ("table", comparison_table(comparison, rows, settings.get("seed_claim")))]
    if settings.get("seed_claim"):
        blocks.append(("text", "The course chapter's corpus is not known, so its perplexities are not "
                               "comparable with ours in level; its direction and its relative change are."))
    return blocks


def exp_show_columns(found: list[dict]) -> dict:
    """The comparisons once more, keyed `B_vs_A` with one number per key, which `dvc exp show`
    can put in columns (`compare.4_vs_1.relative`); it shows a list as one string."""
    return {f"{c['variant_b']}_vs_{c['variant_a']}": {
        "relative": c["relative"], "relative_ci95_low": c["relative_ci95"][0],
        "relative_ci95_high": c["relative_ci95"][1], "diff_mean": c["diff_mean"]} for c in found}


def budget_section(rows, found, curves, stats, settings, figure_dir) -> tuple[list, dict]:
    """The budget paragraph from the study's own curves, the criterion of report.budget, and the
    long runs' evidence with its figure."""
    budget = settings["budget"]
    mean_curves = curves.groupby(["variant", "tokens"])["val_ppl"].mean().unstack("variant")
    tokens = int(mean_curves.index.max())
    epochs = tokens / stats["splits"]["train"]["tokens"]
    last = mean_curves.iloc[-1]
    still = float((1 - last / mean_curves.iloc[-2]).max()) if len(mean_curves) > 1 else None
    final_order = list(last.sort_values().index)
    changes = [int(t) for t, row in mean_curves.iterrows() if list(row.sort_values().index) != final_order]
    worst = min(rows, key=lambda r: r["below_bigram"])
    beats = worst["below_bigram"] >= budget["beat_bigram_by"]
    result = {"tokens": tokens, "epochs": epochs, "last_interval_improvement": still,
              "ranking_changes_at_tokens": changes, "weakest_below_bigram": worst["below_bigram"]}
    text = (
        f"Each model trained on {tokens / 1e6:.2f} million tokens, {epochs:.1f} epochs of the training split. "
        + ("With one validation point, the curves cannot show how much training still improved. "
           if still is None else
           "Over the last validation interval the mean validation perplexity of every variant fell by at most "
           f"{still:.2%}. ")
        + "The ranking of the variants by mean validation perplexity "
        + ("is the final one at every validation point. " if not changes else
           f"differs from the final one at {len(changes)} of {len(mean_curves)} validation points, the last at "
           f"{changes[-1] / 1e6:.2f} million tokens. ")
        + f"Criterion for the budget (report.budget): every variant at least {budget['beat_bigram_by']:.0%} below the "
          f"bigram in test perplexity (the weakest, {worst['label']}, is {worst['below_bigram']:.1%} below: "
          f"{'met' if beats else 'NOT met'})"
    )
    met = beats
    if found:
        first = found[0]
        gap = mean_curves[first["variant_b"]] / mean_curves[first["variant_a"]] - 1
        quarter_start = gap.index[gap.index >= 0.75 * tokens][0]
        drift = float(abs(gap.iloc[-1] - gap.loc[quarter_start]))
        stable = drift < budget["max_gap_drift"]
        met = beats and stable
        result["gap_last_quarter_drift"] = drift
        text += (f", and the relative gap in validation perplexity of {first['b']} against {first['a']} moving by less "
                 f"than {budget['max_gap_drift'] * 100:g} points over the last quarter of training (it moved "
                 f"{drift * 100:.1f} points, from {gap.loc[quarter_start]:+.1%} to {gap.iloc[-1]:+.1%}: "
                 f"{'met' if stable else 'NOT met'})")
    result["criterion_met"] = bool(met)
    blocks = [("heading", "Budget"), ("text", text + ".")]
    evidence_dir = Path(budget["evidence"])
    runs = sorted(evidence_dir.glob("h*-s*.csv"))
    if len(runs) != 2:
        raise ConfigError(f"report.budget.evidence={evidence_dir}: expected the curves of two long runs "
                          f"(hA-sS.csv and hB-sS.csv), found {len(runs)}")
    evidence = {"{}, seed {}".format(label(variant, settings.get("labels", {})), seed): pd.read_csv(p)
                for p in runs for variant, seed in [p.stem[1:].rsplit("-s", 1)]}
    (name_a, curve_a), (name_b, curve_b) = evidence.items()
    long_gap = (curve_b.set_index("tokens")["val_ppl"] / curve_a.set_index("tokens")["val_ppl"] - 1).rename(
        f"{name_b} against {name_a}")
    figure = figures.budget_evidence(evidence, long_gap, tokens, figure_dir / "budget_evidence.png")
    reached = long_gap.index >= tokens
    at_budget = float(long_gap[reached].iloc[0]) if reached.any() else math.nan
    blocks += [
        ("text", f"Evidence for the budget ({evidence_dir}): one long run per head count ({' and '.join(evidence)}), "
                 f"{long_gap.index.max() / 1e6:.1f} million tokens under one schedule, validated every "
                 f"{long_gap.index[1] - long_gap.index[0]:,} tokens. The relative gap goes from "
                 f"{long_gap.iloc[0]:+.1%} at the first validation to {at_budget:+.1%} at this study's budget and "
                 f"{long_gap.iloc[-1]:+.1%} at the end. Points before the end of a long run are taken at a higher "
                 "learning rate than a run of that length ends with, so they overstate the perplexity such a run "
                 "reaches."),
        ("figure", figure),
    ]
    result["evidence"] = {"gap_first": float(long_gap.iloc[0]), "gap_at_budget": at_budget,
                          "gap_last": float(long_gap.iloc[-1]), "tokens": int(long_gap.index.max())}
    return blocks, result


# Vaswani et al. (2017), Table 3 row (A): development perplexity (per wordpiece, EN-DE) of the
# base model by head count, at equal computation. A fact of the literature, not a setting.
VASWANI_TABLE3A_PPL = {1: 5.29, 4: 5.00, 16: 4.91, 32: 5.01}


def sweep_section(rows: list[dict], found: list[dict], bigram: float, figure_dir: Path) -> tuple[list, dict]:
    """Test perplexity against head count, and how its shape compares with Vaswani et al. 2017,
    Table 3 row (A), on the head counts both have: there, perplexity falls from 1 to 4 to 16
    heads and rises at 32."""
    rows = sorted(rows, key=lambda r: r["heads"])
    figure = figures.sweep(rows, bigram, figure_dir / "sweep.png")
    best = min(rows, key=lambda r: r["test_ppl_mean"])
    means = {r["heads"]: r["test_ppl_mean"] for r in rows}
    shared = [h for h in VASWANI_TABLE3A_PPL if h in means and h <= 16]
    falls = len(shared) > 1 and all(means[x] > means[y] for x, y in zip(shared, shared[1:]))
    drop = next((c for c in found if (c["variant_a"], c["variant_b"]) == ("16", "32")), None)
    sentence = (f"The best head count here is {best['heads']} (test perplexity {best['test_ppl_mean']:.2f}). "
                f"Vaswani et al. (2017, Table 3 row A) saw development perplexity fall from 1 to 4 to 16 heads "
                f"({', '.join(f'{h}: {p}' for h, p in VASWANI_TABLE3A_PPL.items())}) and rise at 32. Ours "
                f"{'falls' if falls else 'does not fall'} at every step of {' to '.join(map(str, shared))} heads")
    if drop is None:
        rises = None
    else:
        sentence += (f", and from 16 to 32 heads it changes by {drop['relative']:+.1%} (95% CI "
                     f"{percent_interval(*drop['relative_ci95'])})")
        rises = (drop["relative"] > 0) if drop["significant"] else None
    if not falls or rises is False:
        agrees, verdict = False, "so its means do not have that shape"
    elif rises:
        agrees, verdict = True, "so it has that shape"
    else:
        agrees, verdict = None, ("so it has that shape up to 16 heads; whether 32 heads are worse than 16, "
                                 "these seeds cannot tell")
    sentence += f": {verdict}."
    if found and not any(c["significant"] for c in found):
        sentence += (" No difference between neighbouring head counts is resolved by these seeds (every 95% CI "
                     "includes 0): at this width and budget the head count moves test perplexity by less than "
                     "the seed-to-seed spread, so the shape of the means is not evidence either way.")
    return [("heading", "Head-count sweep"), ("text", sentence), ("figure", figure)], {
        "best_heads": best["heads"], "falls_to_16": falls, "agrees_with_vaswani": agrees}


def report(config: DictConfig, study: dict, settings: dict) -> dict:
    variants, seeds = [str(v) for v in study["variants"]], list(study["seeds"])
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    metrics_dir, reports_dir = Path(config.paths.metrics), Path(config.paths.reports)
    figure_dir = reports_dir / "figures"
    stats = load_stats(Path(config.paths.prepared))
    baselines = read_json(Path(config.paths.baselines))
    bigram = baselines["bigram"]["test_ppl"]
    rows = summarise(study_metrics(metrics_dir, variants, seeds), variants, labels, bigram)
    found = comparisons(rows, settings.get("compare", []))
    curves = study_curves(metrics_dir, variants, seeds)
    test = stats["splits"]["test"]
    blocks = [
        ("title", settings["title"]),
        ("text", f"Test split of the corpus `{stats['corpus']}`, {test['tokens'] - 1:,} tokens predicted. Perplexity "
                 "is per BPE token (lower is better): the geometric mean over seeds, with a 95% Student-t "
                 "confidence interval computed on log-perplexity across seeds and exponentiated."),
        ("table", results_table(rows, baselines, stats["vocab_size"])),
        *comparison_blocks(found, rows, settings),
    ]
    summary = {"rows": rows, "baselines": {k: baselines[k] for k in ("unigram", "bigram")}, "comparisons": found,
               "compare": exp_show_columns(found)}
    if settings.get("matched_control"):
        control = control_sentence(found, settings["matched_control"])
        if control:
            blocks.append(("text", control[0]))
            summary["matched_control"] = control[1]
    laggards = [r["label"] for r in rows if r["test_ppl_mean"] >= bigram]
    blocks.append(("text", "Every model beats the bigram baseline." if not laggards else
                   f"Warning: the bigram baseline beats {' and '.join(laggards).lower()}: a transformer that cannot "
                   "beat a bigram is undertrained or broken."))
    if settings.get("budget"):
        budget_blocks, summary["budget"] = budget_section(rows, found, curves, stats, settings, figure_dir)
        blocks += budget_blocks
    if settings.get("sweep"):
        sweep_blocks, summary["sweep"] = sweep_section(rows, found, bigram, figure_dir)
        blocks += sweep_blocks
    blocks += [
        ("heading", "Figures"),
        ("figure", figures.validation_curves(curves, {r["variant"]: r["label"] for r in rows},
                                             figure_dir / "validation_curves.png")),
        ("figure", figures.test_perplexity(rows, bigram, figure_dir / "test_perplexity.png")),
        ("text", f"Per-word perplexity is exp(total NLL / words), counting one end-of-line per line as the PTB "
                 f"convention does: {test['words']:,} words + {test['lines']:,} lines. It equals the per-token "
                 f"perplexity to the power tokens/words, {(test['tokens'] - 1) / (test['words'] + test['lines']):.3f} "
                 "here, so both rank models the same way."),
    ]
    if settings.get("inspect"):
        blocks += heads_blocks(read_json(reports_dir / "heads.json"), labels)
    write_json(reports_dir / "summary.json", nan_to_null(summary))
    write_atomically(reports_dir / "results.md", to_markdown(blocks, reports_dir))
    write_atomically(reports_dir / "results.html", to_html(blocks, settings["title"]))
    print(results_table(rows, baselines, stats["vocab_size"]).to_string(index=False))
    for comparison in found:
        print(verdict(comparison))
    return summary


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    summary = report(config, OmegaConf.to_container(config.study), OmegaConf.to_container(config.report))
    reports = Path(config.paths.reports)
    tracking.log_study_report([reports / name for name in ("results.html", "results.md", "summary.json", "figures")],
                              summary)
