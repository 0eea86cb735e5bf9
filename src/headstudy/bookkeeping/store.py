"""The MLflow store: where it is (one SQLite file at the project root unless MLFLOW_TRACKING_URI
says otherwise: another database, or a shared `mlflow server`), its creation and migration
under a lock, the project's two experiments in it, and the health checks that stop a command
with one line when it cannot be used. What is logged into it is tracking.py's.

The studies' experiment, `headstudy`, holds the runs of stages that DVC runs; trainings and
reports by hand and `headstudy reproduce` go to an experiment of their own, `headstudy-by-hand`,
so that the studies' runs stand alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import mlflow
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from headstudy.bookkeeping.dashboard import (
    CURVES_VIEW,
    RESULTS_VIEW,
    VIEW_TAG_PREFIX,
    save_curves_view,
    save_results_view,
)
from headstudy.bookkeeping.provenance import in_pipeline
from headstudy.execution.jobs import in_users_repository
from headstudy.execution.locks import exclusive

# Progress bars for small artifacts only clutter the terminal and the one-line errors.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# A database error is logged here with its traceback before MLflow raises it; the command says
# it in one line instead (store_failure, caught in cli.py).
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

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

# Where the MLflow UI is, for the addresses the project prints (ui_address): this variable when
# set; else the `mlflow server` that MLFLOW_TRACKING_URI names; else where `mlflow ui` listens,
# by the variables it reads itself (MLflow's defaults: 127.0.0.1, port 5000, no prefix).
UI_VARIABLE = "HEADSTUDY_MLFLOW_UI"
# 0: a training logs no MLflow model (its torch.export takes a training process about 4 s, and the
# store keeps a second copy of the weights); 1, or unset: it logs one. No output depends on it.
MODEL_VARIABLE = "HEADSTUDY_MLFLOW_MODEL"
UI_HOST, UI_PORT = "127.0.0.1", 5000
# Hosts `mlflow ui --host` binds to every interface with: a browser on this machine uses 127.0.0.1.
ALL_INTERFACES = ("0.0.0.0", "::", "[::]", "")


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
    lock = database.with_name(database.name + ".lock")
    with exclusive(
        lock,
        LOCK_TIMEOUT_S,
        unmade=lambda reason: f"cannot open the MLflow store {store_named()}: its lock file {lock} cannot be "
        f"created ({reason})",
        held=lambda: f"cannot open the MLflow store {store_named()}: another process has held its lock "
        f"{lock} for over {LOCK_TIMEOUT_S:.0f} s; end that process, or try again",
    ):
        yield


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
    save_curves_view(mlflow_client, created)
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
    """Give a store made before these tags existed its kind, description and saved views."""
    for key, value in EXPERIMENT_DESCRIPTIONS.get(experiment.name, {}).items():
        if experiment.tags.get(key) != value:
            mlflow_client.set_experiment_tag(experiment.experiment_id, key, value)
    if VIEW_TAG_PREFIX + RESULTS_VIEW not in experiment.tags:
        save_results_view(mlflow_client, experiment.experiment_id, [])
    if VIEW_TAG_PREFIX + CURVES_VIEW not in experiment.tags:
        save_curves_view(mlflow_client, experiment.experiment_id)


def serves_ui(uri: str) -> bool:
    """The store is an `mlflow server`, whose own address serves the UI too."""
    return uri.lower().startswith(("http://", "https://"))


def ui_address() -> str:
    """The MLflow UI that every printed address points at (no trailing slash): HEADSTUDY_MLFLOW_UI
    when set (a server behind a proxy, a UI on another port); else the `mlflow server` of
    MLFLOW_TRACKING_URI, without the user and password it may carry; else where `mlflow ui`
    listens when started in this shell, which reads MLFLOW_HOST, MLFLOW_PORT and
    MLFLOW_STATIC_PREFIX: http://127.0.0.1:5000 when none is set. A value that is no address is
    one line (check_store asks before any work)."""
    from headstudy.common.errors import ConfigError

    given = os.environ.get(UI_VARIABLE, "").strip()
    if given:
        try:
            parts = urlsplit(given)
            parts.port  # noqa: B018 - a port that is no number raises here
        except ValueError:
            parts = None
        if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"{UI_VARIABLE}={given!r} is not the address of an MLflow UI: give http://HOST:PORT, "
                f"as `mlflow ui` prints it (for example http://127.0.0.1:5001), or unset it"
            )
        return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path.rstrip("/"), "", ""))
    uri = tracking_uri()
    if serves_ui(uri):
        parts = urlsplit(uri)
        netloc = parts.netloc.rpartition("@")[2]  # never a password in a printed link
        return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))
    host = os.environ.get("MLFLOW_HOST", UI_HOST).strip()
    host = UI_HOST if host in ALL_INTERFACES else host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    port = os.environ.get("MLFLOW_PORT", "").strip() or str(UI_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"MLFLOW_PORT={port!r} is no port, for `mlflow ui` or its addresses: give 1-65535, or unset it"
        )
    prefix = os.environ.get("MLFLOW_STATIC_PREFIX", "").strip().rstrip("/")
    return f"http://{host}:{int(port)}{prefix}"


def ui_command() -> str | None:
    """The command that serves ui_address() over this store, as a hint prints it, with the options
    that address needs (`--port 5001`), so that it serves the printed links from any shell. None
    when the store is an `mlflow server`, which serves them itself, or the address is https, which
    `mlflow ui` does not serve (a proxy in front of it does). The default store is named as
    `mlflow ui` finds it from the project's folder."""
    uri = tracking_uri()
    parts = urlsplit(ui_address())
    if serves_ui(uri) or parts.scheme != "http":
        return None
    store = redact(uri) if "MLFLOW_TRACKING_URI" in os.environ else f"sqlite:///{DEFAULT_STORE}"
    options = [
        ("--host", parts.hostname, UI_HOST),
        ("--port", parts.port or 80, UI_PORT),
        ("--static-prefix", parts.path, ""),
    ]
    return f"mlflow ui --backend-store-uri {store}" + "".join(
        f" {option} {value}" for option, value, default in options if value != default
    )


def ui_url(run_id: str | None = None, experiment: str | None = None, view: str = RESULTS_VIEW) -> str:
    """Where the MLflow UI (ui_address) shows an experiment's runs (by default the studies') in a
    saved view (dashboard.VIEWS: the results table, or the curves in the chart view), or one
    run, in the model-training view. MLflow 3.17's UI opens the GenAI view unless the URL (or its
    sidebar switch) says otherwise, and its own links to a run drop that part of the URL."""
    address = ui_address()
    if run_id:
        experiment = client().get_run(run_id).info.experiment_id
        return f"{address}/#/experiments/{experiment}/runs/{run_id}?workflowType=machine_learning"
    experiment = experiment or experiment_id()
    charts = "&compareRunsMode=CHART" if view == CURVES_VIEW else ""
    return f"{address}/#/experiments/{experiment}/runs?workflowType=machine_learning&viewStateShareKey={view}{charts}"


@contextmanager
def file_lock(name: str) -> Iterator[None]:
    """An exclusive lock among this machine's processes that share the tracking store, waited
    for at most LOCK_TIMEOUT_S."""
    store = hashlib.sha256(tracking_uri().encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"headstudy-{store}-{name}.lock"
    with exclusive(
        path,
        LOCK_TIMEOUT_S,
        unmade=lambda reason: f"cannot use the MLflow store {store_named()}: the lock file {path} cannot be "
        f"created ({reason})",
        held=lambda: f"cannot use the MLflow store {store_named()}: another process has held the lock "
        f"{path} for over {LOCK_TIMEOUT_S:.0f} s; end that process, or try again",
    ):
        yield


def get_run(run_id: str):
    try:
        return client().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise LookupError(f"run {run_id!r} not found in the MLflow store {redact(tracking_uri())}") from None


def download_artifact(run_id: str, artifact_path: str, destination: Path) -> Path:
    return Path(client().download_artifacts(run_id, artifact_path, str(destination)))


def logs_models() -> bool:
    """Whether a training logs its model as an MLflow model: HEADSTUDY_MLFLOW_MODEL, 1 when unset."""
    from headstudy.common.errors import ConfigError

    value = os.environ.get(MODEL_VARIABLE, "1").strip() or "1"
    if value not in ("0", "1"):
        raise ConfigError(
            f"{MODEL_VARIABLE}={value!r} is not 0 or 1: 0 trains without logging each model as an MLflow "
            "model, 1 (or unset) logs it"
        )
    return value == "1"


def check_store() -> None:
    """Open the store (creating it if new) before any work: a store that cannot be opened stops
    the command with one line, within seconds, instead of a traceback from deep inside MLflow
    (or, for a server that is down, after MLflow's four minutes of retries)."""
    from headstudy.common.errors import ConfigError, first_line

    uri = tracking_uri()
    ui_address()  # the addresses it will print: a bad HEADSTUDY_MLFLOW_UI or MLFLOW_PORT is one line now
    logs_models()  # and a bad HEADSTUDY_MLFLOW_MODEL, not after a training
    probe_network_store(uri)
    try:
        with bounded_http_retries(uri):
            experiment_id()
    except ConfigError:
        raise
    except Exception as error:  # whatever the backend raises, the store is unusable
        raise ConfigError(f"cannot open the MLflow store {store_named()}: {redact(first_line(error))}") from None


def store_failure(error: BaseException) -> str | None:
    """An MLflow error from the store once it was open (a disk that filled, a database that went
    away) as one line naming the store and the driver's reason; None for any other error."""
    from mlflow.exceptions import MlflowException

    from headstudy.common.errors import first_line

    if not isinstance(error, MlflowException):
        return None
    cause: BaseException = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    cause = getattr(cause, "orig", None) or cause  # SQLAlchemy wraps the database driver's error
    return (
        f"the MLflow store {store_named()} failed: {redact(first_line(cause))}; "
        "once it can be written, the same command continues where it stopped"
    )


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
    if not serves_ui(uri):
        yield
        return
    added = {key: value for key, value in CHECK_HTTP_SETTINGS.items() if key not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
