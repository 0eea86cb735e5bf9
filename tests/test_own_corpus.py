"""A study on its own corpus (data.corpus: textdir) reruns what the corpus feeds when a corpus file
changes: the configure stage depends on the corpus folder and writes the sha256 of every .txt file
into configs/prepare.yaml, on which prepare depends. Checked through real `dvc status` and
`dvc repro` on a tiny project; the other corpora's configs carry no digests, so a study on the
Penn Treebank stays as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_refused_before_damage import SMALL, files_in, project, refused
from tinyproject import make_project, ran_stages, run

from headstudy.cli import main


@pytest.fixture
def study(tmp_path, monkeypatch):
    """Make a study folder (conf/ and params.yaml) with these params and run in it."""
    monkeypatch.delenv("HEADSTUDY_CONF", raising=False)
    monkeypatch.delenv("DVC_STAGE", raising=False)

    def make(params: dict) -> None:
        project(tmp_path, params)
        monkeypatch.chdir(tmp_path)

    return make


def stale(folder: Path) -> dict:
    """`dvc status`, by stage: what changed for each stage that is not up to date."""
    return json.loads(run(folder, "dvc", "status", "--json").stdout)


def brought_up_to_date(output: str) -> set[str]:
    """The stages a `dvc repro` ran, or took from DVC's run cache: a corpus back as it was before
    gives prepare a config that an earlier run had, whose outputs DVC restores instead of rerunning."""
    cached = {line.split("'")[1] for line in output.splitlines() if line.startswith("Stage '") and "is cached" in line}
    return ran_stages(output) | cached


def edit(corpus: Path) -> None:
    text = (corpus / "ptb.txt").read_text()
    (corpus / "ptb.txt").write_text(text.replace(" the ", " a ", 1))


def add(corpus: Path) -> None:
    (corpus / "more").mkdir()
    (corpus / "more" / "extra.txt").write_text("a line that the corpus did not have\n" * 20)


def remove(corpus: Path) -> None:
    (corpus / "more" / "extra.txt").unlink()


@pytest.mark.slow
def test_a_corpus_file_edited_added_or_removed_makes_prepare_and_its_dependants_stale(tmp_path):
    tiny = make_project(tmp_path / "project")  # data.corpus: textdir, data.dir: corpus
    run(tiny, "dvc", "repro", "baselines")
    assert not {"configure", "prepare", "baselines"} & set(stale(tiny))
    corpus = tiny / "corpus"
    for change in (edit, add, remove):
        change(corpus)
        assert stale(tiny)["configure"] == [{"changed deps": {"corpus": "modified"}}], change.__name__
        rerun = brought_up_to_date(run(tiny, "dvc", "repro", "baselines").stdout)
        assert rerun == {"configure", "prepare", "baselines"}, change.__name__
    # A file that prepare does not read: configure reruns and writes the same files, nothing else.
    (corpus / "notes.md").write_text("not part of the corpus\n")
    assert brought_up_to_date(run(tiny, "dvc", "repro", "baselines").stdout) == {"configure"}
    assert not {"configure", "prepare", "baselines"} & set(stale(tiny))


def test_configure_writes_the_digest_of_every_corpus_file_and_prepare_refuses_a_corpus_changed_since(study, capsys):
    study({**SMALL, "data": {"corpus": "textdir", "dir": "texts"}})
    Path("texts/b").mkdir(parents=True)
    Path("texts/a.txt").write_text("one line\n")
    Path("texts/b/c.txt").write_text("another line\n")
    main(["configure"])
    written = yaml.safe_load(Path("configs/prepare.yaml").read_text())
    assert [line.split("  ")[1] for line in written["corpus_sha256"]] == ["a.txt", "b/c.txt"]
    Path("texts/a.txt").write_text("one line, edited\n")
    line = refused(capsys, "prepare", "--config", "configs/prepare.yaml")
    assert "configs/prepare.yaml differs from what `headstudy configure` writes" in line


def test_the_penn_treebank_s_prepare_config_carries_no_digests(study):
    study(SMALL)
    main(["configure"])
    assert "corpus_sha256" not in Path("configs/prepare.yaml").read_text()


@pytest.mark.parametrize("problem", ["none", "broken-link", "folder"])
def test_configure_refuses_a_corpus_it_cannot_read_naming_the_file(study, capsys, problem):
    study({**SMALL, "data": {"corpus": "textdir", "dir": "texts"}})
    Path("texts").mkdir()
    if problem == "broken-link":
        Path("texts/a.txt").symlink_to("missing.txt")
    elif problem == "folder":
        Path("texts/a.txt").mkdir()
    before = files_in(Path.cwd())
    line = refused(capsys, "configure")
    expected = {
        "none": "data.dir=texts: expected a folder holding .txt files, found none",
        "broken-link": "texts/a.txt cannot be read",
        "folder": "texts/a.txt cannot be read",
    }[problem]
    assert expected in line, line
    assert files_in(Path.cwd()) == before


def test_configure_refuses_a_corpus_outside_what_its_stage_depends_on(study, capsys):
    study({**SMALL, "data": {"corpus": "textdir", "dir": "texts"}})
    shutil.copy(ROOT / "dvc.yaml", "dvc.yaml")
    Path("texts").mkdir()
    Path("texts/a.txt").write_text("one line\n")
    before = files_in(Path.cwd())
    line = refused(capsys, "configure")
    assert "data.dir=texts is in no folder that the configure stage of dvc.yaml depends on" in line, line
    assert "a change of the corpus would rerun nothing" in line
    assert files_in(Path.cwd()) == before
    Path("corpus").mkdir()
    Path("texts/a.txt").rename("corpus/a.txt")
    Path("params.yaml").write_text(Path("params.yaml").read_text().replace("dir: texts", "dir: corpus"))
    main(["configure"])  # the project's corpus/, which configure depends on
