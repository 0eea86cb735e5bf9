"""A tiny copy of the project for tests that run the real pipeline: dvc.yaml, conf/ and src/
with tiny params, in a git and DVC repository of its own, tracked in its own mlflow.db."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml
from conftest import ROOT
from mlflow.tracking import MlflowClient

TINY = {
    "study": {"variants": [1], "seeds": [0]},
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 200, "val_every_steps": 50},
}


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


def make_project(project: Path, tiny: dict = TINY, threads: int = 1) -> Path:
    """A git repository with DVC initialised and one commit: the pipeline, not yet run."""
    project.mkdir(parents=True, exist_ok=True)
    # The budget evidence is a committed file that the report reads; the studies' own pipelines stay out.
    for item in ("dvc.yaml", "conf", "src", ".gitignore", "studies/budget/metrics/curves"):
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
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    run(project, "git", "init", "-q")
    run(project, "dvc", "init", "-q")
    commit(project, "tiny study")
    return project
