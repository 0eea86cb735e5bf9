"""A comment, a docstring, a reformat or a move of the code that shapes the weights retrains
nothing, and a change of its arithmetic retrains every model: seen through real `dvc status` on a
reproduced tiny project. That a refactor leaves every weight as it was is proven by
tools/prove_refactor.py on the machine at hand, not by values pinned to one CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tinyproject import copy_project, environment, run

pytestmark = pytest.mark.slow

MODEL_CODE = Path("src/headstudy/weights/model.py")


def stale_stages(project: Path) -> set[str]:
    """The stages `dvc status` reports as changed, after the fingerprint stage has rerun (as
    `dvc repro` would first do) on the edited code."""
    run(project, "dvc", "repro", "-s", "fingerprint")
    return set(json.loads(run(project, "dvc", "status", "--json").stdout))


@pytest.fixture(scope="module")
def reproduced(reproduced_study, tmp_path_factory) -> Path:
    """A copy of the test run's reproduced tiny study: every training up to date and committed."""
    shared, _ = reproduced_study
    return copy_project(shared, tmp_path_factory.mktemp("fingerprint") / "project")


def restore(project: Path) -> None:
    run(project, "git", "checkout", "-q", "--", str(MODEL_CODE), "fingerprints")


def test_a_docstring_a_comment_and_a_reformat_of_the_model_code_leave_every_training_up_to_date(reproduced):
    path = reproduced / MODEL_CODE
    original = path.read_text()
    assert '"""A GPT-style decoder' in original and "mean=0.0," in original
    edited = "# A comment the code does not see.\n" + original.replace(
        '"""A GPT-style decoder', '"""Reworded: a GPT-style decoder', 1
    ).replace("mean=0.0,", "mean=(0.0),  # why: GPT-2's init\n").replace("\n\n\n", "\n\n\n\n")
    path.write_text(edited)
    try:
        assert not {stage for stage in stale_stages(reproduced) if stage.startswith("train")}
        assert run(reproduced, "git", "status", "--porcelain", "fingerprints").stdout == ""
    finally:
        restore(reproduced)


def test_a_changed_constant_in_the_model_code_makes_every_training_stale(reproduced):
    path = reproduced / MODEL_CODE
    path.write_text(path.read_text().replace("mean=0.0,", "mean=0.01,"))
    try:
        stale = stale_stages(reproduced)
        assert "train@1-0" in stale, stale
        assert "fingerprints/train.txt" in run(reproduced, "git", "status", "--porcelain").stdout
    finally:
        restore(reproduced)


def test_moving_a_function_of_the_training_loop_to_a_new_module_leaves_every_training_up_to_date(reproduced):
    """one_cycle, which every training runs, moved out of weights/training.py into a module of its
    own and imported from there: the same code, elsewhere."""
    training = reproduced / "src/headstudy/weights/training.py"
    text = training.read_text()
    start, end = text.index("def one_cycle("), text.index("class ResumeCheckpoint")
    (reproduced / "src/headstudy/weights/schedule.py").write_text("import math\n\n\n" + text[start:end].rstrip() + "\n")
    training.write_text(
        text[:start].replace(
            "from headstudy.weights.batches",
            "from headstudy.weights.schedule import one_cycle\nfrom headstudy.weights.batches",
        )
        + text[end:]
    )
    try:
        assert not stale_stages(reproduced)
        assert run(reproduced, "git", "status", "--porcelain", "fingerprints").stdout == ""
    finally:
        (reproduced / "src/headstudy/weights/schedule.py").unlink()
        run(reproduced, "git", "checkout", "-q", "--", "src", "fingerprints")


def test_renaming_a_local_variable_of_the_training_loop_leaves_every_training_up_to_date(reproduced):
    """`matrices` in weight_decay_groups renamed `linear_weights` throughout the function: the same
    arithmetic under another name."""
    training = reproduced / "src/headstudy/weights/training.py"
    text = training.read_text()
    assert text.count("matrices = [") == 1
    training.write_text(
        text.replace("matrices = [", "linear_weights = [")
        .replace("in matrices}", "in linear_weights}")
        .replace('{"params": matrices,', '{"params": linear_weights,')
    )
    try:
        renamed = training.read_text()
        assert not [use for use in ("matrices = [", "in matrices}", '"params": matrices,') if use in renamed]
        assert not stale_stages(reproduced)
        assert run(reproduced, "git", "status", "--porcelain", "fingerprints").stdout == ""
    finally:
        run(reproduced, "git", "checkout", "-q", "--", "src", "fingerprints")


def test_a_key_added_for_the_report_reruns_only_the_report(reproduced):
    """`model.width` added to what the report stage reads: configure (which writes the stages'
    files) and then the report rerun, and no training, evaluation or inspection."""
    compose = reproduced / "src/headstudy/settings/compose.py"
    text = compose.read_text()
    assert text.count('"report": ("tracking.experiment",') == 1
    compose.write_text(
        text.replace('"report": ("tracking.experiment",', '"report": ("tracking.experiment", "model.width",')
    )
    try:
        assert stale_stages(reproduced) == {"configure"}
        # The stage runs the edited copy's code, not the installed package's.
        run(reproduced, "dvc", "repro", "-s", "configure", env={**environment(), "PYTHONPATH": str(reproduced / "src")})
        assert set(json.loads(run(reproduced, "dvc", "status", "--json").stdout)) == {"report"}
    finally:
        run(reproduced, "git", "checkout", "-q", "--", "src", "fingerprints", "dvc.lock", "configs")
