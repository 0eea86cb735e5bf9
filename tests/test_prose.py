"""The project speaks of itself alone: its prose (documentation, study READMEs and records, params
and pipelines, comments, docstrings, messages, committed reports) names no work period called a
session and no issue number. A when is a date or a commit. A process session (POSIX) is meant where
the words say so; code names (pytest's `scope="session"`, SQLAlchemy's Session) are not prose."""

from __future__ import annotations

import io
import re
import subprocess
import tokenize

from conftest import ROOT

WORK_WORDS = re.compile(r"\bsessions?\b|\bissues? ?#?\d+", re.IGNORECASE)
MEANT = re.compile(r"process session|session of its own", re.IGNORECASE)
TEXT_SUFFIXES = (".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg")


def tracked_files() -> list[str]:
    """Every tracked file but the locks and this test, which has to name what it looks for."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [path for path in listed.splitlines() if not path.endswith("dvc.lock") and path != "tests/test_prose.py"]


def python_prose(text: str) -> list[tuple[int, str]]:
    """Comments, and strings that hold a space (a docstring, a message), with their line."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and " " in token.string):
            found += [(token.start[0] + offset, line) for offset, line in enumerate(token.string.splitlines())]
    return found


def work_words(path: str) -> list[str]:
    text = (ROOT / path).read_text(errors="replace")
    if path.endswith(".py"):
        lines = python_prose(text)
    elif path.endswith(TEXT_SUFFIXES) or (ROOT / path).parent.name == ".ci":
        lines = list(enumerate(text.splitlines(), start=1))
    else:
        return []
    return [f"{path}:{number}: {line.strip()}" for number, line in lines if WORK_WORDS.search(MEANT.sub("", line))]


def test_the_prose_names_no_work_session_and_no_issue_number():
    found = [hit for path in tracked_files() if (ROOT / path).is_file() for hit in work_words(path)]
    assert not found, "\n".join(found)


def test_the_check_finds_a_work_session_and_an_issue_number_in_a_comment_and_a_docstring():
    text = '"""Trained in the ninth session."""\nx = 1  # see issue 38, item 2\ny = "session"\n'
    assert [line for _, line in python_prose(text) if WORK_WORDS.search(line)] == [
        '"""Trained in the ninth session."""',
        "# see issue 38, item 2",
    ]
