"""The committed studies say what their files say: the default study is the 2 x 2 at the learning
rates the learning-rate study selected, with the course's exact parameter counts, and its DVC
metrics are numbers a table can show."""

from __future__ import annotations

import json
import subprocess

import yaml

from conftest import ROOT

PARAMETERS = {"1": 328_704, "1-mix": 345_216, "4-nomix": 328_704, "4": 345_216}


def summary(folder) -> dict:
    return json.loads((folder / "reports" / "summary.json").read_text())


def test_default_study_trains_each_variant_at_the_learning_rate_the_lr_study_selected():
    selected = summary(ROOT / "studies" / "lr-tuning")["selected_lr"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    assert [str(v) for v in params["variants"]] == list(selected)
    overrides = {str(variant): settings for variant, settings in params["variant_overrides"].items()}
    for variant, lr in selected.items():
        assert f"optimizer.lr={lr:g}" in overrides[variant] or f"optimizer.lr={lr}" in overrides[variant], variant
    rows = {row["variant"]: row for row in summary(ROOT)["rows"]}
    assert {variant: row["lr"] for variant, row in rows.items()} == selected


def test_default_study_is_the_2x2_with_the_course_parameter_counts():
    rows = {row["variant"]: row for row in summary(ROOT)["rows"]}
    assert {variant: row["params"] for variant, row in rows.items()} == PARAMETERS
    assert all(len(row["seeds"]) >= 3 for row in rows.values())


def test_dvc_metrics_of_the_default_study_are_all_numbers():
    # The default study's own metrics files (studies/ have theirs).
    files = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "metrics").glob("*.json"))
    result = subprocess.run(["dvc", "metrics", "show", "--json", *files, "reports/metrics.json"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    shown = json.loads(result.stdout)

    def leaves(node, path=""):
        if isinstance(node, dict):
            for key, child in node.items():
                yield from leaves(child, f"{path}/{key}")
        else:
            yield path, node

    found = list(leaves(shown))
    assert any(path.endswith("test_ppl") for path, _ in found)
    text = [(path, value) for path, value in found if not isinstance(value, (int, float)) or isinstance(value, bool)]
    assert not text, text[:5]
