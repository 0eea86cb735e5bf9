"""Stage `report`: the study's table from every model (geometric-mean test perplexity over
seeds, 95% CIs on log-perplexity), every comparison as a log-ratio of perplexities per token and
per word with its 95% CI, the variants analysed together (seed as a block), the 2 x 2 of heads and
output projection when the study has it, the budget evidence, a head-count sweep when the study is
one, the n-gram baselines and the figures; or, for a learning-rate study (study.lrs), each
variant's learning rate. As markdown, as self-contained HTML and as summary.json.

What the report contains follows `report:` in the study's params.yaml, as the configure stage
wrote it into the report's config file with the study and its models. Every sentence is decided
by the numbers, and nothing in the outputs depends on when or where the report ran.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from headstudy.analysis import figures
from headstudy.analysis.heads import heads_blocks
from headstudy.analysis.headline import headline
from headstudy.analysis.render import to_html, to_markdown
from headstudy.analysis.statistics import (additive_fit, contrast, holm, nan_to_null, paired_difference,
                                           perplexity_ci95, polynomial_trend, verdict)
from headstudy.bookkeeping import guards, tracking
from headstudy.formats.errors import ConfigError
from headstudy.formats.files import write_atomically, write_json
from headstudy.formats.names import parse_variant
from headstudy.formats.prepared import load_stats

# Vaswani et al. (2017), Table 3 row (A) and the base model (8 heads): development perplexity
# (per wordpiece, newstest2013 EN-DE) by head count at equal computation, single runs. A fact of
# the literature, not a setting. Their 1-head model keeps its output projection.
VASWANI_TABLE3A_PPL = {1: 5.29, 4: 5.00, 8: 4.92, 16: 4.91, 32: 5.01}


def read_json(path: Path) -> dict:
    if not Path(path).is_file():
        raise ConfigError(f"{path} not found: run `dvc repro` to produce it")
    def refuse(constant: str):
        raise ValueError(f"it holds {constant}, which is no result")

    try:
        return json.loads(Path(path).read_text(), parse_constant=refuse)
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({error}): run `dvc repro` to produce it again") from None


def read_curve(path: Path) -> pd.DataFrame:
    if not Path(path).is_file():
        raise ConfigError(f"{path} not found: run `dvc repro` to produce it")
    return pd.read_csv(path)


def label(variant: str, labels: dict) -> str:
    """report.labels' name for a variant, or its head count (and its settings file, which the
    count alone would hide: 1-mix is not 1)."""
    if variant in labels:
        return labels[variant]
    heads, extra = parse_variant(variant)
    return f"{heads} head{'s' if heads > 1 else ''}" + (f" ({variant})" if extra else "")


def signed(value: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.{digits}f}"


def interval(low: float, high: float, digits: int = 3, sign: bool = True) -> str:
    if math.isnan(low):
        return "n/a"
    form = f"{'+' if sign else ''}.{digits}f"
    return f"[{low:{form}}, {high:{form}}]"


def p_value(p: float) -> str:
    return "n/a" if math.isnan(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def p_is(p: float) -> str:
    """`p = 0.012` or `p < 0.001`, for sentences."""
    text = p_value(p)
    return f"p {text[0]} {text[1:]}" if text.startswith("<") else f"p = {text}"


def study_metrics(metrics: Path, models: list[dict]) -> pd.DataFrame:
    """One row per model of the study; files of models outside it are never read."""
    return pd.DataFrame([read_json(metrics / f"{m['name']}.json") | {"variant": str(m["variant"]), "seed": m["seed"]}
                         for m in models])


def study_curves(metrics: Path, models: list[dict]) -> pd.DataFrame:
    return pd.concat([read_curve(metrics / "curves" / f"{m['name']}.csv").assign(
        variant=str(m["variant"]), seed=m["seed"], lr=m.get("lr")) for m in models], ignore_index=True)


def provenance(study: dict, models: list[dict], curves: pd.DataFrame) -> tuple[str, dict]:
    """What was run, stated from the config and the curves, never from the clock or the commit."""
    last = curves.groupby(["variant", "seed", "lr"], dropna=False)[["step", "tokens"]].max()
    steps, tokens = sorted(set(last["step"].astype(int))), sorted(set(last["tokens"].astype(int)))
    variants, seeds, lrs = [str(v) for v in study["variants"]], list(study["seeds"]), list(study.get("lrs") or [])
    budget = (f"{steps[0]:,} steps, {tokens[0] / 1e6:.2f} million training tokens" if len(steps) == len(tokens) == 1
              else f"{steps[0]:,} to {steps[-1]:,} steps ({tokens[0] / 1e6:.2f} to {tokens[-1] / 1e6:.2f} million tokens)")
    text = (f"Study: variants {', '.join(variants)}"
            + (f" x learning rates {', '.join(f'{lr:g}' for lr in lrs)}" if lrs else "")
            + f" x seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {len(models)} model"
              f"{'s' if len(models) > 1 else ''}, each trained for {budget}. The runs are in "
              f"the MLflow experiment \"{tracking.EXPERIMENT}\": one parent run per execution of this study, with a "
              f"nested run per model named as the model ({models[0]['name']}, ...); `mlflow ui` shows them.")
    return text, {"variants": variants, "seeds": seeds, **({"lrs": lrs} if lrs else {}), "models": len(models),
                  "steps": steps[-1], "tokens": tokens[-1], "mlflow_experiment": tracking.EXPERIMENT}


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
            # The peak learning rate it trained at (older metrics files do not record it).
            "lr": float(group["lr"].iloc[0]) if "lr" in group and group["lr"].notna().all() else None,
            "seeds": group["seed"].astype(int).tolist(),
            "test_ppl": group["test_ppl"].tolist(),
            "test_ppl_mean": mean,
            "test_ppl_ci95": [low, high],
            "word_ppl_mean": perplexity_ci95(group["test_word_ppl"])[0],
            "below_bigram": 1 - mean / bigram,
        })
    return rows


def results_table(rows: list[dict], baselines: dict, vocab: int) -> pd.DataFrame:
    table = pd.DataFrame({
        "Model": [r["label"] for r in rows],
        "Parameters": [f"{r['params']:,}" for r in rows],
        "Learning rate": [f"{r['lr']:g}" if r.get("lr") else "" for r in rows],
        "Test perplexity": [f"{r['test_ppl_mean']:.2f}" for r in rows],
        "95% CI": [interval(*r["test_ppl_ci95"], digits=2, sign=False) for r in rows],
        "Against the bigram": [f"{-r['below_bigram']:+.1%}" for r in rows],
        "Per-word perplexity": [f"{r['word_ppl_mean']:.2f}" for r in rows],
        "Seeds": [", ".join(map(str, r["seeds"])) for r in rows],
    })
    for name, params in (("unigram", vocab - 1), ("bigram", vocab * (vocab - 1))):
        result = baselines[name]
        table.loc[len(table)] = [f"{name.capitalize()} baseline (add-{result['add_k']:g})", f"{params:,}", "",
                                 f"{result['test_ppl']:.2f}", "", "", f"{result['test_word_ppl']:.2f}", ""]
    return table


def comparisons(rows: list[dict], pairs: list[list], tokens_per_word: float) -> list[dict]:
    """The paired comparisons asked for in report.compare that the study has both sides of."""
    by_variant = {r["variant"]: r for r in rows}
    found = []
    for a, b in ((str(a), str(b)) for a, b in pairs):
        if a in by_variant and b in by_variant:
            ra, rb = by_variant[a], by_variant[b]
            found.append({"variant_a": a, "variant_b": b, **paired_difference(
                dict(zip(ra["seeds"], ra["test_ppl"])), dict(zip(rb["seeds"], rb["test_ppl"])), ra["label"], rb["label"],
                tokens_per_word)})
    return found


def log_ratio_columns(results: list[dict]) -> dict:
    """The columns every comparison table shares: one log-ratio in both units, with its CI."""
    return {
        "Log-ratio per token": [signed(r["log_ratio"]) for r in results],
        "95% CI per token": [interval(*r["log_ratio_ci95"]) for r in results],
        "Change per token": [f"{r['relative']:+.1%}" for r in results],
        "Log-ratio per word": [signed(r["log_ratio_per_word"]) for r in results],
        "95% CI per word": [interval(*r["log_ratio_per_word_ci95"]) for r in results],
        "Change per word": [f"{r['relative_per_word']:+.1%}" for r in results],
    }


def comparison_table(found: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({
        "B against A": [f"{c['b']} against {c['a']}" for c in found],
        "Seeds where B is better": [f"{c['b_better_in']}/{len(c['seeds'])}" for c in found],
        **log_ratio_columns(found),
    })


def claim_sentence(found: list[dict], claim: dict, tokens_per_word: float) -> str | None:
    """The course chapter's comparison beside ours: its corpus and unit are unknown, so only the
    sign of its log-ratio carries over."""
    ours = next((c for c in found if (c["variant_a"], c["variant_b"]) == (str(claim["a"]), str(claim["b"]))), None)
    if ours is None:
        return None
    theirs = math.log(claim["ppl_b"] / claim["ppl_a"])
    same = "the same direction" if (theirs < 0) == (ours["log_ratio"] < 0) else "the opposite direction"
    return (f"The course chapter reports {claim['ppl_a']:g} for {ours['a'].lower()} and {claim['ppl_b']:g} for "
            f"{ours['b'].lower()}: a log-ratio of {theirs:+.3f} ({math.expm1(theirs):+.1%}) in a unit it does not "
            f"state, on a corpus it does not name. Ours is {ours['log_ratio']:+.3f} per token and "
            f"{ours['log_ratio_per_word']:+.3f} per word ({tokens_per_word:.3f} tokens per word), so the size of a "
            f"change depends on the unit; only its sign carries over, and ours has {same}.")


def factorial_cells(variants: list[str]) -> dict[tuple[int, bool], str] | None:
    """The 2 x 2 of head count x output projection, {(heads, projection): variant}, when the
    study has all four cells for two head counts (the smallest and the largest that do)."""
    cells = {}
    for variant in variants:
        heads, extra = parse_variant(variant)
        if extra in (None, "mix", "nomix"):  # a variant's own file of settings decides the projection
            cells[(heads, extra == "mix" or (extra is None and heads > 1))] = variant
    complete = sorted({h for h, _ in cells if (h, True) in cells and (h, False) in cells})
    if len(complete) < 2:
        return None
    return {(h, p): cells[(h, p)] for h in (complete[0], complete[-1]) for p in (False, True)}


def factorial_contrasts(fit: dict, variants: list[str], cells: dict, claim: dict | None, labels: dict,
                        tokens_per_word: float) -> list[dict]:
    """The chapter's comparison and the main effect of heads (both pre-stated), the main effect of
    the output projection and the interaction (exploratory, Holm-adjusted together), each from
    the pooled residual variance of the additive model."""
    (few, _), (many, _) = min(cells), max(cells)
    cell = lambda heads, projection: cells[(heads, projection)]
    chapter_a, chapter_b = cell(few, False), cell(many, True)  # 1 head against 4, each as the chapter builds it
    if claim and {str(claim["a"]), str(claim["b"])} <= set(variants):
        chapter_a, chapter_b = str(claim["a"]), str(claim["b"])
    b, a = label(chapter_b, labels), label(chapter_a, labels)
    # name, label, pre-stated, weights, what a clearly negative and a clearly positive estimate mean
    definitions = [
        ("chapter", f"{b} against {a} (the chapter's comparison)", True, {chapter_b: 1, chapter_a: -1},
         (f"{b.lower()} better", f"{b.lower()} worse")),
        ("heads", f"{many} heads against {few}, at equal projection (main effect of heads)", True,
         {cell(many, False): 0.5, cell(few, False): -0.5, cell(many, True): 0.5, cell(few, True): -0.5},
         (f"{many} heads better", f"{many} heads worse")),
        ("projection", "output projection against none, at equal heads (main effect of the projection)", False,
         {cell(few, True): 0.5, cell(few, False): -0.5, cell(many, True): 0.5, cell(many, False): -0.5},
         ("the projection helps", "the projection hurts")),
        ("interaction", f"what the projection does for {many} heads minus what it does for {few} (interaction)", False,
         {cell(many, True): 1, cell(many, False): -1, cell(few, True): -1, cell(few, False): 1},
         (f"the projection does more good with {many} heads than with {few}",
          f"the projection does more good with {few} head{'s' if few > 1 else ''} than with {many}")),
    ]
    results = []
    for name, text, pre_stated, weights, meaning in definitions:
        result = contrast(fit, [weights.get(v, 0) for v in variants], tokens_per_word)
        results.append({"name": name, "label": text, "pre_stated": pre_stated, "meaning": meaning, **result})
    exploratory = [r for r in results if not r["pre_stated"]]
    for result, adjusted in zip(exploratory, holm([r["p"] for r in exploratory])):
        result["p_holm"] = adjusted
        result["significant"] = bool(adjusted < 0.05)
    return results


def contrast_sentence(result: dict) -> str:
    low, high = result["log_ratio_ci95"]
    if math.isnan(low):
        return f"{result['label'].capitalize()}: {result['relative']:+.1%} per token; with one seed there is no interval."
    evidence = (p_is(result["p"]) if result["pre_stated"] else
                f"exploratory, Holm-adjusted {p_is(result['p_holm'])} (unadjusted {p_value(result['p'])})")
    outcome = (result["meaning"][result["log_ratio"] > 0] if result["significant"] else
               "not resolved" + (" after the adjustment" if not result["pre_stated"] and result["p"] < 0.05 else ""))
    return (f"{result['label'].capitalize()}: {result['relative']:+.1%} per token, {result['relative_per_word']:+.1%} per "
            f"word (log-ratio {result['log_ratio']:+.3f}, 95% CI {interval(low, high)} per token; {evidence}): {outcome}.")


def contrast_table(results: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({
        "Contrast": [r["label"] for r in results],
        "Pre-stated": ["yes" if r["pre_stated"] else "no" for r in results],
        **log_ratio_columns(results),
        "p": [p_value(r["p"]) for r in results],
        "p, Holm-adjusted": [p_value(r["p_holm"]) if "p_holm" in r else "" for r in results],
    })


def factorial_blocks(contrasts: list[dict]) -> list:
    return [
        ("heading", "Heads or projection: the 2 x 2"),
        ("text", "The four variants cross head count with the output projection that mixes the heads, so the "
                 "additive model above separates their effects; each contrast below is a log-ratio with its 95% CI "
                 "from the pooled residual variance. Pre-stated, before these results: the chapter's comparison and "
                 "the main effect of heads. Exploratory: the main effect of the projection and the interaction, "
                 "whose p-values are Holm-adjusted together (their CIs are not adjusted)."),
        ("table", contrast_table(contrasts)),
        *[("text", contrast_sentence(c)) for c in contrasts],
    ]


def log_ppl_matrix(rows: list[dict]) -> tuple[np.ndarray, list[int]]:
    """Log test perplexity, variants x the seeds every variant has."""
    seeds = sorted(set.intersection(*(set(r["seeds"]) for r in rows)))
    return np.log([[dict(zip(r["seeds"], r["test_ppl"]))[s] for s in seeds] for r in rows]), seeds


def pooled_blocks(rows: list[dict], found: list[dict], settings: dict, tokens_per_word: float,
                  figure_dir: Path) -> tuple[list, dict]:
    """Every variant together (additive model, seed as block), the 2 x 2 when the study has it,
    and the forest plot of every comparison."""
    blocks, summary = [], {}
    variants = [r["variant"] for r in rows]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    contrasts = []
    if len(rows) > 1:
        log_ppl, seeds = log_ppl_matrix(rows)
        fit = additive_fit(log_ppl)
        summary["pooled"] = {"f": fit["f"], "p": fit["p"], "df_variant": fit["df_variant"],
                             "df_residual": fit["df_residual"], "residual_sd": fit["residual_sd"]}
        if fit["df_residual"] == 0:
            blocks.append(("text", "With one seed there is no residual variance, so the variants are not analysed "
                                   "together."))
        elif settings.get("sweep"):
            pass  # the sweep's own section analyses the head counts together, with their shape
        else:
            differ = "differ" if fit["p"] < 0.05 else "do not clearly differ"
            blocks.append(("text", f"All {len(rows)} variants together, on the seeds they share ({', '.join(map(str, seeds))}): "
                                   "log-perplexity = seed effect + variant effect + error, the residual variance pooled "
                                   f"over every variant ({fit['df_residual']} degrees of freedom, residual sd "
                                   f"{fit['residual_sd']:.4f} in log-perplexity). The variants {differ}: "
                                   f"F({fit['df_variant']}, {fit['df_residual']}) = {fit['f']:.2f}, {p_is(fit['p'])}."))
            cells = factorial_cells(variants)
            if cells:
                contrasts = factorial_contrasts(fit, variants, cells, settings.get("seed_claim"), labels, tokens_per_word)
                blocks += factorial_blocks(contrasts)
                summary["contrasts"] = {c["name"]: flat_numbers(c) for c in contrasts}
    forest_rows = [{**c, "label": f"{c['b']} against {c['a']}\n(paired, {len(c['seeds'])} seeds)"} for c in found]
    forest_rows += [{**c, "label": c["label"].replace(" (", "\n(", 1) + ", pooled",
                     "kind": "pre-stated" if c["pre_stated"] else "exploratory"} for c in contrasts]
    claim = settings.get("seed_claim")
    if claim:
        theirs = math.log(claim["ppl_b"] / claim["ppl_a"])
        for row in forest_rows:
            if (row.get("variant_a"), row.get("variant_b")) == (str(claim["a"]), str(claim["b"])) or row.get("name") == "chapter":
                row["reference"] = theirs
    # Written even with no comparison, so that the stage's outputs are the same for every study.
    figure = figures.forest(forest_rows, figure_dir / "comparisons.png", "course chapter (its unit unknown)" if claim else None)
    return blocks + ([("figure", figure)] if forest_rows else []), summary


def flat_numbers(result: dict) -> dict:
    """One number per key, which `dvc exp show` and `dvc metrics show` can put in columns (they
    show a list as one string)."""
    flat = {}
    for key, value in result.items():
        if key.endswith("ci95"):
            flat[f"{key}_low"], flat[f"{key}_high"] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[key] = value
    return flat


def exp_show_columns(found: list[dict]) -> dict:
    """The comparisons once more, keyed `B_vs_A` with one number per key (`compare.4_vs_1.log_ratio`)."""
    keep = ("relative", "relative_ci95", "log_ratio", "log_ratio_ci95", "relative_per_word", "relative_per_word_ci95",
            "log_ratio_per_word", "log_ratio_per_word_ci95", "diff_mean", "b_better_in")
    return {f"{c['variant_b']}_vs_{c['variant_a']}": flat_numbers({k: c[k] for k in keep}) for c in found}


def comparison_blocks(found: list[dict], settings: dict, tokens_per_word: float) -> list:
    if not found:
        return [("heading", "The comparisons"),
                ("text", f"No comparison: none of the pairs in report.compare ({settings.get('compare', [])}) "
                         "has both of its variants in study.variants.")]
    blocks = [("heading", "The comparisons"),
              ("text", "Each comparison of B against A is the mean over seeds of log ppl(B) - log ppl(A), paired by "
                       "seed (same seed, same data order), with a 95% Student-t interval on the seeds' spread; "
                       "negative means B is better. The same log-ratio per word is the one per token times "
                       f"{tokens_per_word:.3f} tokens per word, so a relative change differs between the units, its "
                       "sign does not."),
              ("table", comparison_table(found)),
              *[("text", verdict(c)) for c in found]]
    claim = settings.get("seed_claim")
    sentence = claim_sentence(found, claim, tokens_per_word) if claim else None
    if sentence:
        blocks.append(("text", sentence))
    return blocks


def budget_section(rows, found, curves, stats, settings, figure_dir) -> tuple[list, dict]:
    """The budget paragraph from the study's own curves, the criterion of report.budget, and the
    long runs' evidence with its figure when they were validated at this study's budget."""
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
              "ranking_changes": len(changes), "weakest_below_bigram": worst["below_bigram"]}
    text = (
        f"Each model trained on {tokens / 1e6:.2f} million tokens, {epochs:.1f} epochs of the training split. "
        + ("With one validation point, the curves cannot show how much training still improved. "
           if still is None else
           "Over the last validation interval the mean validation perplexity of every variant fell by at most "
           f"{still:.2%}. ")
        + ("With one variant there is no ranking to follow. " if len(rows) < 2 else
           "The ranking of the variants by mean validation perplexity "
           + ("is the final one at every validation point. " if not changes else
              f"differs from the final one at {len(changes)} of {len(mean_curves)} validation points, the last at "
              f"{changes[-1] / 1e6:.2f} million tokens. "))
        + f"The budget's criterion (report.budget) asks that every variant end at least {budget['beat_bigram_by']:.0%} "
          f"below the bigram in test perplexity: the weakest, {worst['label'].lower()}, is {worst['below_bigram']:.1%} "
          f"below, so this part {'is met' if beats else 'is not'}"
    )
    met = beats
    first = found[0] if found else None
    if first and len(mean_curves) > 1:
        gap = mean_curves[first["variant_b"]] / mean_curves[first["variant_a"]] - 1
        quarter_start = gap.index[gap.index >= 0.75 * tokens][0]
        drift = float(abs(gap.iloc[-1] - gap.loc[quarter_start]))
        stable = drift < budget["max_gap_drift"]
        met = beats and stable
        result["gap_last_quarter_drift"] = drift
        text += (f"; and that the relative gap in validation perplexity of {first['b'].lower()} against "
                 f"{first['a'].lower()} move by less than {budget['max_gap_drift'] * 100:g} points over the last "
                 f"quarter of training: it moved {drift * 100:.1f} points, from {gap.loc[quarter_start]:+.1%} to "
                 f"{gap.iloc[-1]:+.1%}, so this part {'is met' if stable else 'is not'}")
        text += (". The comparisons above are taken where the models have settled." if met else
                 ". So at this budget the comparisons may measure how fast the variants learn rather than where "
                 "they end.")
    else:
        met = False  # half a criterion is not a criterion met
        text += ("; its second part, the stability of the first comparison's gap, needs a comparison and two "
                 "validation points, so the criterion is not checked in full.")
    result["criterion_met"] = bool(met)
    blocks = [("heading", "Budget"), ("text", text)]
    evidence_blocks, result["evidence"] = budget_evidence(Path(budget["evidence"]), tokens, settings, figure_dir)
    return blocks + evidence_blocks, result


def budget_evidence(evidence_dir: Path, tokens: int, settings: dict, figure_dir: Path) -> tuple[list, dict]:
    """The long runs behind the budget, shown only when they were validated at exactly this
    study's budget: otherwise their gap at "this budget" would be borrowed from another one."""
    runs = sorted(evidence_dir.glob("h*-s*.csv"))
    if len(runs) != 2:
        raise ConfigError(f"report.budget.evidence={evidence_dir}: expected the curves of two long runs "
                          f"(hA-sS.csv and hB-sS.csv), found {len(runs)}")
    evidence = {"{}, seed {}".format(label(variant, settings.get("labels", {})), seed): pd.read_csv(p)
                for p in runs for variant, seed in [p.stem[1:].rsplit("-s", 1)]}
    (name_a, curve_a), (name_b, curve_b) = evidence.items()
    long_gap = (curve_b.set_index("tokens")["val_ppl"] / curve_a.set_index("tokens")["val_ppl"] - 1).rename(
        f"{name_b} against {name_a}")
    applies = tokens in long_gap.index
    # The figure is a declared output of the stage, so it is drawn either way; only a budget the
    # long runs were validated at is marked on it, and only then is it part of the report.
    figure = figures.budget_evidence(evidence, long_gap, tokens if applies else None, figure_dir / "budget_evidence.png")
    if not applies:
        return [("text", f"The budget evidence in {evidence_dir} (two long runs, validated every "
                         f"{long_gap.index[1] - long_gap.index[0]:,} tokens up to {long_gap.index.max() / 1e6:.1f} "
                         f"million) has no validation point at this study's {tokens:,} tokens, so it says nothing "
                         "about this budget and is not shown.")], {}
    at_budget = float(long_gap.loc[tokens])
    return [
        ("text", f"Evidence for the budget ({evidence_dir}): one long run per head count ({' and '.join(evidence)}), "
                 f"{long_gap.index.max() / 1e6:.1f} million tokens under one schedule, validated every "
                 f"{long_gap.index[1] - long_gap.index[0]:,} tokens. The relative gap goes from "
                 f"{long_gap.iloc[0]:+.1%} at the first validation to {at_budget:+.1%} at this study's budget and "
                 f"{long_gap.iloc[-1]:+.1%} at the end. Points before the end of a long run are taken at a higher "
                 "learning rate than a run of that length ends with, so they overstate the perplexity such a run "
                 "reaches."),
        ("figure", figure),
    ], {"gap_first": float(long_gap.iloc[0]), "gap_at_budget": at_budget,
        "gap_last": float(long_gap.iloc[-1]), "tokens": int(long_gap.index.max())}


def vaswani_shape() -> str:
    return (f"Vaswani et al. (2017, Table 3 row A, with the base model for 8 heads) report development perplexity "
            f"{', '.join(f'{p:.2f}' for p in VASWANI_TABLE3A_PPL.values())} for "
            f"{', '.join(map(str, VASWANI_TABLE3A_PPL))} heads (per wordpiece, English-German, one run each, at equal "
            "computation): lowest at 16 heads with 8 within 0.01, worst with 1 head, and worse again at 32. Their "
            "1-head model keeps its output projection, so it corresponds to our 1-mix, not to a 1-head model without "
            "one.")


def sweep_section(rows: list[dict], tokens_per_word: float, figure_dir: Path) -> tuple[list, dict]:
    """Test perplexity against head count, analysed as one design (additive model, seed as
    block): does the head count matter (F), and has the effect the shape Vaswani et al. saw, an
    optimum between few and many heads (a convex quadratic trend in log2 heads with its minimum
    inside the range)?"""
    rows = sorted(rows, key=lambda r: r["heads"])
    heads = [r["heads"] for r in rows]
    log_ppl, seeds = log_ppl_matrix(rows)
    fit = additive_fit(log_ppl)
    best = min(rows, key=lambda r: r["test_ppl_mean"])
    result = {"best_heads": best["heads"], "f": fit["f"], "p": fit["p"], "df_heads": fit["df_variant"],
              "df_residual": fit["df_residual"], "agrees_with_vaswani": None}
    blocks = [("heading", "Head-count sweep"),
              ("text", f"The lowest mean test perplexity is at {best['heads']} heads ({best['test_ppl_mean']:.2f}).")]
    if fit["df_residual"] == 0 or len(rows) < 3:
        blocks.append(("text", "With one seed, or fewer than three head counts, the sweep has no residual variance "
                               "or no shape to test, so no claim is made about the head count. " + vaswani_shape()))
        return blocks, result
    trend = polynomial_trend(fit, np.log2(heads))
    quadratic, linear = trend["quadratic"], trend["linear"]
    minimum = trend["minimum_at"]
    inside = minimum is not None and math.log2(heads[0]) < minimum < math.log2(heads[-1])
    result |= {"linear_t": linear["t"], "linear_p": linear["p"], "quadratic_t": quadratic["t"],
               "quadratic_p": quadratic["p"], "fitted_minimum_heads": 2 ** minimum if minimum is not None else None,
               "lack_of_fit_p": trend["lack_of_fit_p"]}
    matters = fit["p"] < 0.05
    text = (f"All {len(rows)} head counts together, on seeds {', '.join(map(str, seeds))}: log-perplexity = seed effect "
            f"+ head-count effect + error, the residual variance pooled over every head count ({fit['df_residual']} "
            f"degrees of freedom). The head count {'matters' if matters else 'has no clear effect'}: "
            f"F({fit['df_variant']}, {fit['df_residual']}) = {fit['f']:.2f}, {p_is(fit['p'])}. Its shape, as "
            f"trends in log2(heads) within the same model: quadratic t = {quadratic['t']:+.2f}, "
            f"{p_is(quadratic['p'])}; linear t = {linear['t']:+.2f}, {p_is(linear['p'])}")
    if not math.isnan(trend["lack_of_fit_p"]):
        text += (f"; what the quadratic leaves over gives F({trend['lack_of_fit_df']}, {fit['df_residual']}) = "
                 f"{trend['lack_of_fit_f']:.2f}, {p_is(trend['lack_of_fit_p'])}")
    text += "."
    if fit["df_residual"] > len(seeds) - 1:
        text += (f" (A comparison of two head counts alone rests on {len(seeds) - 1} degree{'s' if len(seeds) > 2 else ''} "
                 f"of freedom; this analysis on {fit['df_residual']}.)")
    if quadratic["significant"]:
        result["agrees_with_vaswani"] = inside
        shape = (f"So perplexity has an optimum between few and many heads: the quadratic fit of the means is lowest "
                 f"near {2 ** minimum:.0f} heads. That is the shape of Vaswani et al.'s row." if inside else
                 "So perplexity is curved, but without an optimum inside the head counts tried: not the shape of "
                 "Vaswani et al.'s row.")
    else:
        shape = ("These seeds resolve no curvature" + (", only a trend across the range" if linear["significant"] else "")
                 + ", so the sweep can neither confirm nor refute the shape of Vaswani et al.'s row.")
    blocks += [("text", text + " " + shape), ("text", vaswani_shape())]
    against_one = {h: contrast(fit, [1 if x == h else -1 if x == heads[0] else 0 for x in heads], tokens_per_word)
                   for h in heads[1:]}
    reference = {h: math.log(p / VASWANI_TABLE3A_PPL[1]) for h, p in VASWANI_TABLE3A_PPL.items() if h > 1}
    table = pd.DataFrame({
        "Heads": [str(h) for h in heads[1:]],
        "This sweep: log-ratio per token": [signed(against_one[h]["log_ratio"]) for h in heads[1:]],
        "95% CI (pooled)": [interval(*against_one[h]["log_ratio_ci95"]) for h in heads[1:]],
        "Log-ratio per word": [signed(against_one[h]["log_ratio_per_word"]) for h in heads[1:]],
        "Vaswani et al.: log-ratio, their unit": [signed(reference[h]) if h in reference else "" for h in heads[1:]],
    })
    blocks += [("text", "Each head count against one head (log-ratio of perplexities; the CI from the pooled "
                        "residual variance):"),
               ("table", table),
               ("figure", figures.sweep(rows, {h: (c["log_ratio"], *c["log_ratio_ci95"]) for h, c in against_one.items()},
                                        reference,
                                        "Vaswani et al. 2017, Table 3 (A): one run each, per wordpiece",
                                        figure_dir / "sweep.png"))]
    return blocks, result


def study_report(config: DictConfig, study: dict, settings: dict, models: list[dict]) -> tuple[list, dict]:
    variants = [str(v) for v in study["variants"]]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    metrics_dir, figure_dir = Path(config.paths.metrics), Path(config.paths.reports) / "figures"
    stats = load_stats(Path(config.paths.prepared))
    baselines = read_json(Path(config.paths.baselines))
    bigram = baselines["bigram"]["test_ppl"]
    test = stats["splits"]["test"]
    tokens_per_word = (test["tokens"] - 1) / (test["words"] + test["lines"])
    rows = summarise(study_metrics(metrics_dir, models), variants, labels, bigram)
    found = comparisons(rows, settings.get("compare", []), tokens_per_word)
    curves = study_curves(metrics_dir, models)
    header, summary_provenance = provenance(study, models, curves)
    blocks = [
        ("title", settings["title"]),
        ("text", header),
        ("text", f"Test split of the corpus `{stats['corpus']}`, {test['tokens'] - 1:,} tokens predicted. Perplexity "
                 "is per BPE token (lower is better): the geometric mean over seeds, with a 95% Student-t "
                 "confidence interval computed on log-perplexity across seeds and exponentiated"
                 + (" (none with one seed)." if len(rows[0]["seeds"]) < 2 else ".")),
        ("table", results_table(rows, baselines, stats["vocab_size"])),
        *comparison_blocks(found, settings, tokens_per_word),
    ]
    pooled, pooled_summary = pooled_blocks(rows, found, settings, tokens_per_word, figure_dir)
    blocks += pooled
    summary = {"provenance": summary_provenance, "tokens_per_word": tokens_per_word, "rows": rows,
               "baselines": {k: baselines[k] for k in ("unigram", "bigram")}, "comparisons": found,
               "compare": exp_show_columns(found), **pooled_summary}
    laggards = [r["label"] for r in rows if r["test_ppl_mean"] >= bigram]
    blocks.append(("text", f"Every model beats the bigram baseline ({bigram:.2f})." if not laggards else
                   f"Warning: the bigram baseline ({bigram:.2f}) beats {' and '.join(laggards).lower()}: a transformer "
                   "that cannot beat a bigram is undertrained or broken."))
    if settings.get("budget"):
        budget_blocks, summary["budget"] = budget_section(rows, found, curves, stats, settings, figure_dir)
        blocks += budget_blocks
    if settings.get("sweep"):
        sweep_blocks, summary["sweep"] = sweep_section(rows, tokens_per_word, figure_dir)
        blocks += sweep_blocks
    write_curve_table(curves, Path(config.paths.reports) / "validation_curves.csv")
    blocks += [
        ("heading", "Figures"),
        ("figure", figures.validation_curves(curves, {r["variant"]: r["label"] for r in rows},
                                             figure_dir / "validation_curves.png")),
        ("figure", figures.test_perplexity(rows, figure_dir / "test_perplexity.png")),
        ("text", f"Per-word perplexity is exp(total NLL / words), counting one end-of-line per line as the PTB "
                 f"convention does: {test['words']:,} words + {test['lines']:,} lines. It equals the per-token "
                 f"perplexity to the power tokens/words, {tokens_per_word:.3f} here, so both rank models the same way."),
    ]
    if settings.get("inspect"):
        blocks += heads_blocks(read_json(Path(config.paths.reports) / "heads.json"), labels)
    print(results_table(rows, baselines, stats["vocab_size"]).to_string(index=False))
    for comparison in found:
        print(verdict(comparison))
    return blocks, summary


def write_curve_table(curves: pd.DataFrame, path: Path) -> None:
    """Validation perplexity against training tokens, one column per variant (geometric mean over
    seeds): the table that `dvc plots show` overlays."""
    table = curves.assign(log_ppl=np.log(curves["val_ppl"])).pivot_table(
        index="tokens", columns="variant", values="log_ppl", aggfunc="mean", sort=False)
    write_atomically(path, np.exp(table).rename_axis(columns=None).to_csv(float_format="%.4f"))


def final_validation(curves: pd.DataFrame) -> pd.DataFrame:
    """Each model's validation perplexity at its last step; per variant and learning rate, the
    geometric mean over seeds."""
    last = curves.loc[curves.groupby(["variant", "lr", "seed"])["step"].idxmax()]
    return last.groupby(["variant", "lr"])["val_ppl"].apply(lambda ppl: float(np.exp(np.log(ppl).mean()))).unstack("lr")


def learning_rate_section(curves: pd.DataFrame, variants: list[str], lrs: list[float], labels: dict,
                          seeds: list[int], figure_dir: Path) -> tuple[list, dict]:
    """Each variant's learning rate: the grid value with the lowest validation perplexity at the
    last step (the test split is never looked at), whether it sits at an edge of the grid, and
    whether one learning rate suits every variant."""
    final = final_validation(curves).reindex(index=variants, columns=lrs)
    selected = {v: float(final.loc[v].idxmin()) for v in variants}
    edge = {v: selected[v] in (min(lrs), max(lrs)) for v in variants}
    runner_up = {v: float(final.loc[v].nsmallest(2).iloc[-1] / final.loc[v].min() - 1) for v in variants}
    table = pd.DataFrame({"Model": [label(v, labels) for v in variants],
                          **{f"lr {lr:g}": [f"{final.loc[v, lr]:.2f}" for v in variants] for lr in lrs},
                          "Selected lr": [f"{selected[v]:g}" for v in variants],
                          "Next best lr, worse by": [f"{runner_up[v]:+.1%}" for v in variants]})
    sentences = ["Final validation perplexity per token (at the last step" + (
        "" if len(seeds) == 1 else f", geometric mean over seeds {', '.join(map(str, seeds))}") + ") for every "
        "variant and peak learning rate. Each variant's learning rate is the grid value with the lowest; the test "
        "split is never looked at."]
    shared = set(selected.values())
    sentences.append(f"One learning rate, {selected[variants[0]]:g}, is best for every variant." if len(shared) == 1 else
                     "The best learning rate differs between variants: " + "; ".join(
                         f"{label(v, labels).lower()} {selected[v]:g}" for v in variants) + ".")
    for v in variants:
        if edge[v]:
            side = "lowest" if selected[v] == min(lrs) else "highest"
            sentences.append(f"For {label(v, labels).lower()} the best is the {side} learning rate of the grid, "
                             f"{selected[v]:g}: the optimum may lie beyond it, so extend the grid "
                             f"{'below' if side == 'lowest' else 'above'} it.")
    if len(seeds) == 1:
        sentences.append("One seed per cell: a difference smaller than the seed-to-seed spread is not resolved, and "
                         "the last column says how close the runner-up is.")
    figure = figures.learning_rates({label(v, labels): final.loc[v].to_dict() for v in variants},
                                    {label(v, labels): selected[v] for v in variants}, figure_dir / "learning_rates.png")
    chosen = pd.concat([curves[(curves["variant"] == v) & (curves["lr"] == selected[v])] for v in variants])
    blocks = [("heading", "Selected learning rates"), ("text", sentences[0]), ("table", table),
              *[("text", s) for s in sentences[1:]], ("figure", figure),
              ("figure", figures.validation_curves(chosen, {v: f"{label(v, labels)}, lr {selected[v]:g}" for v in variants},
                                                   figure_dir / "validation_curves.png"))]
    summary = {"selected_lr": selected,
               "selected_val_ppl": {v: float(final.loc[v, selected[v]]) for v in variants},
               "selected_at_grid_edge": edge,
               "one_lr_for_all": len(shared) == 1,
               "lr_grid": [{"variant": v, "lr": lr, "final_val_ppl": float(final.loc[v, lr])} for v in variants for lr in lrs]}
    return blocks, summary


def learning_rate_report(config: DictConfig, study: dict, settings: dict, models: list[dict]) -> tuple[list, dict]:
    variants = [str(v) for v in study["variants"]]
    labels = {str(k): v for k, v in settings.get("labels", {}).items()}
    curves = study_curves(Path(config.paths.metrics), models)
    header, summary_provenance = provenance(study, models, curves)
    blocks, summary = learning_rate_section(curves, variants, [float(lr) for lr in study["lrs"]], labels,
                                            list(study["seeds"]), Path(config.paths.reports) / "figures")
    return [("title", settings["title"]), ("text", header), *blocks], {"provenance": summary_provenance, **summary}


def report(config: DictConfig) -> dict:
    study, settings = OmegaConf.to_container(config.study), OmegaConf.to_container(config.report)
    models = OmegaConf.to_container(config.models)
    build = learning_rate_report if study.get("lrs") else study_report
    blocks, summary = build(config, study, settings, models)
    reports_dir = Path(config.paths.reports)
    write_json(reports_dir / "summary.json", nan_to_null(summary))
    write_json(reports_dir / "metrics.json", headline(summary))
    write_atomically(reports_dir / "results.md", to_markdown(blocks, reports_dir))
    write_atomically(reports_dir / "results.html", to_html(blocks, settings["title"]))
    return summary


def main(config: DictConfig) -> None:
    guards.refuse_pipeline_outputs(config, "reports")
    summary = report(config)
    reports = Path(config.paths.reports)
    tracking.log_study_report([reports / name for name in ("results.html", "results.md", "summary.json", "figures")],
                              summary)
