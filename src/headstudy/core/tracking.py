"""Everything MLflow: one SQLite store at the project root (mlflow.db) unless
MLFLOW_TRACKING_URI says otherwise. Nothing else in headstudy imports mlflow."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import mlflow
import torch
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

# Progress bars for small artifacts only clutter the terminal and the one-line errors.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

EXPERIMENT = "headstudy"
DEFAULT_STORE = "mlflow.db"
PIPELINE_RESULTS = ("dvc.lock", "metrics", "reports")


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, or the SQLite store at the project root, whichever folder runs."""
    from headstudy.core.config import project_root

    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / DEFAULT_STORE}"


def client() -> MlflowClient:
    return MlflowClient(tracking_uri())


def experiment_id() -> str:
    mlflow_client = client()
    experiment = mlflow_client.get_experiment_by_name(EXPERIMENT)
    if experiment is not None:
        return experiment.experiment_id
    artifact_location = None
    if "MLFLOW_TRACKING_URI" not in os.environ:
        # Beside mlflow.db, whichever directory a later command runs from.
        from headstudy.core.config import project_root

        artifact_location = (project_root() / "mlartifacts").as_uri()
    return mlflow_client.create_experiment(EXPERIMENT, artifact_location=artifact_location)


def flatten(config: DictConfig) -> dict[str, str]:
    """The resolved config as `model.n_heads`-style keys."""
    flat: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = str(node)

    walk(OmegaConf.to_container(config, resolve=True), "")
    return flat


def git_state() -> dict[str, str]:
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else ""

    commit = git("rev-parse", "HEAD").strip() or "unknown"
    # The pipeline itself rewrites dvc.lock, metrics/ and reports/: they don't make a run dirty.
    diff = git("diff", "HEAD", "--", ".", *(f":(exclude){path}" for path in PIPELINE_RESULTS))
    diff = diff if commit != "unknown" else ""
    return {"commit": commit, "dirty": "true" if diff else "false", "diff": diff}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict[str, str]:
    """What decides whether a rerun can be bit-identical."""
    import lightning

    return {
        "env.python": platform.python_version(),
        "env.torch": torch.__version__,
        "env.lightning": lightning.__version__,
        "env.cpu": cpu_model(),
        "env.cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "env.threads": str(torch.get_num_threads()),
    }


def installed_packages() -> str:
    lines = {f"{dist.metadata['Name']}=={dist.version}" for dist in metadata.distributions()}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def training_logger(run_id: str | None, run_name: str):
    """Lightning's MLflow logger on our store; with run_id it continues that run."""
    from lightning.pytorch.loggers import MLFlowLogger

    experiment_id()  # create the store and experiment once, before the logger looks for them
    return MLFlowLogger(
        experiment_name=EXPERIMENT,
        run_name=run_name,
        tracking_uri=tracking_uri(),
        run_id=run_id,
    )


def record_provenance(run_id: str, config: DictConfig, tags: dict[str, str], work_dir: Path) -> None:
    """Params, tags and artifacts that say exactly what this run was and where it ran."""
    mlflow_client = client()
    git = git_state()
    all_tags = {"git.commit": git["commit"], "git.dirty": git["dirty"], **environment(), **tags}
    mlflow_client.log_batch(
        run_id,
        params=[Param(key, value) for key, value in flatten(config).items()],
        tags=[RunTag(key, value) for key, value in all_tags.items()],
    )
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "requirements-frozen.txt").write_text(installed_packages())
    mlflow_client.log_artifact(run_id, str(work_dir / "requirements-frozen.txt"), "provenance")
    if git["diff"]:
        (work_dir / "git.diff").write_text(git["diff"])
        mlflow_client.log_artifact(run_id, str(work_dir / "git.diff"), "provenance")


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    now = int(time.time() * 1000)
    client().log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    client().log_batch(run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])


def log_artifact(run_id: str, path: Path, folder: str | None = None) -> None:
    client().log_artifact(run_id, str(path), folder)


def mark_killed(run_id: str) -> None:
    """A run whose process died without saying so: never leave it RUNNING."""
    mlflow_client = client()
    try:
        run = mlflow_client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        return
    if run.info.status == RunStatus.to_string(RunStatus.RUNNING):
        mlflow_client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))


def get_run(run_id: str):
    try:
        return client().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise LookupError(f"run {run_id!r} not found in the MLflow store {tracking_uri()}") from None


def download_artifact(run_id: str, artifact_path: str, destination: Path) -> Path:
    return Path(client().download_artifacts(run_id, artifact_path, str(destination)))


def metric_history(run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) in step order; one value per step, the latest logged."""
    latest = {m.step: m for m in sorted(client().get_metric_history(run_id, key), key=lambda m: m.timestamp)}
    return [(step, latest[step].value) for step in sorted(latest)]


def check_store() -> None:
    """Open the store (creating it if new) before any work: a store that cannot be opened stops
    the command with one line instead of a traceback from deep inside MLflow."""
    from headstudy.core.config import ConfigError

    try:
        experiment_id()
    except Exception as error:  # whatever the backend raises, the store is unusable
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        source = "MLFLOW_TRACKING_URI" if "MLFLOW_TRACKING_URI" in os.environ else "the default store"
        raise ConfigError(f"cannot open the MLflow store {tracking_uri()} ({source}): {message}") from None


def find_training_run(name: str, weights_sha256: str) -> str | None:
    """The id of the finished training run that produced these weights under this name (not a
    `headstudy reproduce` of it). Several can match after a forced retrain: runs of a DVC stage
    come before manual ones, then the latest first."""
    runs = client().search_runs(
        [experiment_id()],
        filter_string=f"tags.`mlflow.runName` = '{name}' and tags.`weights.sha256` = '{weights_sha256}' "
                      "and attributes.status = 'FINISHED'",
    )
    runs = [run for run in runs if "reproduces" not in run.data.tags]
    runs.sort(key=lambda run: (run.data.tags.get("stage", "manual") == "manual", -run.info.start_time))
    return runs[0].info.run_id if runs else None
