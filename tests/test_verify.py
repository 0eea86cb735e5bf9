"""`headstudy verify` retrains committed models of a study in a scratch clone and says, per stated
conclusion, whether it holds with the retrained models in place: through the real command on a
reproduced tiny study (1 head and 1 head + output projection, seed 0)."""

from __future__ import annotations

import json
import subprocess

import pytest
from tinyproject import commit, copy_project, environment, run

from headstudy.analysis.conclusions import conclusions, verdicts

pytestmark = pytest.mark.slow


@pytest.fixture
def project(reproduced_study, tmp_path):
    shared, _ = reproduced_study
    return copy_project(shared, tmp_path / "project")


def verify(project, *args) -> subprocess.CompletedProcess:
    return run(project, "headstudy", "verify", *args, check=False, env=environment())


def test_a_model_retrained_on_the_machine_that_trained_it_is_bit_for_bit_and_every_conclusion_holds(project):
    before = run(project, "git", "status", "--porcelain").stdout
    result = verify(project, "h1-s0")
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("| h1-s0 |")]
    assert "| yes |" in row and "+0.00e+00" in row and "| identical |" in row
    assert "| 1-mix against 1: median per-token log-ratio below 0 |" in result.stdout
    assert "changes" not in result.stdout
    assert run(project, "git", "status", "--porcelain").stdout == before  # nothing committed was touched


def test_a_conclusion_that_the_retrained_model_does_not_support_is_said_to_change(project):
    """The committed 1-head model's perplexity moved to the other side of 1 head + output projection's:
    the retrained model puts it back, so the comparison's direction changes."""
    metrics = project / "metrics" / "h1-s0.json"
    values = json.loads(metrics.read_text())
    partner = json.loads((project / "metrics" / "h1-mix-s0.json").read_text())["test_ppl"]
    values["test_ppl"] = partner / 2 if values["test_ppl"] > partner else partner * 2
    metrics.write_text(json.dumps(values))
    commit(project, "a committed result that the code does not reproduce")
    result = verify(project, "h1-s0")
    assert result.returncode == 1, result.stdout + result.stderr
    [direction] = [line for line in result.stdout.splitlines() if "median per-token log-ratio below 0" in line]
    assert direction.endswith("| changes |")
    assert "verify: 1 of 3 conclusions hold" in result.stdout  # seeds better changes too; no interval at one seed


def test_conclusions_hold_only_where_every_fact_is_the_same():
    committed = {"1": {1: 20.0, 2: 20.0, 3: 40.0}, "4": {1: 19.0, 2: 19.5, 3: 19.0}}
    same_facts = {"1": {1: 20.1, 2: 20.0, 3: 45.0}, "4": {1: 19.0, 2: 19.4, 3: 19.0}}
    flipped = {"1": {1: 18.0, 2: 20.0, 3: 19.5}, "4": {1: 19.0, 2: 19.5, 3: 19.0}}
    stated = conclusions(committed, [["1", "4"]], collapse_above=30)
    assert all(v["holds"] for v in verdicts(stated, conclusions(same_facts, [["1", "4"]], collapse_above=30)))
    changed = [v["statement"] for v in verdicts(stated, conclusions(flipped, [["1", "4"]], 30)) if not v["holds"]]
    assert changed == [
        "4 against 1: 4 better in 3 of 3 seeds",
        "4 against 1: the median's interval excludes 0",
        "1: 1 of 3 models collapse (test perplexity above 30)",
    ]
