"""Every study's pipeline is generated: studies/NAME/dvc.yaml is, byte for byte, what
tools/study_pipelines.py makes of its entry in studies/pipelines.yaml and the template of its kind,
so that a hand edit or a copy's drift fails here. A bad entry is refused in one line that names
the entry and the key, before any file is written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import study_pipelines  # noqa: E402

TOOL = ROOT / "tools" / "study_pipelines.py"
ENTRIES = study_pipelines.read_entries()


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_the_committed_pipeline_is_its_generation_byte_for_byte(name):
    committed = (ROOT / "studies" / name / "dvc.yaml").read_bytes()
    generated = study_pipelines.generate(ENTRIES[name]).encode()
    assert committed == generated, (
        f"studies/{name}/dvc.yaml is not its generation: edit its entry in studies/pipelines.yaml (or the "
        "template) and run `python tools/study_pipelines.py`"
    )


def test_every_pipeline_under_studies_has_an_entry_or_a_reason_to_be_hand_written():
    pipelines = study_pipelines.study_pipelines()
    assert set(pipelines) == set(ENTRIES) | set(study_pipelines.HAND_WRITTEN)
    assert not set(ENTRIES) & set(study_pipelines.HAND_WRITTEN)


def test_the_check_passes_on_the_committed_files_and_names_a_hand_edit(tmp_path):
    checked = subprocess.run([sys.executable, TOOL, "--check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A copy of one study whose file has been edited by hand: one dep fewer, and a comment.
    (tmp_path / "studies" / "lr-cliff").mkdir(parents=True)
    (tmp_path / "studies" / "pipelines.yaml").write_text("lr-cliff:\n  kind: diagnosis\n")
    (tmp_path / "studies" / "lr-cliff" / "params.yaml").write_text("study: {}\n")
    generated = study_pipelines.generate(study_pipelines.read_entries(tmp_path)["lr-cliff"])
    edited = generated.replace("      - ../../data/prepared\n", "", 1)
    pipeline = tmp_path / "studies" / "lr-cliff" / "dvc.yaml"
    for text, said in ((edited, "changes stages.diagnose.deps"), ("# a note\n" + generated, study_pipelines.SAME)):
        pipeline.write_text(text)
        checked = subprocess.run([sys.executable, TOOL, "--check", "--root", tmp_path], capture_output=True, text=True)
        assert checked.returncode == 1 and f"studies/lr-cliff/dvc.yaml: {said}" in checked.stdout, checked.stdout
        assert pipeline.read_text() == text, "--check writes nothing"
    written = subprocess.run([sys.executable, TOOL, "--root", tmp_path], capture_output=True, text=True)
    assert written.returncode == 0 and pipeline.read_text() == generated, written.stdout + written.stderr


GOOD = "good:\n  kind: perplexity\n"
BAD_ENTRIES = [
    ("bad:\n  kind: perplexity-study\n", "bad", "kind"),
    ("bad:\n  note: a study of some kind\n", "bad", "kind"),
    ("bad:\n  kind: perplexity\n  lr: true\n", "bad", "lr"),
    ("bad:\n  kind: task\n  ablate: yes please\n", "bad", "ablate"),
    ("bad:\n  kind: task\n  plots: [accuracy_by_clues.png]\n", "bad", "plots"),
    ("bad:\n  kind: perplexity\n  inspect: true\n", "bad", "report_figures"),
    ("bad:\n  kind: perplexity\n  report_figures: 4\n", "bad", "report_figures"),
    ("bad:\n  kind: diagnosis\n  report_deps: {../x: [a list]}\n", "bad", "report_deps"),
    ("bad:\n  kind: diagnosis\n  report_deps: [metrics/diagnostics]\n", "bad", "report_deps"),
    ("bad:\n  kind: lr-grid\n  plots: [reports/figures/x.png]\n", "bad", "plots"),
    ("bad:\n  kind: training\n  note: [not, text]\n", "bad", "note"),
]


@pytest.mark.parametrize("text, entry, key", BAD_ENTRIES, ids=[f"{entry}.{key}" for _, entry, key in BAD_ENTRIES])
def test_a_bad_entry_is_refused_in_one_line_naming_the_entry_and_key_before_anything_is_written(
    tmp_path, text, entry, key
):
    for name in ("good", "bad"):
        (tmp_path / "studies" / name).mkdir(parents=True)
        (tmp_path / "studies" / name / "params.yaml").write_text("study: {}\n")
    (tmp_path / "studies" / "pipelines.yaml").write_text(GOOD + text)
    result = subprocess.run([sys.executable, TOOL, "--root", tmp_path], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"entry {entry!r}, key {key!r}: " in result.stderr, result.stderr
    assert not (tmp_path / "studies" / "good" / "dvc.yaml").exists(), "the good entry was written before the refusal"


def test_an_entry_given_twice_or_without_its_folder_is_refused(tmp_path):
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "pipelines.yaml").write_text(GOOD + GOOD)
    result = subprocess.run([sys.executable, TOOL, "--root", tmp_path], capture_output=True, text=True)
    assert result.returncode == 2 and "'good' given twice" in result.stderr, result.stderr
    (tmp_path / "studies" / "pipelines.yaml").write_text(GOOD)
    result = subprocess.run([sys.executable, TOOL, "--root", tmp_path], capture_output=True, text=True)
    assert result.returncode == 2 and "entry 'good': studies/good/params.yaml not found" in result.stderr, result.stderr
