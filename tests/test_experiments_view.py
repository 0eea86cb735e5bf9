"""`headstudy experiments`: the study's experiments from `dvc exp show --json`, narrow enough
for a terminal."""

from __future__ import annotations

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
            "metrics": {
                "reports/metrics.json": {
                    "data": {
                        "test_ppl/1": ppl_1,
                        "test_ppl/4": ppl_4,
                        "change_pct/4_vs_1/per_token": change,
                        "change_pct/4_vs_1/per_token_ci95_low": change - 1,
                        "change_pct/4_vs_1/per_word": 2 * change,
                    }
                },
                "studies/other/reports/metrics.json": {"data": {"test_ppl/8": 17.0}},
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
    assert list(frame.columns) == ["experiment", "max_steps", "ppl 1", "ppl 4", "4 vs 1 %"]
    assert frame["experiment"].tolist() == ["workspace", "longer"]
    assert frame["max_steps"].tolist() == ["3000", "6000"]
    assert frame["4 vs 1 %"].tolist() == [-1.6, -2.2]


def test_the_rendered_table_formats_numbers_alike_and_fits_a_terminal():
    lines = render(table(SHOWN)).splitlines()
    assert max(map(len, lines)) <= 120
    assert lines[1].split() == ["workspace", "3000", "18.70", "18.40", "-1.6"]
    assert lines[2].split() == ["longer", "6000", "17.90", "17.50", "-2.2"]
