"""Everything MLflow: one SQLite store at the project root (mlflow.db) unless
MLFLOW_TRACKING_URI says otherwise (another database, or a shared `mlflow server`).
Nothing else in headstudy imports mlflow."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

# Progress bars for small artifacts only clutter the terminal and the one-line errors.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

EXPERIMENT = "headstudy"
DEFAULT_STORE = "mlflow.db"
PIPELINE_RESULTS = ("dvc.lock", "metrics", "reports")


def store_root() -> Path:
    """The folder of the default store: the project root. A DVC experiment from the queue runs
    in a temporary copy of the repository (under .dvc/tmp/exps/) that is deleted afterwards;
    DVC names the user's own repository in DVC_ROOT, and its runs belong in that store."""
    from headstudy.core.config import project_root

    root = project_root()
    user_repository = os.environ.get("DVC_ROOT")
    copy = next((folder for folder in (root, *root.parents) if (folder / ".dvc").is_dir()), None)
    if user_repository and copy is not None:
        return Path(user_repository).resolve() / root.relative_to(copy)
    return root


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, or the SQLite store at the project root, whichever folder runs."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / DEFAULT_STORE}"


# Stores this process has seen ready: created, migrated, and holding the experiment.
_ready: dict[str, str] = {}


def sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return Path(path) if path and path != ":memory:" else None


def ensure_store(uri: str) -> str:
    """Create and migrate the store and create the experiment exactly once, whoever comes first;
    the experiment's id. Trainings that start at the same moment on a new SQLite file would
    each run MLflow's schema migration (`table _alembic_tmp_metrics already exists`, and a
    half-migrated store for good) and race to create the experiment, so they take turns under
    a file lock beside the database. A server serialises this itself."""
    if uri not in _ready:
        database = sqlite_file(uri)
        if database is None:
            _ready[uri] = get_or_create_experiment(uri)
        else:
            from filelock import FileLock

            database.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(database.with_name(database.name + ".lock")):
                _ready[uri] = get_or_create_experiment(uri)
    return _ready[uri]


def get_or_create_experiment(uri: str) -> str:
    mlflow_client = MlflowClient(uri)  # on a new SQLite file: creates and migrates the schema
    experiment = mlflow_client.get_experiment_by_name(EXPERIMENT)
    if experiment is not None:
        return experiment.experiment_id
    artifact_location = None
    if "MLFLOW_TRACKING_URI" not in os.environ:
        # Beside mlflow.db, whichever directory a later command runs from.
        artifact_location = (store_root() / "mlartifacts").as_uri()
    try:
        return mlflow_client.create_experiment(EXPERIMENT, artifact_location=artifact_location)
    except mlflow.exceptions.MlflowException as error:  # another client of the server was first
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return mlflow_client.get_experiment_by_name(EXPERIMENT).experiment_id


def client() -> MlflowClient:
    uri = tracking_uri()
    ensure_store(uri)
    return MlflowClient(uri)


def experiment_id() -> str:
    return ensure_store(tracking_uri())


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
    import torch  # here, not at the top: the report stage needs no torch

    return {
        "env.python": platform.python_version(),
        "env.torch": torch.__version__,
        "env.lightning": metadata.version("lightning"),
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
