"""Everything MLflow: one SQLite store at the project root (mlflow.db) unless
MLFLOW_TRACKING_URI says otherwise (another database, or a shared `mlflow server`).
Nothing else in headstudy imports mlflow.

The studies' experiment, `headstudy`: each execution of a study (a `dvc repro` or a `dvc exp
run`) is one parent run, named by its study folder and its DVC experiment (or the time it
started); the model runs it trains are nested beneath it, and the report stage logs the report
and the comparison metrics to it, then closes it. Trainings by hand and `headstudy reproduce`
go to an experiment of their own, `headstudy-by-hand`, so that the studies' runs stand alone.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urlsplit

import mlflow
import numpy as np
import torch
import yaml
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT, MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE
from omegaconf import DictConfig

from headstudy.bookkeeping.jobs import in_users_repository

# train.py asks tracking for the data's md5 in dvc.lock, with what it logs.
from headstudy.bookkeeping.provenance import (
    PARAMS_FILE,
    dvc_experiment,
    dvc_locked_md5,  # noqa: F401
    environment,
    flatten,
    git_state,
    in_pipeline,
    installed_packages,
    study_folder_name,
    study_identity,
)

# Progress bars for small artifacts only clutter the terminal and the one-line errors.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

EXPERIMENT = "headstudy"
# Runs that belong to no study: trainings by hand (no DVC_STAGE) and `headstudy reproduce`.
BY_HAND_EXPERIMENT = "headstudy-by-hand"
DEFAULT_STORE = "mlflow.db"

EXPERIMENT_TAGS = {
    # MLflow 3's kind for classic model training (the UI's "Model training"), as the UI's own
    # experiment-type selector writes it. The 3.17 UI does not read it to pick a view: the URL's
    # workflowType does, else the sidebar switch's last choice in that browser, else GenAI, so
    # the experiments list opens a new reader on the GenAI overview (tests/test_mlflow_ui.py)
    # and ui_url() asks for the model-training view.
    "mlflow.experimentKind": "custom_model_development",
    MLFLOW_RUN_NOTE: (
        "Does attention with four heads beat one head at the same width, and by how much?\n\n"
        "Each execution of a study (`dvc repro` or `dvc exp run`) is a parent run named by its "
        "study folder (`default` for the project root, `studies/NAME`) and its DVC experiment, or "
        "the UTC time it started (`default @ 2025-01-31 12:00:00 UTC`): it holds the report "
        "(results.html, results.md, figures, summary.json) and "
        "the comparison metrics (difference and relative change of test perplexity, with 95% "
        "CIs). The model runs it trained (`h{variant}-s{seed}`) are nested beneath it, with "
        "`train/loss` and `val/ppl` curves, `test/ppl`, the prepared data as their dataset and "
        "the trained model. Trainings by hand and `headstudy reproduce` runs are in the experiment "
        f"`{BY_HAND_EXPERIMENT}`."
    ),
}
BY_HAND_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    MLFLOW_RUN_NOTE: (
        "Model runs that belong to no study: `headstudy train` run by hand (outside `dvc repro`) "
        "and the retrainings of `headstudy reproduce` (tag `reproduces`: the run retrained). "
        f"The studies' own runs are in the experiment `{EXPERIMENT}`."
    ),
}
EXPERIMENT_DESCRIPTIONS = {EXPERIMENT: EXPERIMENT_TAGS, BY_HAND_EXPERIMENT: BY_HAND_TAGS}
UI_ADDRESS = "http://127.0.0.1:5000"
# A saved view of the runs table (the UI's "Views"), stored as an experiment tag the way the UI
# stores one, that ui_url() opens: the columns a reader of this study looks for.
RESULTS_VIEW = "results"
RESULTS_COLUMNS = [
    # Not the wide Dataset column, which would push the metrics out of sight.
    "attributes.`Models`",
    "metrics.`test/ppl`",
    "metrics.`val/ppl`",
    "metrics.`train/loss`",
    "metrics.`model/parameter_count`",
    "params.`variant`",
    "params.`seed`",
    "params.`trainer.max_steps`",
]

# Tags of a study's parent run: which execution of which study it is, and whether its report
# is still to come.
STUDY_KEY = "study.key"
STUDY_STATE = "study.state"


def store_root() -> Path:
    """The folder of the default store: the project root, in the user's repository also when a
    queued DVC experiment runs in a temporary copy of it."""
    from headstudy.settings.compose import project_root

    return in_users_repository(project_root())


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, or the SQLite store at the project root, whichever folder runs."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / DEFAULT_STORE}"


# The longest wait for a lock that another process holds: a schema migration or a lookup holds one
# for seconds. Longer means a process stuck on the store; waiting on it for ever helps no one.
LOCK_TIMEOUT_S = 120.0
# The longest wait for a network store to accept a connection, before MLflow is asked anything.
PROBE_TIMEOUT_S = 5.0
# While check_store asks an `mlflow server` whether it works: MLflow's own defaults retry a dead
# server for about 255 s before they give up.
CHECK_HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}

# Experiments this process has seen ready, by (store, name): the store created and migrated,
# the experiment there and described.
_ready: dict[tuple[str, str], str] = {}


def redact(text: str, uri: str | None = None) -> str:
    """text with the password of the store's URI (`postgresql://user:secret@host/db`) hidden,
    wherever it appears: a message must never show it."""
    try:
        password = urlsplit(uri or tracking_uri()).password
    except ValueError:
        return text
    if not password:
        return text
    for form in {password, unquote(password)}:
        text = text.replace(f":{form}@", ":***@")
        if len(form) >= 4:  # a shorter one would turn ordinary words into stars
            text = text.replace(form, "***")
    return text


def store_named() -> str:
    """The store as a message names it: its URI, password hidden, and what chose it."""
    if "MLFLOW_TRACKING_URI" in os.environ:
        return f"{redact(tracking_uri())} (MLFLOW_TRACKING_URI)"
    return f"{tracking_uri()} (the default store; set MLFLOW_TRACKING_URI for another)"


def sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return Path(path) if path and path != ":memory:" else None


@contextmanager
def store_lock(database: Path) -> Iterator[None]:
    """The lock beside an SQLite store, under which processes take turns to create and migrate
    it. A lock file that cannot be made, or a lock held past LOCK_TIMEOUT_S, is one line."""
    from filelock import FileLock, Timeout

    from headstudy.common.errors import ConfigError

    lock = database.with_name(database.name + ".lock")
    try:  # FileLock would retry a lock file that can never be made for as long as it may wait
        database.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a"):
            pass
    except OSError as error:
        raise ConfigError(
            f"cannot open the MLflow store {store_named()}: its lock file {lock} cannot be "
            f"created ({error.strerror or error})"
        ) from None
    try:
        with FileLock(lock, timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout:
        raise ConfigError(
            f"cannot open the MLflow store {store_named()}: another process has held its lock "
            f"{lock} for over {LOCK_TIMEOUT_S:.0f} s; end that process, or try again"
        ) from None


def ensure_store(uri: str, name: str = EXPERIMENT) -> str:
    """Create and migrate the store and create the experiment `name` exactly once, whoever
    comes first; the experiment's id. Trainings that start at the same moment on a new SQLite
    file would each run MLflow's schema migration and race to create the experiment, so they
    take turns under a file lock beside the database; a server serialises this itself. A new
    SQLite store is created and migrated in a file of its own and moved into place whole, so
    that a command interrupted while it migrates leaves no store rather than a broken one
    (`table _alembic_tmp_metrics already exists` for every later command)."""
    if (uri, name) not in _ready:
        database = sqlite_file(uri)
        if database is None:
            _ready[uri, name] = get_or_create_experiment(uri, name)
        else:
            with store_lock(database):
                if not database.is_file() or database.stat().st_size == 0:
                    create_database(database)
                _ready[uri, name] = get_or_create_experiment(uri, name)
    return _ready[uri, name]


def create_database(database: Path) -> None:
    """A new SQLite store at `database`, its schema complete: migrated in a temporary file beside
    it (left-overs of an interrupted one are removed first; the caller holds the store's lock),
    then renamed into place in one step."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables
    from sqlalchemy.pool import NullPool

    for leftover in database.parent.glob(f".{database.name}.new-*"):
        leftover.unlink(missing_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{database.name}.new-", dir=database.parent)
    os.close(handle)
    staged = Path(name)
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{staged}", poolclass=NullPool)
        try:
            _initialize_tables(engine)  # what MLflow does to a new database: create, then migrate
        finally:
            engine.dispose()
        staged.chmod(0o644)  # mkstemp's file is private; the store is not
        os.replace(staged, database)
    finally:
        staged.unlink(missing_ok=True)
        for journal in database.parent.glob(f"{staged.name}-*"):
            journal.unlink(missing_ok=True)


def get_or_create_experiment(uri: str, name: str = EXPERIMENT) -> str:
    mlflow_client = MlflowClient(uri)
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        describe_experiment(mlflow_client, experiment)
        return experiment.experiment_id
    artifact_location = None
    if "MLFLOW_TRACKING_URI" not in os.environ:
        # Beside mlflow.db, whichever directory a later command runs from.
        artifact_location = (store_root() / "mlartifacts").as_uri()
    try:
        created = mlflow_client.create_experiment(
            name, artifact_location=artifact_location, tags=EXPERIMENT_DESCRIPTIONS[name]
        )
    except mlflow.exceptions.MlflowException as error:  # another client of the server was first
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return mlflow_client.get_experiment_by_name(name).experiment_id
    save_results_view(mlflow_client, created, [])
    return created


def client() -> MlflowClient:
    uri = tracking_uri()
    ensure_store(uri)
    return MlflowClient(uri)


def experiment_id(name: str = EXPERIMENT) -> str:
    """The id of the experiment `name` (by default the studies' one), created if new."""
    return ensure_store(tracking_uri(), name)


def run_experiment() -> str:
    """The experiment of a model run started now: the studies' under DVC, else the by-hand one."""
    return EXPERIMENT if in_pipeline() else BY_HAND_EXPERIMENT


def existing_experiment_ids() -> list[str]:
    """The ids of this project's experiments that exist in the store: the studies' first."""
    mlflow_client = client()
    found = (mlflow_client.get_experiment_by_name(name) for name in EXPERIMENT_DESCRIPTIONS)
    return [experiment.experiment_id for experiment in found if experiment is not None]


def describe_experiment(mlflow_client: MlflowClient, experiment) -> None:
    """Give a store made before these tags existed its kind, description and results view."""
    for key, value in EXPERIMENT_DESCRIPTIONS.get(experiment.name, {}).items():
        if experiment.tags.get(key) != value:
            mlflow_client.set_experiment_tag(experiment.experiment_id, key, value)
    if VIEW_TAG_PREFIX + RESULTS_VIEW not in experiment.tags:
        save_results_view(mlflow_client, experiment.experiment_id, [])


VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def save_results_view(mlflow_client: MlflowClient, experiment: str, extra_metrics: list[str]) -> None:
    """The runs table with RESULTS_COLUMNS and extra_metrics (a study's comparisons) added to
    the columns the view has, newest first, saved in the envelope the 3.17 UI writes for a saved
    view. Added, not replaced: the studies of a project share the experiment, and one study's
    report must not take away another's columns."""
    now = int(time.time() * 1000)
    columns = RESULTS_COLUMNS + saved_view_columns(mlflow_client, experiment)
    columns += [column for column in (f"metrics.`{key}`" for key in extra_metrics) if column not in columns]
    state = {"selectedColumns": columns, "orderByKey": "attributes.start_time", "orderByAsc": False}
    envelope = {"name": "headstudy results", "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    mlflow_client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + RESULTS_VIEW, json.dumps(envelope))


def saved_view_columns(mlflow_client: MlflowClient, experiment: str) -> list[str]:
    """The results view's columns beyond RESULTS_COLUMNS, as saved now (none if unreadable)."""
    saved = mlflow_client.get_experiment(experiment).tags.get(VIEW_TAG_PREFIX + RESULTS_VIEW)
    try:
        columns = json.loads(json.loads(saved)["state"])["selectedColumns"] if saved else []
    except (ValueError, KeyError, TypeError):
        return []
    return [column for column in columns if column not in RESULTS_COLUMNS]


def ui_url(run_id: str | None = None, experiment: str | None = None) -> str:
    """Where `mlflow ui` shows an experiment's runs (by default the studies'), or one run, in the
    model-training view. MLflow 3.17's UI opens the GenAI view unless the URL (or its sidebar
    switch) says otherwise."""
    if run_id:
        experiment = client().get_run(run_id).info.experiment_id
        return f"{UI_ADDRESS}/#/experiments/{experiment}/runs/{run_id}?workflowType=machine_learning"
    experiment = experiment or experiment_id()
    return (
        f"{UI_ADDRESS}/#/experiments/{experiment}/runs?workflowType=machine_learning&viewStateShareKey={RESULTS_VIEW}"
    )


def training_params(config: DictConfig) -> dict[str, str]:
    """The settings that shape a training run (the training section of its config file), as its MLflow params."""
    from headstudy.formats.runconfig import training_section

    return flatten(training_section(config))


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C or SIGTERM within a write to the store would leave its SQLite transaction open, and
    the run could then not be closed ("database is locked"): such a signal waits for the write."""
    deferred = [number for number in (signal.SIGINT, signal.SIGTERM) if callable(signal.getsignal(number))]
    if threading.current_thread() is not threading.main_thread() or not deferred:
        yield
        return
    caught: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: caught.append(number)) for number in deferred}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught:
            signal.raise_signal(caught[0])


def training_logger(run_id: str | None, run_name: str, parent_run_id: str | None = None):
    """Lightning's MLflow logger on our store; with run_id it continues that run, otherwise it
    starts one nested under parent_run_id (in the studies' experiment, as its parent is), or
    standing alone in the experiment of runs by hand."""
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    class TrainingLogger(MLFlowLogger):
        def log_metrics(self, metrics, step=None):
            # Lightning adds `epoch`, which here counts validation intervals: noise in the run.
            with interrupts_deferred():
                super().log_metrics({key: value for key, value in metrics.items() if key != "epoch"}, step)

        def log_hyperparams(self, params) -> None:
            with interrupts_deferred():
                super().log_hyperparams(params)

        def finalize(self, status: str = "success") -> None:
            # Lightning ends every interrupted fit with finalize("failed"), Ctrl-C and a SIGTERM
            # included, from within the handler of the exception: an interruption, which resumes
            # from the last checkpoint, is KILLED, not FAILED.
            if status == "failed" and isinstance(sys.exc_info()[1], (KeyboardInterrupt, SIGTERMException)):
                status = RunStatus.to_string(RunStatus.KILLED)
            super().finalize(status)

    experiment = EXPERIMENT if parent_run_id else run_experiment()
    experiment_id(experiment)  # create the store and experiment once, before the logger looks for them
    return TrainingLogger(
        experiment_name=experiment,
        run_name=run_name,
        tracking_uri=tracking_uri(),
        run_id=run_id,
        tags={MLFLOW_PARENT_RUN_ID: parent_run_id} if parent_run_id else None,
    )


def record_provenance(run_id: str, config: DictConfig, tags: dict[str, str], work_dir: Path) -> None:
    """Params, tags and artifacts that say exactly what this run was and where it ran."""
    mlflow_client = client()
    git = git_state()
    all_tags = {
        "git.commit": git["commit"],
        **source_commit(mlflow_client, run_id, git["commit"]),
        "git.dirty": git["dirty"],
        "git.params_changed": git["params_changed"],
        **dvc_experiment(),
        **environment(),
        **tags,
    }
    mlflow_client.log_batch(
        run_id,
        params=[Param(key, value) for key, value in training_params(config).items()],
        tags=[RunTag(key, value) for key, value in all_tags.items()],
    )
    work_dir.mkdir(parents=True, exist_ok=True)
    files = {
        # Names ending in .txt: the only text the 3.17 UI previews (not .patch, nor .diff).
        "requirements-frozen.txt": installed_packages(),
        "git-diff.txt": git["diff"],
        "git-untracked.txt": git["untracked"],
        "params-diff.txt": git["params_diff"],
    }
    for name, text in files.items():
        if text:
            (work_dir / name).write_text(text)
            mlflow_client.log_artifact(run_id, str(work_dir / name), "provenance")


def source_commit(mlflow_client: MlflowClient, run_id: str, commit: str) -> dict[str, str]:
    """MLflow's standard tag for the commit a run ran from (the UI's "Git commit"), as a tag to
    set; none when git knows no commit here. MLflow itself may already have set it, from the git
    repository of the `headstudy` script rather than of the study: that one is removed."""
    if commit != "unknown":
        return {MLFLOW_GIT_COMMIT: commit}
    if MLFLOW_GIT_COMMIT in mlflow_client.get_run(run_id).data.tags:
        mlflow_client.delete_tag(run_id, MLFLOW_GIT_COMMIT)
    return {}


def log_dataset(run_id: str, prepared: Path, name: str, digest: str) -> None:
    """The prepared token ids as the run's training input (the UI's Dataset column): every
    split's shape and dtype, where they lie, and their digest."""
    from headstudy.formats.prepared import SPLITS, load_tokens

    splits = {split: load_tokens(prepared, split) for split in SPLITS}
    with warnings.catch_warnings():
        # MLflow registers its local-file source twice (paths and file: URIs) and warns that a
        # local path matches both.
        warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
        dataset = mlflow.data.from_numpy(splits, source=str(Path(prepared).resolve()), name=name, digest=digest[:16])
    context = InputTag(key=MLFLOW_DATASET_CONTEXT, value="training")
    log_inputs_once(run_id, DatasetInput(dataset._to_mlflow_entity(), tags=[context]))


def log_inputs_once(run_id: str, dataset_input: DatasetInput) -> None:
    """The dataset as an input of the run, whoever logs the same dataset at the same moment.
    MLflow looks the dataset's row up, then inserts it if it found none: trainings that start
    together on a new store all find none, and all but the first insert fail (`UNIQUE constraint
    failed: datasets.experiment_id, datasets.name, datasets.digest`). log_inputs reuses the rows
    it finds, so the second try, which finds the row another process inserted, adds this run's
    input alone; a second failure is no such race, and is raised."""
    mlflow_client = client()
    try:
        mlflow_client.log_inputs(run_id, datasets=[dataset_input])
    except mlflow.exceptions.MlflowException:
        mlflow_client.log_inputs(run_id, datasets=[dataset_input])


@contextmanager
def active_run(run_id: str) -> Iterator[None]:
    """run_id as MLflow's active run, for the APIs that log only there (log_model). The run ends
    FINISHED, and this process's tracking URI is left as it was."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri())
    try:
        with mlflow.start_run(run_id=run_id):
            yield
    finally:
        mlflow.set_tracking_uri(previous)


def log_model(run_id: str, model: torch.nn.Module, name: str, context: int, vocab_size: int, step: int) -> str:
    """The trained model as an MLflow model, saved by torch.export (weights and graph, no headstudy
    code needed to load it): `mlflow.pytorch.load_model(uri)` gives a module that maps token ids
    (batch, length <= context) to next-token logits (batch, length, vocab). Returns its URI."""
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.int64), (-1, -1), "tokens")]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, -1, vocab_size), "logits")]),
    )
    # Batch and length both above 1, so that the export keeps both dimensions free.
    example = np.zeros((2, context), dtype=np.int64)
    was_training = model.training
    model.eval()
    try:
        with active_run(run_id):
            info = mlflow.pytorch.log_model(
                # MLflow refuses a dot in a model name (h4-lr0.006-s0).
                model,
                name=name.replace(".", "p"),
                signature=signature,
                input_example=example,
                serialization_format="pt2",
                step=step,
                # Loading the exported graph needs torch alone; no slow inference of requirements.
                pip_requirements=[f"torch=={torch.__version__}"],
                # MLflow's serving check feeds the example as a list, which the pytorch flavour
                # refuses; the signature already says what the model takes.
                validate_serving_input=False,
            )
    finally:
        model.train(was_training)
    set_tags(run_id, {"model.uri": info.model_uri})
    return info.model_uri


@contextmanager
def file_lock(name: str) -> Iterator[None]:
    """An exclusive lock among this machine's processes that share the tracking store, waited
    for at most LOCK_TIMEOUT_S."""
    from headstudy.common.errors import ConfigError

    store = hashlib.sha256(tracking_uri().encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"headstudy-{store}-{name}.lock"
    try:
        handle = open(path, "a")
    except OSError as error:
        raise ConfigError(
            f"cannot use the MLflow store {store_named()}: the lock file {path} cannot be "
            f"created ({error.strerror or error})"
        ) from None
    with handle:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"cannot use the MLflow store {store_named()}: another process has held "
                        f"the lock {path} for over {LOCK_TIMEOUT_S:.0f} s; end that process, "
                        "or try again"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def study_run_name(identity: dict[str, str]) -> str:
    """`FOLDER @ DVC-EXPERIMENT` under `dvc exp run`, else `FOLDER @ YYYY-MM-DD HH:MM:SS UTC`, the
    time the execution started: `default @ bold-gull`, `studies/lr-tuning @ 2025-01-31 12:00:00 UTC`."""
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{study_folder_name()} @ {identity.get('dvc.exp_name') or started}"


def open_study_run() -> str:
    """The parent run of this study execution, RUNNING: the open one with this execution's
    identity, or a new one. Under a file lock, so that stages running in parallel agree.
    Only stages that DVC runs belong to the studies' experiment: a report made by hand
    (`headstudy report` outside `dvc repro`) is a run of the by-hand experiment, as a training
    by hand is, and never shares a study's parent run."""
    identity = study_identity()
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    experiment = experiment_id(run_experiment())
    mlflow_client = client()
    with file_lock(f"study-{key}"):
        found = mlflow_client.search_runs(
            [experiment],
            filter_string=f"tags.`{STUDY_KEY}` = '{key}' and tags.`{STUDY_STATE}` = 'open'",
            max_results=1,
            order_by=["attributes.start_time DESC"],
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != RunStatus.to_string(RunStatus.RUNNING):
                mlflow_client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            return run_id
        git = git_state()
        tags = {
            STUDY_KEY: key,
            STUDY_STATE: "open",
            **identity,
            **({MLFLOW_GIT_COMMIT: identity["git.commit"]} if identity["git.commit"] != "unknown" else {}),
            **dvc_experiment(),
            "git.dirty": git["dirty"],
            "git.params_changed": git["params_changed"],
            MLFLOW_RUN_NOTE: (
                f"One execution of the study in {identity['study.folder']}: the model runs it "
                "trained are nested beneath; the report stage logs the report and the comparison "
                "metrics here and closes it (tag study.state)."
                if in_pipeline()
                else f"A report made by hand (`headstudy report` outside `dvc repro`) in "
                f"{identity['study.folder']}: its files and comparison metrics. The studies' own "
                f"runs are in the experiment `{EXPERIMENT}`."
            ),
        }
        run = mlflow_client.create_run(experiment, tags=tags, run_name=study_run_name(identity))
        params = Path(PARAMS_FILE)
        if params.is_file():
            study_params = flatten(yaml.safe_load(params.read_text()) or {})
            mlflow_client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in study_params.items()])
        return run.info.run_id


def leave_study_run(run_id: str) -> None:
    """Nothing of the study runs now: the parent is FINISHED until the next stage reopens it, or
    FAILED or KILLED when the stage stops on an error or an interrupt (this runs in its `finally`).
    A stopped DVC experiment is never continued: a rerun is another experiment, and a queued one
    ran in a copy that DVC has deleted. So its study run is marked `stopped`, no longer open."""
    stopped = sys.exc_info()[1]
    if stopped is None:
        status = RunStatus.FINISHED
    else:
        status = RunStatus.KILLED if isinstance(stopped, (KeyboardInterrupt, SystemExit)) else RunStatus.FAILED
    mlflow_client = client()
    if stopped is not None and dvc_experiment():
        mlflow_client.set_tag(run_id, STUDY_STATE, "stopped")
    mlflow_client.set_terminated(run_id, RunStatus.to_string(status))


def log_study_report(artifacts: list[Path], summary: dict) -> str:
    """The report's files (a folder keeps its name) and its numbers (analysis.headline) on this
    study execution's parent run; then close that run."""
    run_id = open_study_run()
    mlflow_client = client()
    from headstudy.analysis.headline import headline

    metrics = headline(summary)
    log_metrics(run_id, metrics)
    for path in map(Path, artifacts):
        if path.is_dir():
            mlflow_client.log_artifacts(run_id, str(path), path.name)
        else:
            mlflow_client.log_artifact(run_id, str(path))
    mlflow_client.set_tag(run_id, STUDY_STATE, "closed")
    leave_study_run(run_id)
    experiment = experiment_id(run_experiment())
    save_results_view(mlflow_client, experiment, sorted(key for key in metrics if key.endswith("/per_token")))
    whose = "the study's" if in_pipeline() else f"the {BY_HAND_EXPERIMENT} experiment's"
    print(f"report: logged to {whose} MLflow run {run_id}; `mlflow ui`, then {ui_url(experiment=experiment)}")
    return run_id


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    """NaN is what was not measured (the speed of a resumed training with no step left): not logged."""
    now = int(time.time() * 1000)
    measured = {key: float(value) for key, value in metrics.items() if not math.isnan(float(value))}
    client().log_batch(run_id, metrics=[Metric(key, value, now, step) for key, value in measured.items()])


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    client().log_batch(run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])


def log_artifact(run_id: str, path: Path, folder: str | None = None) -> None:
    client().log_artifact(run_id, str(path), folder)


def mark_killed(run_id: str) -> None:
    """A run whose process died without saying so, or was interrupted: never leave it RUNNING.
    (An interrupted fit's logger has already ended its run KILLED: see training_logger.)"""
    change_status(run_id, RunStatus.RUNNING, RunStatus.KILLED)


def mark_failed_if_finished(run_id: str) -> None:
    change_status(run_id, RunStatus.FINISHED, RunStatus.FAILED)


def change_status(run_id: str, was: int, becomes: int) -> None:
    """The run ends with status `becomes` if its status is `was`; a run not in the store is left alone."""
    mlflow_client = client()
    try:
        run = mlflow_client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        return
    if run.info.status == RunStatus.to_string(was):
        mlflow_client.set_terminated(run_id, RunStatus.to_string(becomes))


def get_run(run_id: str):
    try:
        return client().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise LookupError(f"run {run_id!r} not found in the MLflow store {redact(tracking_uri())}") from None


def download_artifact(run_id: str, artifact_path: str, destination: Path) -> Path:
    return Path(client().download_artifacts(run_id, artifact_path, str(destination)))


def metric_history(run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) in step order; one value per step, the latest logged."""
    latest = {m.step: m for m in sorted(client().get_metric_history(run_id, key), key=lambda m: m.timestamp)}
    return [(step, latest[step].value) for step in sorted(latest)]


def check_store() -> None:
    """Open the store (creating it if new) before any work: a store that cannot be opened stops
    the command with one line, within seconds, instead of a traceback from deep inside MLflow
    (or, for a server that is down, after MLflow's four minutes of retries)."""
    from headstudy.common.errors import ConfigError, first_line

    uri = tracking_uri()
    probe_network_store(uri)
    try:
        with bounded_http_retries(uri):
            experiment_id()
    except ConfigError:
        raise
    except Exception as error:  # whatever the backend raises, the store is unusable
        raise ConfigError(f"cannot open the MLflow store {store_named()}: {redact(first_line(error))}") from None


def probe_network_store(uri: str) -> None:
    """A store on another machine (an `mlflow server`, a database) must accept a connection
    within PROBE_TIMEOUT_S; nothing listening is one line at once."""
    from headstudy.common.errors import ConfigError

    try:
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme.split("+")[0].lower())
    except ValueError:  # a port that is no number: MLflow says what is wrong with the URI
        return
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise ConfigError(
            f"cannot open the MLflow store {store_named()}: nothing accepts a connection at "
            f"{host}:{port} ({reason}); start the server, or correct the address"
        ) from None


@contextmanager
def bounded_http_retries(uri: str) -> Iterator[None]:
    """For an `mlflow server`, MLflow's HTTP retries cut to CHECK_HTTP_SETTINGS (where the
    environment sets none), for this block only; a later request retries as MLflow does."""
    if not uri.lower().startswith(("http://", "https://")):
        yield
        return
    added = {key: value for key, value in CHECK_HTTP_SETTINGS.items() if key not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def find_training_run(name: str, weights_sha256: str) -> str | None:
    """The id of the finished training run that produced these weights under this name (not a
    `headstudy reproduce` of it). Several can match after a forced retrain: runs of a DVC stage
    come before manual ones, then the latest first."""
    runs = client().search_runs(
        existing_experiment_ids(),  # a study's runs, and runs by hand
        filter_string=f"tags.`mlflow.runName` = '{name}' and tags.`weights.sha256` = '{weights_sha256}' "
        "and attributes.status = 'FINISHED'",
    )
    runs = [run for run in runs if "reproduces" not in run.data.tags]
    runs.sort(key=lambda run: (run.data.tags.get("stage", "manual") == "manual", -run.info.start_time))
    return runs[0].info.run_id if runs else None
