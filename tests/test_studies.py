"""The committed studies say what their files say: the learning-rate study bracketed each
variant's best learning rate, and the default study's params.yaml trains each variant at the one
it selected."""

from __future__ import annotations

import json
import subprocess

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
        assert len(tried) >= 4 and all(b / a <= 2.01 for a, b in zip(tried, tried[1:])), (variant, tried)
        assert tried[0] < summary["selected_lr"][variant] < tried[-1], (variant, tried)


def test_default_study_trains_each_variant_at_the_learning_rate_the_lr_study_selected():
    study = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    overrides = {str(variant): settings for variant, settings in study["variant_overrides"].items()}
    assert [str(v) for v in study["variants"]] == list(lr_summary()["selected_lr"])
    for variant, lr in lr_summary()["selected_lr"].items():
        assert overrides[variant] == [f"optimizer.lr={lr:g}"], variant
    composed = subprocess.run(["headstudy", "config", "variant=1-mix"], cwd=ROOT, capture_output=True, text=True,
                              check=True)
    assert yaml.safe_load(composed.stdout)["optimizer"]["lr"] == lr_summary()["selected_lr"]["1-mix"]
