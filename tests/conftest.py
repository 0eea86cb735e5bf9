from __future__ import annotations

import os
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
