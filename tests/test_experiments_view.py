"""`headstudy experiments`: the study's experiments from `dvc exp show --json`, narrow enough
for a terminal."""

from __future__ import annotations

import pytest

from headstudy import experiments
from headstudy.experiments import render, table


def revision(name: str, max_steps: int, ppl_1: float, ppl_4: float, change: float) -> dict:
    return {
        "rev": "workspace" if name == "workspace" else name * 40,
        "name": None if name == "workspace" else name,
        "data": {
            "params": {
                "params.yaml": {
                    "data": {
                        "study": {"variants": [1, 4], "seeds": [0, 1, 2]},
                        "trainer": {"max_steps": max_steps},
                        "report": {"compare": [[1, 4]]},
                    }
                },
                "studies/other/params.yaml": {"data": {"study": {"variants": [1, 2, 4, 8]}}},
            },
            # As `dvc exp show --json` lists a metrics folder: a path per file of reports/metrics/.
            "metrics": {
                "reports/metrics/test_ppl/1.json": {"data": {"estimate": ppl_1, "lower": ppl_1 - 0.1}},
                "reports/metrics/test_ppl/4.json": {"data": {"estimate": ppl_4}},
                "reports/metrics/change_pct/4_vs_1.json": {
                    "data": {"estimate": change, "lower": change - 1, "upper": change + 0.5}
                },
                "studies/other/reports/metrics/test_ppl/8.json": {"data": {"estimate": 17.0}},
            },
        },
    }


SHOWN = [
    {
        **revision("workspace", 3000, 18.7, 18.4, -1.6),
        "experiments": [{"name": "longer", "revs": [revision("e", 6000, 17.9, 17.5, -2.2)]}],
    }
]


def test_only_the_folders_study_its_changed_settings_and_per_token_changes_are_columns():
    frame = table(SHOWN)
    assert list(frame.columns) == [
        "experiment",
        "max_steps",
        "ppl 1",
        "ppl 4",
        "4 vs 1 %",
        "4 vs 1 % low",
        "4 vs 1 % high",
    ]
    assert frame["experiment"].tolist() == ["workspace", "longer"]
    assert frame["max_steps"].tolist() == ["3000", "6000"]
    assert frame["4 vs 1 %"].tolist() == [-1.6, -2.2]
    assert frame["4 vs 1 % low"].tolist() == [-2.6, -3.2]


def test_each_comparison_shows_its_confidence_interval_beside_its_change():
    lines = render(table(SHOWN), width=120).splitlines()
    assert lines[0].split() == ["experiment", "max_steps", "ppl", "1", "ppl", "4", "4", "vs", "1", "%"]
    assert lines[1].split() == ["workspace", "3000", "18.70", "18.40", "-1.6", "[-2.6,", "-1.1]"]
    assert lines[2].split() == ["longer", "6000", "17.90", "17.50", "-2.2", "[-3.2,", "-1.7]"]
    assert "95% CI" in render(table(SHOWN), width=120)


def test_columns_that_do_not_fit_the_terminal_go_to_a_second_table_led_by_the_names():
    shown = [
        {
            **revision("workspace", 3000, 18.7, 18.4, -1.6),
            "experiments": [
                {"name": f"a-long-experiment-name-{i}", "revs": [revision(str(i), 3000 + i, 18.0, 17.5, -2.2)]}
                for i in range(3)
            ],
        }
    ]
    for width in (50, 60, 80):
        text = render(table(shown), width=width)
        assert max(map(len, text.splitlines())) <= width, (width, text)
        tables = [part.splitlines() for part in text.split("\n\n")[:-1]]  # the last part says what columns mean
        assert all(lines[0].startswith("experiment") and len(lines) == 5 for lines in tables)
        assert "-2.2 [-3.2, -1.7]" in text and "17.50" in text
    assert len(render(table(shown), width=50).split("\n\n")) > len(render(table(shown), width=120).split("\n\n"))


def test_variants_and_comparisons_come_in_the_order_params_yaml_gives_them():
    # DVC lists a folder's files by name: 1-mix before 1, 4_vs_1-mix before 4_vs_1.
    entry = revision("workspace", 3000, 18.7, 18.4, -1.6)
    entry["data"]["params"]["params.yaml"]["data"]["study"]["variants"] = [1, "1-mix", 4]
    entry["data"]["params"]["params.yaml"]["data"]["report"]["compare"] = [[1, 4], ["1-mix", 4]]
    entry["data"]["metrics"] = {
        f"reports/metrics/{name}.json": {"data": {"estimate": 1.0}}
        for name in ["change_pct/4_vs_1-mix", "change_pct/4_vs_1", "test_ppl/1-mix", "test_ppl/1", "test_ppl/4"]
    }
    columns = [column for column in table([entry]).columns if column.startswith("ppl ") or column.endswith(" %")]
    assert columns == ["ppl 1", "ppl 1-mix", "ppl 4", "4 vs 1 %", "4 vs 1-mix %"]


def test_no_commit_and_no_experiment_is_one_line_not_a_traceback(monkeypatch):
    from headstudy.common.errors import ConfigError

    monkeypatch.setattr(experiments, "shown_experiments", lambda options: [])
    with pytest.raises(ConfigError, match="nothing to show: `dvc exp show` lists no commit and no experiment"):
        experiments.main([])


def test_rows_without_perplexities_come_with_a_warning(monkeypatch, capsys):
    unreadable = {"rev": "a" * 40, "name": None, "data": {}}  # DVC could read neither params nor metrics
    monkeypatch.setattr(experiments, "shown_experiments", lambda options: [unreadable])
    experiments.main([])
    printed = capsys.readouterr()
    assert "aaaaaaa" in printed.out
    assert printed.err.startswith("headstudy experiments: warning: no row has test perplexities")
    monkeypatch.setattr(experiments, "shown_experiments", lambda options: SHOWN)
    experiments.main([])
    assert capsys.readouterr().err == ""
