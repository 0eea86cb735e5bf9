"""The committed studies say what their files say: the learning-rate study bracketed each
variant's best learning rate, and the default study's params.yaml trains each variant at the one
it selected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from conftest import ROOT

LR_STUDY = ROOT / "studies" / "lr-tuning"


def lr_summary() -> dict:
    return json.loads((LR_STUDY / "reports" / "summary.json").read_text())


def test_lr_study_tried_four_or_more_rates_per_variant_and_selected_none_at_an_edge():
    summary = lr_summary()
    variants = yaml.safe_load((LR_STUDY / "params.yaml").read_text())["study"]["variants"]
    assert sorted(summary["selected_lr"]) == sorted(str(v) for v in variants)
    for variant in summary["selected_lr"]:
        tried = sorted(point["lr"] for point in summary["lr_grid"] if point["variant"] == variant)
        assert len(tried) >= 4 and all(b / a <= 2.01 for a, b in zip(tried, tried[1:], strict=False)), (variant, tried)
        assert tried[0] < summary["selected_lr"][variant] < tried[-1], (variant, tried)


def selected_rates() -> dict:
    return yaml.safe_load((ROOT / "conf" / "selected_rates.yaml").read_text())


def test_each_selected_rate_is_the_one_its_tuning_study_s_report_selected_and_written_once():
    for tuning, rates in selected_rates().items():
        selected = json.loads((ROOT / "studies" / tuning / "reports" / "summary.json").read_text())["selected_lr"]
        assert rates == selected, tuning
    for params in [ROOT / "params.yaml", *sorted((ROOT / "studies").rglob("params.yaml"))]:
        study = yaml.safe_load(params.read_text())["study"]
        written = [item for items in (study.get("variant_overrides") or {}).values() for item in items]
        assert not [item for item in written if item.startswith("optimizer.lr=")], params


def test_default_study_trains_each_variant_at_the_learning_rate_the_lr_study_selected():
    study = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    assert study["rates"] == "lr-tuning"
    assert [str(v) for v in study["variants"]] == list(lr_summary()["selected_lr"])
    composed = subprocess.run(
        ["headstudy", "config", "variant=1-mix"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert yaml.safe_load(composed.stdout)["optimizer"]["lr"] == lr_summary()["selected_lr"]["1-mix"]


@pytest.mark.parametrize("study", ["stabilised", "stabilised-2x2"])
def test_the_stabilised_studies_train_each_variant_at_the_rate_its_tuning_selected_and_with_its_warm_up(study):
    tuning = ROOT / "studies" / "stabilised-tuning"
    params = yaml.safe_load((ROOT / "studies" / study / "params.yaml").read_text())
    assert params["study"]["rates"] == "stabilised-tuning"
    # Every variant it trains was tuned there (the tuning may hold cells whose seeds have not run yet).
    assert {str(v) for v in params["study"]["variants"]} <= set(selected_rates()["stabilised-tuning"])
    assert params["optimizer"] == yaml.safe_load((tuning / "params.yaml").read_text())["optimizer"]
    assert 0 not in params["study"]["seeds"]  # seed 0 chose the rates


def default_study() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())["study"]


def test_committed_default_study_is_the_2x2_and_each_row_trained_at_its_selected_rate():
    summary = json.loads((ROOT / "reports" / "summary.json").read_text())
    rows = {row["variant"]: row for row in summary["rows"]}
    study = default_study()
    assert list(rows) == [str(v) for v in study["variants"]]
    # The 2 x 2 pairs the parameter counts; the capacity control matches 4 heads within 0.1%.
    assert [rows[v]["params"] for v in ["1", "1-mix", "4-nomix", "4"]] == [328_704, 345_216, 328_704, 345_216]
    assert abs(rows["1-wide"]["params"] - rows["4"]["params"]) <= rows["4"]["params"] / 1000
    for variant, lr in lr_summary()["selected_lr"].items():
        assert rows[variant]["lr"] == lr, variant
    # Seed 0 chose the learning rates in studies/lr-tuning: it is no seed of the headline.
    assert all(row["seeds"] == study["seeds"] and 0 not in row["seeds"] for row in summary["rows"])


def numbers_only(tree) -> bool:
    if isinstance(tree, dict):
        return all(numbers_only(child) for child in tree.values())
    return isinstance(tree, (int, float)) and not isinstance(tree, bool)


def test_every_metrics_file_of_the_default_study_holds_numbers_only():
    # The files dvc.yaml declares as metrics, which `dvc metrics show` and `dvc exp show` list:
    # reports/metrics/, a file per variant's perplexity, comparison and 2 x 2 contrast.
    folder = ROOT / "reports" / "metrics"
    files = sorted(folder.rglob("*.json"))
    perplexities = {path.relative_to(folder).as_posix() for path in files if "test_ppl" in path.parts}
    assert perplexities == {f"test_ppl/{variant}.json" for variant in default_study()["variants"]}
    for path in files:
        numbers = json.loads(path.read_text())
        assert numbers_only(numbers) and set(numbers) <= {"estimate", "lower", "upper"}, path


@pytest.mark.slow
def test_dvc_metrics_show_leads_with_the_default_study_and_gives_each_study_a_screen_of_120_columns():
    """The answer at a glance: a row per number, its estimate and interval, nothing wider than a
    terminal, the default study's rows first, and each study's rows within one screen of 30 lines
    (the studies together grow with every study, so it is each study that must stay short)."""
    shown = subprocess.run(
        [sys.executable, "-m", "dvc", "metrics", "show"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "120"},
    ).stdout.splitlines()
    assert max(map(len, shown)) <= 120, "\n".join(shown)
    assert shown[0].split() == ["Path", "estimate", "lower", "upper"]
    rows = {line.split()[0]: line.split()[1:] for line in shown[1:]}
    assert next(iter(rows)).startswith("reports/metrics/"), "\n".join(shown)
    per_study = Counter(path.split("/reports/")[0] for path in rows)
    assert max(per_study.values()) <= 30, per_study
    summary = json.loads((ROOT / "reports" / "summary.json").read_text())
    for comparison in summary["comparisons"]:
        pair = f"{comparison['variant_b']}_vs_{comparison['variant_a']}"
        shown_numbers = rows[f"reports/metrics/change_pct/{pair}.json"]
        if comparison["normal"]:  # the mean and its t interval
            estimate, low, high = map(float, shown_numbers)
            assert low < estimate < high and estimate == pytest.approx(100 * comparison["relative"], abs=1e-3)
        else:  # as the verdict: the median with the sign test's interval (no 95% one without normality)
            median = comparison["median"]
            shown_median = [100 * median["relative"], *(100 * end for end in median["relative_ci95"])]
            assert list(map(float, shown_numbers)) == pytest.approx(shown_median, abs=1e-3), shown_numbers


def test_the_readme_states_each_protocol_s_answer_as_the_committed_reports_give_it():
    """The README's table of 4 against 1 heads under each learning-rate protocol, and of the
    default study's comparisons, are the ones tools/protocol_table.py prints from the committed
    summaries, not numbers copied by hand."""
    printed = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "protocol_table.py")], capture_output=True, text=True, check=True
    ).stdout.strip()
    readme = (ROOT / "README.md").read_text()
    for table in printed.split("\n\n"):
        assert table in readme


@pytest.mark.slow
def test_every_committed_lock_matches_the_committed_code_and_settings():
    """A stage whose code, config or params differ from what its dvc.lock recorded has stale
    committed results, and a committed output that differs from its lock entry is not what that
    run wrote. Only the files that git holds count: a fresh clone has no models."""
    tracked = set(
        subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    )
    stale = {}
    # One call for every pipeline of the repository (DVC collects them all), nested ones included.
    shown = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for stage, changes in json.loads(shown or "{}").items():
        for change in changes:
            for kind in ("changed deps", "changed outs"):
                paths = change.get(kind, {}) if isinstance(change, dict) else {}
                stale.update({f"{stage}: {path}": state for path, state in paths.items() if path in tracked})
    assert not stale, "rerun these stages with `dvc repro -s` and commit their locks: " + json.dumps(stale, indent=1)


@pytest.mark.slow
def test_dvc_plots_show_draws_one_validation_curve_plot_per_study_not_one_per_model():
    command = [sys.executable, "-m", "dvc", "plots", "show", "--json"]
    shown = json.loads(subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert not shown.get("errors"), shown["errors"]
    for pipeline in [ROOT / "dvc.yaml", *sorted((ROOT / "studies").rglob("dvc.yaml"))]:
        stages = yaml.safe_load(pipeline.read_text())["stages"].values()
        if not any(stage["cmd"].startswith("headstudy report") for stage in stages):
            continue  # no perplexity report: the spotlight study's plots are its accuracy figures
        folder = pipeline.parent.relative_to(ROOT).as_posix()
        prefix = "" if folder == "." else f"{folder}/"
        reports = [name for name in shown["data"] if name.startswith(f"{prefix}reports/")]
        curves = [name for name in reports if "validation_curves" in name]
        assert len(curves) == 1, (folder, curves)
        assert not [name for name in shown["data"] if name.startswith(prefix) and "metrics/curves" in name]
        if curves[0].endswith(".csv"):  # a line per variant of the report (partners' included), named as there
            summary = json.loads((pipeline.parent / "reports/summary.json").read_text())
            models = [row["label"] for row in summary["rows"]]
            [drawn] = shown["data"][curves[0]]
            assert all(f'"model": "{model}"' in json.dumps(drawn["content"]) for model in models), folder
