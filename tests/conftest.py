from __future__ import annotations

import json
import math
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


def assert_refused(result, command: str, *names: str) -> str:
    """A user error as the project promises it: exit status 2, no traceback, and one line
    `headstudy COMMAND: error: ...`, the last one printed, that names every one of `names`."""
    assert result.returncode == 2, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1], result.stderr
    [line] = errors
    assert line.startswith(f"headstudy {command}: error: "), line
    for name in names:
        assert name in line, f"{name!r} not in {line!r}"
    return line


def assert_nothing_half_written(folder: Path) -> None:
    """No staging leftovers, and no NaN or Infinity in any JSON or CSV file under folder."""
    assert not list(folder.rglob("*.partial")), list(folder.rglob("*.partial"))

    def refuse(constant: str):
        raise AssertionError(f"{path} holds {constant}")

    for path in folder.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    for path in folder.rglob("*.csv"):
        for field in path.read_text().replace("\n", ",").split(","):
            try:
                value = float(field)
            except ValueError:
                continue
            assert math.isfinite(value), f"{path} holds {field}"
