"""The report's parts that decide what it says: the 2 x 2 of heads and projection, the
learning-rate study, the budget evidence, the chapter's claim, the provenance header and the
tables' alignment. Hand-made numbers with known answers; no training."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from headstudy import report
from headstudy.analysis.figures import report as report_figures
from headstudy.analysis.rendering import headline
from headstudy.analysis.rendering.render import to_html, to_markdown
from headstudy.analysis.sections import budget, comparisons
from headstudy.analysis.statistics import additive_fit, holm, paired_difference
from headstudy.formats.names import model_name

VARIANTS = ["1", "1-mix", "4-nomix", "4"]


def test_the_2x2_is_found_from_the_variant_names_and_only_when_complete():
    assert comparisons.factorial_cells(VARIANTS) == {
        (1, False): "1",
        (1, True): "1-mix",
        (4, False): "4-nomix",
        (4, True): "4",
    }
    assert comparisons.factorial_cells(["1", "1-mix", "4"]) is None
    assert comparisons.factorial_cells(["1", "2", "4", "8"]) is None


def factorial(log_ppl: np.ndarray, pooled: bool) -> dict:
    return {
        r["name"]: r
        for r in comparisons.factorial_contrasts(
            additive_fit(log_ppl),
            log_ppl,
            VARIANTS,
            comparisons.factorial_cells(VARIANTS),
            {},
            tokens_per_word=2.0,
            pooled=pooled,
        )
    }


MEANS = np.array([0.0, 0.01, -0.02, -0.03])  # log ppl of 1, 1-mix, 4-nomix, 4 above a common level
SEED_EFFECTS = np.array([0.0, 0.05, -0.02])


def test_2x2_contrasts_estimate_the_main_effects_the_interaction_and_the_four_simple_effects():
    noise = 0.001 * np.array([[1, -1, 0], [-1, 1, 0], [1, -1, 0], [-1, 1, 0]])  # cancels per variant and seed
    results = factorial(3 + MEANS[:, None] + SEED_EFFECTS[None, :] + noise, pooled=True)
    assert results["heads"]["log_ratio"] == pytest.approx(-0.03)  # mean of -0.02 (no projection) and -0.04 (with)
    assert results["projection"]["log_ratio"] == pytest.approx(0.0, abs=1e-12)  # +0.01 for 1 head, -0.01 for 4
    assert results["interaction"]["log_ratio"] == pytest.approx(-0.02)
    assert results["split_with_projection"]["log_ratio"] == pytest.approx(-0.04)  # 4 against 1-mix
    assert results["split_without_projection"]["log_ratio"] == pytest.approx(-0.02)  # 4-nomix against 1
    assert results["projection_with_many"]["log_ratio"] == pytest.approx(-0.01)  # 4 against 4-nomix
    assert results["projection_with_few"]["log_ratio"] == pytest.approx(0.01)  # 1-mix against 1
    assert results["heads"]["log_ratio_per_word"] == pytest.approx(-0.06)
    assert [name for name, r in results.items() if r["pre_stated"]] == ["heads", "split_with_projection"]
    assert results["split_with_projection"]["pair"] == ("1-mix", "4")
    # The exploratory five are adjusted as one family, by the project's Holm (test_statistics checks it).
    names = [name for name, r in results.items() if not r["pre_stated"]]
    adjusted = holm([results[name]["p"] for name in names])
    assert [results[name]["p_holm"] for name in names] == pytest.approx(adjusted)


def test_a_simple_effect_is_always_the_paired_comparison_and_the_rest_pool_only_when_allowed():
    rng = np.random.default_rng(0)
    scatter = np.array([0.002, 0.002, 0.02, 0.002])[:, None]  # 4-nomix's seeds scatter ten times more
    log_ppl = 3 + MEANS[:, None] + SEED_EFFECTS[None, :] + scatter * rng.standard_normal((4, 3))
    ppl = {v: dict(zip([0, 1, 2], np.exp(row), strict=True)) for v, row in zip(VARIANTS, log_ppl, strict=True)}
    for pooled in (True, False):
        results = factorial(log_ppl, pooled)
        paired = paired_difference(ppl["1"], ppl["4-nomix"], "1", "4-nomix")
        simple = results["split_without_projection"]
        assert simple["method"] == "paired"
        assert simple["log_ratio"] == pytest.approx(paired["log_ratio"])
        assert simple["log_ratio_ci95"] == pytest.approx(paired["log_ratio_ci95"])
        assert results["heads"]["method"] == ("pooled" if pooled else "per-seed")
    # Per seed, the main effect of heads is the mean of the seed's two head contrasts.
    per_seed = 0.5 * (log_ppl[3] - log_ppl[1]) + 0.5 * (log_ppl[2] - log_ppl[0])
    assert factorial(log_ppl, pooled=False)["heads"]["per_seed_log_ratio"] == pytest.approx(per_seed)


def test_a_contrast_whose_per_seed_values_are_not_normal_is_stated_by_its_median_and_the_sign_test():
    # Ten seeds; in seed 4 the single head without projection collapses (its log ppl far above).
    seeds = 10
    log_ppl = 3 + MEANS[:, None] + 0.001 * np.arange(seeds)[None, :] * np.array([1, -1, 1, -1])[:, None]
    log_ppl[0, 4] += 0.8
    results = factorial(log_ppl, pooled=False)
    heads = results["heads"]
    assert heads["method"] == "per-seed, median" and not heads["normal"]
    per_seed = np.array(heads["per_seed_log_ratio"])
    assert heads["median"]["log_ratio"] == pytest.approx(np.median(per_seed))
    assert (per_seed < 0).all() and heads["p"] == pytest.approx(2 * 0.5**seeds)  # the sign test's p
    assert heads["log_ratio"] == pytest.approx(per_seed.mean())  # the mean stays, named no summary
    sentence = comparisons.contrast_sentence(heads)
    assert sentence.startswith("4 heads against 1, at equal projection (main effect of heads): median -")
    assert "so the mean, " in sentence and sentence.endswith(": 4 heads better.")
    table = comparisons.contrast_table(list(results.values()))
    assert list(table["Coverage"])[0] == "97.9%" and "Interval per token" in table.columns
    # reports/metrics/ gives the median with the sign test's interval, not the t interval, as for a pair.
    low, high = heads["median"]["relative_ci95"]
    assert headline.per_token(comparisons.contrast_numbers(heads)) == {
        "estimate": pytest.approx(100 * math.expm1(np.median(per_seed))),
        "lower": pytest.approx(100 * low),
        "upper": pytest.approx(100 * high),
    }
    # Where the per-seed values may be normal the t interval stays in charge.
    assert results["projection_with_many"]["method"] == "paired" and results["projection_with_many"]["normal"]


def test_the_forest_plot_draws_a_comparison_as_its_verdict_states_it():
    collapsed = {seed: 18.0 + 0.01 * seed for seed in range(1, 11)}
    better = {seed: 17.6 + 0.012 * seed for seed in range(1, 11)}
    collapsed[5] = 40.0  # one collapsed seed: not normal, the median and the sign test decide
    skewed = paired_difference(collapsed, better, "1", "4", tokens_per_word=2.0)
    assert not skewed["normal"]
    estimate, low, high, robust = report_figures.forest_point(skewed, "")
    assert robust and estimate == pytest.approx(skewed["median"]["relative"])
    assert (low, high) == pytest.approx(tuple(skewed["median"]["relative_ci95"]))
    regular = paired_difference({s: 18.0 + 0.01 * s for s in range(1, 11)}, better, "1", "4", 2.0)
    assert regular["normal"]
    estimate, *_, robust = report_figures.forest_point(regular, "_per_word")
    assert not robust and estimate == pytest.approx(regular["relative_per_word"])


def test_the_chapter_s_claim_is_compared_by_the_sign_of_its_log_ratio_only():
    claim = {"a": 1, "b": 4, "ppl_a": 46.1, "ppl_b": 43.2}
    better = {"variant_a": "1", "variant_b": "4", **paired_difference({0: 20.0}, {0: 19.0}, "1 head", "4 heads", 1.9)}
    worse = {"variant_a": "1", "variant_b": "4", **paired_difference({0: 20.0}, {0: 21.0}, "1 head", "4 heads", 1.9)}
    assert "ours has the same direction" in comparisons.claim_sentence([better], claim, 1.9)
    assert "ours has the opposite direction" in comparisons.claim_sentence([worse], claim, 1.9)
    assert f"{math.log(43.2 / 46.1):+.3f}" in comparisons.claim_sentence([better], claim, 1.9)


def write_curves(folder, name: str, steps: int, final: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {"step": [steps // 2, steps], "tokens": [4096 * steps // 2, 4096 * steps], "val_ppl": [final * 1.5, final]}
    ).to_csv(folder / f"{name}.csv", index=False)


def lr_study(tmp_path, finals: dict[str, list[float]], lrs: list[float]):
    models = []
    for variant, by_lr in finals.items():
        for lr, final in zip(lrs, by_lr, strict=False):
            name = model_name(variant, 0, lr)
            write_curves(tmp_path / "metrics" / "curves", name, 3000, final)
            models.append({"name": name, "variant": variant, "seed": 0, "lr": lr})
    return OmegaConf.create(
        {
            "tracking": {"experiment": "headstudy"},
            "paths": {
                "prepared": str(tmp_path / "none"),
                "metrics": str(tmp_path / "metrics"),
                "reports": str(tmp_path / "reports"),
            },
            "study": {"variants": list(finals), "lrs": lrs, "seeds": [0]},
            "report": {"title": "Learning rate per variant"},
            "models": models,
        }
    )


def test_the_learning_rate_study_selects_each_variant_s_lowest_final_validation_perplexity(tmp_path):
    lrs = [0.0015, 0.003, 0.006, 0.012]
    config = lr_study(tmp_path, {"1": [22.0, 21.0, 20.5, 20.9], "4": [23.0, 22.0, 21.0, 20.4]}, lrs)
    summary, _ = report.report(config)
    written = json.loads((tmp_path / "reports/summary.json").read_text())
    assert written["selected_lr"] == {"1": 0.006, "4": 0.012}
    assert written["selected_val_ppl"] == {"1": 20.5, "4": 20.4}
    assert written["selected_at_grid_edge"] == {"1": False, "4": True}
    assert written["one_lr_for_all"] is False
    assert summary["provenance"]["lrs"] == lrs and summary["provenance"]["steps"] == 3000
    text = (tmp_path / "reports/results.md").read_text()
    assert (
        "For 4 heads the best is the highest learning rate of the grid, 0.012" in text
        and "extend the grid above" in text
    )
    assert "The best learning rate differs between variants" in text
    assert (tmp_path / "reports/figures/learning_rates.png").is_file()


def test_each_compared_pair_is_also_shown_at_every_learning_rate_both_trained_at(tmp_path):
    lrs = [0.003, 0.006, 0.012]
    config = lr_study(tmp_path, {"1": [20.0, 22.0, 44.0], "4": [19.0, 19.8, 20.0]}, lrs)
    config.report.compare = [[1, 4]]
    summary, _ = report.report(config)
    by_lr = summary["at_shared_lr"]["4 heads against 1 head"]
    expected = {"0.003": math.log(19.0 / 20.0), "0.006": math.log(19.8 / 22.0), "0.012": math.log(20.0 / 44.0)}
    assert {lr: values for lr, values in by_lr.items()} == {lr: [pytest.approx(v)] for lr, v in expected.items()}
    text = (tmp_path / "reports/results.md").read_text()
    assert "## At a shared learning rate" in text and f"{math.expm1(math.log(20.0 / 44.0)):+.1%}" in text
    assert (tmp_path / "reports/figures/shared_learning_rates.png").is_file()


def test_one_learning_rate_best_for_all_is_said_so_and_the_report_is_the_same_when_run_again(tmp_path):
    config = lr_study(tmp_path, {"1": [21.0, 20.0, 20.5], "1-mix": [21.5, 20.2, 20.6]}, [0.003, 0.006, 0.012])
    report.report(config)
    first = {
        name: (tmp_path / "reports" / name).read_bytes() for name in ("summary.json", "results.md", "results.html")
    }
    assert b"One learning rate, 0.006, is best for every variant." in first["results.md"]
    assert b"extend the grid" not in first["results.md"]
    report.report(config)
    assert {name: (tmp_path / "reports" / name).read_bytes() for name in first} == first


def test_budget_evidence_is_shown_only_at_a_budget_where_the_long_runs_were_validated(tmp_path):
    evidence = tmp_path / "evidence"
    for name, final in (("h1-s0", 20.0), ("h4-s0", 19.6)):
        evidence.mkdir(exist_ok=True)
        pd.DataFrame(
            {"step": [150, 300, 450], "tokens": [614400, 1228800, 1843200], "val_ppl": [final * 2, final * 1.2, final]}
        ).to_csv(evidence / f"{name}.csv", index=False)
    blocks, numbers = budget.budget_evidence(evidence, 1228800, {}, tmp_path / "figures")
    assert numbers["gap_at_budget"] == pytest.approx(19.6 / 20.0 - 1)
    assert blocks[-1][0] == "figure" and (tmp_path / "figures/budget_evidence.png").is_file()
    blocks, numbers = budget.budget_evidence(evidence, 409600, {}, tmp_path / "other")
    assert numbers == {} and [kind for kind, _ in blocks] == ["text"]
    assert "has no validation point at this study's 409,600 tokens" in blocks[0][1]


def test_the_provenance_header_states_the_study_and_where_its_runs_are(tmp_path):
    curves = pd.DataFrame(
        {
            "variant": ["1", "4"],
            "seed": [0, 0],
            "lr": [None, None],
            "step": [3000, 3000],
            "tokens": [12288000, 12288000],
        }
    )
    models = [{"name": "h1-s0"}, {"name": "h4-s0"}]
    # The experiment's name comes from the report's config (tracking.experiment), not bookkeeping.
    text, numbers = report.provenance(
        {"variants": [1, 4], "seeds": [0]}, models, curves, "an-experiment", tmp_path / "metrics"
    )
    assert "variants 1, 4 x seed 0: 2 models, each trained for 3,000 steps, 12.29 million training tokens" in text
    assert text.endswith("Trained on: not on record, 2 models.")  # no trained-on.json in the study's folder
    assert 'the MLflow experiment "an-experiment"' in text
    assert numbers == {
        "variants": ["1", "4"],
        "seeds": [0],
        "models": 2,
        "steps": 3000,
        "tokens": 12288000,
        "mlflow_experiment": "an-experiment",
    }


def test_a_partner_s_model_is_read_from_the_study_that_trained_it_and_the_header_says_so(tmp_path):
    for folder, name, final in (("here", "h1-mix-s0", 20.0), ("there", "h1-s0", 21.0)):
        write_curves(tmp_path / folder / "metrics" / "curves", name, 3000, final)
        (tmp_path / folder / "metrics" / f"{name}.json").write_text(json.dumps({"test_ppl": final + 1}))
    models = [
        {"name": "h1-s0", "variant": "1", "seed": 0, "metrics": str(tmp_path / "there" / "metrics")},
        {"name": "h1-mix-s0", "variant": "1-mix", "seed": 0},
    ]
    metrics = report.study_metrics(tmp_path / "here" / "metrics", models)
    assert dict(zip(metrics["variant"], metrics["test_ppl"], strict=True)) == {"1": 22.0, "1-mix": 21.0}
    curves = report.study_curves(tmp_path / "here" / "metrics", models)
    assert curves.groupby("variant")["val_ppl"].min().to_dict() == {"1": 21.0, "1-mix": 20.0}
    study = {"variants": ["1", "1-mix"], "seeds": [0], "partners": {"folder": "../there", "variants": [1]}}
    amd = {"cpu": "AMD EPYC", "family": 25, "model": 17, "source": "training"}
    xeon = {"cpu": "Intel Xeon", "family": 6, "model": 106, "source": "training"}
    for folder, name, machine in (("here", "h1-mix-s0", amd), ("there", "h1-s0", xeon)):
        record = {"models": {name: {"weights_sha256": "x", "machines": [machine]}}}
        (tmp_path / folder / "trained-on.json").write_text(json.dumps(record))
    text, _ = report.provenance(study, models, curves, "an-experiment", tmp_path / "here" / "metrics")
    assert "Trained on: AMD EPYC (family 25, model 17), 1 model; Intel Xeon (family 6, model 106), 1 model." in text
    assert "nested run per model named as the model (h1-mix-s0, ...)" in text
    assert "The models of variant 1 were trained by the study in ../there, in its own experiment" in text


def test_numbers_are_right_aligned_and_words_left_in_both_renderings(tmp_path):
    table = pd.DataFrame(
        {
            "Model": ["1 head", "4 heads"],
            "Perplexity": ["18.68", "18.38"],
            "95% CI": ["[18.59, 18.78]", "n/a"],
            "Change": ["+0.0%", "-1.6%"],
        }
    )
    html = to_html([("table", table)], "t")
    assert "<th>Model</th>" in html and '<td class="num">18.68</td>' in html and '<td class="num">n/a</td>' in html
    markdown = to_markdown([("table", table)], tmp_path)
    assert markdown.splitlines()[1].replace(" ", "").startswith("|:-") and markdown.splitlines()[1].count("-:|") == 3


def budget_inputs(tmp_path, gap_end: float):
    """Two variants validated at 4 points; B's gap against A is -1% until the last point."""
    evidence = tmp_path / "evidence"
    for name in ("h1-s0", "h4-s0"):
        write_curves(evidence, name, 3000, 20.0)
    tokens = [1000, 2000, 3000, 4000]
    curves = pd.DataFrame(
        {
            "variant": ["1"] * 4 + ["4"] * 4,
            "seed": 0,
            "tokens": tokens * 2,
            "val_ppl": [30.0, 25.0, 22.0, 20.0] + [29.7, 24.75, 21.78, 20.0 * (1 + gap_end)],
        }
    )
    rows = [{"label": "1 head", "below_bigram": 0.5}, {"label": "4 heads", "below_bigram": 0.05}]
    found = [{"variant_a": "1", "variant_b": "4", "a": "1 head", "b": "4 heads"}]
    settings = {"budget": {"evidence": str(evidence), "beat_bigram_by": 0.10, "max_gap_drift": 0.02}}
    return rows, found, curves, {"splits": {"train": {"tokens": 1000}}}, settings


def test_a_budget_criterion_not_met_says_what_that_means_for_the_comparisons(tmp_path):
    rows, found, curves, stats, settings = budget_inputs(tmp_path, gap_end=-0.05)
    blocks, result = budget.budget_section(rows, found, curves, stats, settings, tmp_path / "figures")
    text = blocks[1][1]
    assert result["criterion_met"] is False
    assert "the weakest, 4 heads, is 5.0% below, so this part is not" in text
    assert "it moved 4.0 points, from -1.0% to -5.0%, so this part is not" in text
    assert text.endswith("may measure how fast the variants learn rather than where they end.")
    assert "NOT" not in text


def test_models_short_of_the_budget_criterion_or_of_the_bigram_give_no_answer():
    rows = [{"label": "1 head", "below_bigram": 0.5}, {"label": "4 heads", "below_bigram": 0.05}]
    criterion = {"budget": {"beat_bigram_by": 0.10}}
    line = budget.no_answer(rows, criterion)
    assert line.startswith("No answer: the models are undertrained (4 heads is 5.0% below the bigram")
    assert "at least 10% below it (report.budget)" in line
    # Without a stated criterion, a model must beat the bigram at all.
    assert budget.no_answer(rows, {}) is None
    rows[1]["below_bigram"] = -2.24  # the quick look's tiny models: 224% worse than the bigram
    assert "(4 heads is worse than the bigram by 224.0%, and every variant must be below it)" in budget.no_answer(
        rows, {}
    )
    rows[1]["below_bigram"] = 0.5
    assert budget.no_answer(rows, criterion) is None


def test_undertrained_models_leave_no_change_with_a_ci_in_the_metrics():
    comparison = {
        "variant_a": "1",
        "variant_b": "4",
        **paired_difference({0: 90.0, 1: 95.0}, {0: 80.0, 1: 82.0}, "a", "b"),
    }
    summary = {"rows": [{"variant": "4", "test_ppl_mean": 81.0}], "comparisons": [comparison]}
    assert "change_pct/4_vs_1" in headline.metric_files(summary)
    assert "change_pct/4_vs_1/per_token" in headline.report_metrics(summary)
    summary["no_answer"] = "No answer: the models are undertrained (...)"
    assert list(headline.metric_files(summary)) == ["test_ppl/4"]
    assert list(headline.report_metrics(summary)) == ["test_ppl/4"]


def test_a_budget_criterion_that_cannot_be_checked_in_full_is_not_called_met(tmp_path):
    rows, _, curves, stats, settings = budget_inputs(tmp_path, gap_end=-0.01)
    rows[1]["below_bigram"] = 0.4
    blocks, result = budget.budget_section(rows, [], curves, stats, settings, tmp_path / "figures")
    assert result["criterion_met"] is False
    assert blocks[1][1].endswith("so the criterion is not checked in full.")
    blocks, result = budget.budget_section(
        rows,
        [{"variant_a": "1", "variant_b": "4", "a": "1 head", "b": "4 heads"}],
        curves,
        stats,
        settings,
        tmp_path / "figures",
    )
    assert result["criterion_met"] is True and blocks[1][1].endswith("or that the models have converged.")
    assert "which does not say it has stopped moving (it widened at " in blocks[1][1]


def test_training_length_pairs_each_budget_by_seed_and_states_the_change_of_the_gap(tmp_path):
    """4 heads against 1: log-ratios -0.04, -0.03, -0.05 at the shorter budget (the other study)
    and -0.05, -0.04, -0.06 at the longer (this one): the gap grows by exactly 0.01 in every
    seed, so its change is -0.010 with a zero-width interval, which excludes 0."""
    from headstudy.analysis.sections.training_length import other_budget_inputs, training_length_section

    seeds, short_gaps, long_gaps = [1, 2, 3], [-0.04, -0.03, -0.05], [-0.05, -0.04, -0.06]
    models = [{"name": f"h{v}-s{s}", "variant": v, "seed": s} for v in ("1", "4") for s in seeds]
    other = tmp_path / "shorter"
    for seed, gap in zip(seeds, short_gaps, strict=True):
        for variant, ppl in (("1", 20.0), ("4", 20.0 * math.exp(gap))):
            write_curves(other / "metrics" / "curves", f"h{variant}-s{seed}", 3000, ppl)
            (other / "metrics" / f"h{variant}-s{seed}.json").write_text(json.dumps({"test_ppl": ppl}))
    here = {
        f"h{variant}-s{seed}": {"test_ppl": ppl}
        for seed, gap in zip(seeds, long_gaps, strict=True)
        for variant, ppl in (("1", 19.0), ("4", 19.0 * math.exp(gap)))
    }
    curves = pd.concat(
        pd.DataFrame(
            {
                "variant": m["variant"],
                "seed": m["seed"],
                "tokens": [4096 * 3000, 4096 * 6000],
                "val_ppl": [30.0, here[m["name"]]["test_ppl"]],
            }
        )
        for m in models
    )
    rows = [
        {"variant": v, "label": label, "seeds": seeds, "test_ppl": [here[f"h{v}-s{s}"]["test_ppl"] for s in seeds]}
        for v, label in (("1", "1 head"), ("4", "4 heads"))
    ]
    found = [{"variant_a": "1", "variant_b": "4", "a": "1 head", "b": "4 heads"}]
    blocks, summary = training_length_section(
        found, rows, curves, other_budget_inputs(other, models), other, 1.25, tmp_path / "figures"
    )
    gap = summary["4_vs_1"]
    assert gap["shorter"]["per_seed_log_ratio"] == pytest.approx(short_gaps)
    assert gap["longer"]["per_seed_log_ratio"] == pytest.approx(long_gaps)
    assert gap["change_per_seed"] == pytest.approx([-0.01] * 3)
    assert gap["change"] == pytest.approx(-0.01) and gap["change_ci95"] == pytest.approx([-0.01, -0.01])
    assert summary["tokens"] == {"shorter": 4096 * 3000, "longer": 4096 * 6000}
    assert summary["longer_vs_shorter/1"]["relative"] == pytest.approx(19.0 / 20.0 - 1)
    text = " ".join(block[1] for block in blocks if block[0] == "text")
    assert "at 12.3 million training tokens -0.040 per token" in text and "at 24.6 million -0.050 per token" in text
    assert "-0.050 per word" in text  # -0.04 x 1.25 tokens per word
    assert "changed by -0.010 per token" in text and "an interval that excludes 0." in text
    assert (tmp_path / "figures" / "training_length.png").is_file()


def test_training_length_refuses_another_study_without_every_model_of_this_one(tmp_path):
    from headstudy.analysis.sections.training_length import other_budget_inputs
    from headstudy.common.errors import ConfigError

    write_curves(tmp_path / "metrics" / "curves", "h1-s1", 3000, 20.0)
    (tmp_path / "metrics" / "h1-s1.json").write_text(json.dumps({"test_ppl": 20.0}))
    models = [{"name": "h1-s1", "variant": "1", "seed": 1}, {"name": "h1-s2", "variant": "1", "seed": 2}]
    with pytest.raises(ConfigError, match=r"report.length_against=.*h1-s2.json not found"):
        other_budget_inputs(tmp_path, models)


def test_the_metrics_folder_holds_a_file_per_headline_number_with_its_ci_and_nothing_stale(tmp_path):
    summary = {
        "rows": [
            {"variant": "1", "test_ppl_mean": 20.0, "test_ppl_ci95": [19.5, 20.5]},
            {"variant": "4", "test_ppl_mean": 19.0, "test_ppl_ci95": [float("nan"), float("nan")]},  # one seed
        ],
        "comparisons": [
            {"variant_a": "1", "variant_b": "4", **paired_difference({0: 20.0, 1: 21.0}, {0: 19.0, 1: 19.5}, "a", "b")}
        ],
    }
    files = headline.metric_files(summary)
    assert files["test_ppl/1"] == {"estimate": 20.0, "lower": 19.5, "upper": 20.5}
    assert files["test_ppl/4"] == {"estimate": 19.0}
    change = files["change_pct/4_vs_1"]
    assert change["estimate"] == pytest.approx(100 * summary["comparisons"][0]["relative"])
    assert change["lower"] < change["estimate"] < change["upper"]

    folder = tmp_path / "metrics"
    (folder / "change_pct").mkdir(parents=True)
    (folder / "change_pct" / "8_vs_1.json").write_text("{}")  # a comparison the study no longer makes
    headline.write_metric_files(folder, files)
    written = {path.relative_to(folder).as_posix() for path in folder.rglob("*.json")}
    assert written == {"test_ppl/1.json", "test_ppl/4.json", "change_pct/4_vs_1.json"}
    assert json.loads((folder / "test_ppl" / "1.json").read_text()) == files["test_ppl/1"]


def test_a_median_headline_keeps_its_distribution_free_interval_in_the_metrics_and_mlflow():
    """Where the seeds' differences are not normal the answer is the median with the sign test's
    interval (93.8% with 5 seeds): both go to reports/metrics/ and MLflow, the interval not named
    a 95% CI."""
    median = {"relative": -0.037, "relative_ci95": [-0.078, -0.034], "coverage": 0.9375}
    median |= {"relative_per_word": -0.069, "relative_per_word_ci95": [-0.14, -0.06]}
    comparison = {"variant_a": "1", "variant_b": "4", "normal": False, "median": median}
    comparison |= {"relative": -0.046, "relative_ci95": [-0.069, -0.023]}  # the mean: no summary here
    summary = {"rows": [], "comparisons": [comparison]}

    assert headline.metric_files(summary)["change_pct/4_vs_1"] == pytest.approx(
        {"estimate": -3.7, "lower": -7.8, "upper": -3.4}
    )
    logged = headline.report_metrics(summary)
    assert list(logged) == [
        "change_pct/4_vs_1/per_token",
        "change_pct/4_vs_1/per_token_interval_lower",
        "change_pct/4_vs_1/per_token_interval_upper",
        "change_pct/4_vs_1/per_word",
        "change_pct/4_vs_1/per_word_interval_lower",
        "change_pct/4_vs_1/per_word_interval_upper",
    ]
    assert logged["change_pct/4_vs_1/per_token_interval_lower"] == pytest.approx(-7.8)


def test_both_renderings_box_the_headline_list_the_sections_and_number_every_caption(tmp_path):
    figure = tmp_path / "curves.png"
    figure.write_bytes(b"\x89PNG not drawn")
    blocks = [
        ("title", "T"),
        ("headline", ["4 heads against 1 head: -3.6% per token, 95% CI [-3.9%, -3.2%]."]),
        ("text", "Intro."),
        ("heading", "Heads or projection: the 2 x 2"),
        ("figure", (figure, "Curves.")),
        ("heading", "Figures"),
        ("heading", "Figures"),
        ("figure", (figure, "Again.")),
    ]
    markdown = to_markdown(blocks, tmp_path)
    boxed = "> **4 heads against 1 head: -3.6% per token, 95% CI [-3.9%, -3.2%].**"
    assert markdown.startswith(f"# T\n\n{boxed}\n\nContents: ")
    # GitHub's own anchors for these headings, a repeat numbered.
    assert "[Heads or projection: the 2 x 2](#heads-or-projection-the-2-x-2) · [Figures](#figures) · " in markdown
    assert "[Figures](#figures-1)" in markdown
    assert "![curves](curves.png)\n\n*Figure 1. Curves.*" in markdown and "*Figure 2. Again.*" in markdown
    page = to_html(blocks, "T")
    assert page.index('<aside class="headline"') < page.index("<nav") < page.index("<p>Intro.</p>")
    assert '<h2 id="figures-1">Figures<a class="anchor" href="#figures-1"' in page
    assert '<a href="#heads-or-projection-the-2-x-2">' in page
    assert "<figcaption>Figure 1. Curves.</figcaption>" in page and "<figcaption>Figure 2. Again.</figcaption>" in page


def test_a_seed_flips_when_one_rounding_collapses_or_the_two_differ_by_more_than_the_tolerance():
    from headstudy.analysis.sections.roundings import outcome_flips, roundings_section

    ppl = {
        "1": {1: 18.0, 2: 40.4, 3: 18.1, 4: 18.2},
        "1-avx2": {1: 18.01, 2: 19.7, 3: 18.5, 4: 41.0},
    }
    flips = outcome_flips("1", "1-avx2", ppl, collapse_above=30, within=0.01)
    assert flips.flipped == [False, True, True, True]  # same; collapse undone; 2.2% apart; a new collapse
    low, high = flips.interval
    assert flips.count == 3 and 0.194 < low < 0.195 and 0.993 < high < 0.994  # Clopper-Pearson for 3 of 4
    both_collapsed = outcome_flips("1", "1-avx2", {"1": {1: 40.0}, "1-avx2": {1: 45.0}}, 30, 0.01)
    assert both_collapsed.flipped == [False]
    settings = {"pairs": [["1", "1-avx2"]], "collapse_above": 30, "within": 0.01}
    blocks, summary = roundings_section(settings, ppl, lambda variant: f"variant {variant}")
    text = blocks[1][1]
    assert "variant 1: the outcome flips in 3 of 4 seeds (exact 95% interval for the rate: 19% to 99%)" in text
    assert "it collapses in 1 of 4 (1% to 81%) seeds with the default kernels and in 1 of 4" in text
    assert summary == [
        {
            "plain": "1",
            "rounded": "1-avx2",
            "seeds": [1, 2, 3, 4],
            "flipped": 3,
            "rate_interval": [low, high],
            "collapsed": [1, 1],
        }
    ]
