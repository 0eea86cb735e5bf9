"""The runs in the MLflow store (store.py): a study execution's parent run and its report, a
training's run (Lightning's logger, its provenance, its dataset, its model), and what evaluate
logs to it. Nothing outside bookkeeping/ imports mlflow.

Each execution of a study (a `dvc repro` or a `dvc exp run`) is one parent run in the studies'
experiment, named by its study folder and its DVC experiment (or the time it started); the
model runs it trains are nested beneath it, and the report stage logs the report and the
comparison metrics to it, then closes it. Trainings and reports by hand and `headstudy
reproduce` go to the experiment `headstudy-by-hand`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import mlflow
import numpy as np
import yaml
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT, MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE
from omegaconf import DictConfig

from headstudy.bookkeeping.dashboard import dashboard_metrics, save_curves_view, save_results_view, significant
from headstudy.bookkeeping.provenance import (
    PARAMS_FILE,
    dvc_experiment,
    environment,
    flatten,
    git_state,
    in_pipeline,
    installed_packages,
    study_folder_name,
    study_identity,
)
from headstudy.bookkeeping.store import (
    BY_HAND_EXPERIMENT,
    EXPERIMENT,
    client,
    existing_experiment_ids,
    experiment_id,
    file_lock,
    logs_models,
    run_experiment,
    tracking_uri,
    ui_command,
    ui_url,
)
from headstudy.common.errors import ConfigError

if TYPE_CHECKING:
    import torch

# Tags of a study's parent run: which execution of which study it is, and whether its report
# is still to come.
STUDY_KEY = "study.key"
STUDY_STATE = "study.state"
# A training's validation perplexity, and beside it at each of its steps the tokens trained on so far.
VALIDATION_METRIC, TOKENS_METRIC = "val/ppl", "tokens"


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
    standing alone in the experiment of runs by hand. With each validation perplexity it logs the
    tokens trained on so far (`tokens`), the x axis of the report's curves and of MLflow's."""
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    class TrainingLogger(MLFlowLogger):
        tokens_per_step: int | None = None

        def log_metrics(self, metrics, step=None):
            # Lightning adds `epoch`, which here counts validation intervals: noise in the run.
            metrics = {key: value for key, value in metrics.items() if key != "epoch"}
            if VALIDATION_METRIC in metrics and step is not None:
                metrics[TOKENS_METRIC] = step * self.run_tokens_per_step()
            with interrupts_deferred():
                super().log_metrics(metrics, step)

        def run_tokens_per_step(self) -> int:
            """Tokens a step trains on, from the run's own params (record_provenance logs them
            before the first validation, also for a run resumed in another process)."""
            if self.tokens_per_step is None:
                params = client().get_run(self.run_id).data.params
                missing = [key for key in ("data.batch_size", "model.context") if key not in params]
                if missing:
                    raise ConfigError(
                        f"MLflow run {self.run_id} has no param {' or '.join(missing)}, from which its "
                        "validations' token counts are logged: set the logger's tokens_per_step, or log the "
                        "run's params (record_provenance) before its first validation"
                    )
                self.tokens_per_step = int(params["data.batch_size"]) * int(params["model.context"])
            return self.tokens_per_step

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


def log_model(run_id: str, model: torch.nn.Module, name: str, context: int, vocab_size: int, step: int) -> str | None:
    """The trained model as an MLflow model, saved by torch.export (weights and graph, no headstudy
    code needed to load it): `mlflow.pytorch.load_model(uri)` gives a module that maps token ids
    (batch, length <= context) to next-token logits (batch, length, vocab). Returns its URI; None,
    and nothing logged, under HEADSTUDY_MLFLOW_MODEL=0 (the run keeps model.pt as an artifact)."""
    if not logs_models():
        return None
    import torch  # here, not at the top: the stages that log no model need not import it
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


def log_study_report(artifacts: list[Path], summary: dict, headline: list[str]) -> str:
    """The report's files (a folder keeps its name) and its numbers (analysis.rendering.headline.report_metrics) on this
    study execution's parent run, its answer (a line per comparison) as the run's description; then close that run."""
    run_id = open_study_run()
    mlflow_client = client()
    from headstudy.analysis.rendering.headline import report_metrics

    metrics = report_metrics(summary)
    # At 4 significant digits, as a reader compares them: summary.json keeps the exact values.
    log_metrics(run_id, {key: significant(value) for key, value in metrics.items()})
    # The run's page shows its description on the first screen, about five lines of it before it
    # folds: the answer goes there, for a reader arriving from the printed link.
    if headline:
        mlflow_client.set_tag(run_id, MLFLOW_RUN_NOTE, "\n".join(f"- {line}" for line in headline))
    for path in map(Path, artifacts):
        if path.is_dir():
            mlflow_client.log_artifacts(run_id, str(path), path.name)
        else:
            mlflow_client.log_artifact(run_id, str(path))
    mlflow_client.set_tag(run_id, STUDY_STATE, "closed")
    leave_study_run(run_id)
    experiment = experiment_id(run_experiment())
    save_results_view(mlflow_client, experiment, dashboard_metrics(metrics))
    save_curves_view(mlflow_client, experiment)
    whose = "the study's" if in_pipeline() else f"the {BY_HAND_EXPERIMENT} experiment's"
    command = ui_command()
    opening = f"; `{command}`, then " if command else ": "
    print(f"report: logged to {whose} MLflow run {run_id}{opening}{ui_url(run_id)}")
    return run_id


TEST_METRICS = "test/"  # evaluate's metrics, on the test split: test/ppl, test/word_ppl


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    """NaN is what was not measured (the speed of a resumed training with no step left): not logged.
    Metrics named `test/...` are an evaluation of the run's logged model on the test split: they
    are also that model's metrics, with the test split as their dataset (evaluated_model), so
    that MLflow's model list can rank the trained models by test/ppl."""
    now = int(time.time() * 1000)
    measured = {key: float(value) for key, value in metrics.items() if not math.isnan(float(value))}
    evaluated = evaluated_model(run_id) if any(key.startswith(TEST_METRICS) for key in measured) else None
    batch = []
    for key, value in measured.items():
        if evaluated is not None and key.startswith(TEST_METRICS):
            model_id, dataset = evaluated
            batch.append(
                Metric(
                    key, value, now, step, model_id=model_id, dataset_name=dataset.name, dataset_digest=dataset.digest
                )
            )
        else:
            batch.append(Metric(key, value, now, step))
    client().log_batch(run_id, metrics=batch)


def evaluated_model(run_id: str) -> tuple[str, DatasetEntity] | None:
    """The run's logged model (the latest, should there be several) and the test split of its
    training dataset, which is logged as the run's input in the context `test`; None for a run
    with no logged model or no dataset (its metrics are then the run's alone).

    The test split's dataset is the training one (log_dataset: every split of the prepared data,
    named after it, with its digest) narrowed to the split: the same source and digest, which
    say which prepared data it is, named NAME-test."""
    run = client().get_run(run_id)
    outputs = sorted(run.outputs.model_outputs if run.outputs else [], key=lambda output: output.step)
    training = [
        used.dataset
        for used in (run.inputs.dataset_inputs if run.inputs else [])
        if {tag.key: tag.value for tag in used.tags}.get(MLFLOW_DATASET_CONTEXT) == "training"
    ]
    if not outputs or not training:
        return None
    dataset = only_test_split(training[-1])
    context = InputTag(key=MLFLOW_DATASET_CONTEXT, value="test")
    if (dataset.name, dataset.digest) not in {
        (used.dataset.name, used.dataset.digest) for used in run.inputs.dataset_inputs
    }:
        log_inputs_once(run_id, DatasetInput(dataset, tags=[context]))
    return outputs[-1].model_id, dataset


def only_test_split(prepared: DatasetEntity) -> DatasetEntity:
    """The test split alone of a prepared dataset as log_dataset logs it (from_numpy of every split)."""
    schema, profile = None, None
    try:
        spec = json.loads(prepared.schema)["mlflow_tensorspec"]
        features = [feature for feature in json.loads(spec["features"]) if feature.get("name") == "test"]
        schema = json.dumps({"mlflow_tensorspec": {**spec, "features": json.dumps(features)}})
        profile = json.dumps({key: {"test": value["test"]} for key, value in json.loads(prepared.profile).items()})
    except (TypeError, KeyError, ValueError, AttributeError):
        pass  # a dataset logged otherwise: named and sourced all the same
    return DatasetEntity(
        name=f"{prepared.name}-test",
        digest=prepared.digest,
        source_type=prepared.source_type,
        source=prepared.source,
        schema=schema,
        profile=profile,
    )


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
