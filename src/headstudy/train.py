"""Stage `train`: one model of the study (configs/train/NAME.yaml), tracked as one MLflow run,
nested under the parent run of the study execution when DVC runs it.

A kill midway loses at most one validation interval: the next `dvc repro` resumes from the
last checkpoint under paths.checkpoints and continues the same MLflow run. The model folder and
the validation curve come from the training alone; MLflow only watches.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from headstudy.bookkeeping import provenance, store, tracking
from headstudy.bookkeeping.progress import quiet_routine_warnings
from headstudy.bookkeeping.training_bar import Throughput, watchers
from headstudy.common.files import write_atomically, write_failed
from headstudy.execution import guards, kernels
from headstudy.formats.prepared import TOKENIZER_FILE, check_training_data, load_tokens, sha256_file
from headstudy.formats.runconfig import config_digest
from headstudy.formats.trained import data_record, model_dir, settings_text, training_record
from headstudy.settings.training import diverged, start_training
from headstudy.weights.model import Decoder
from headstudy.weights.recipe import Training
from headstudy.weights.saved import CONFIG_FILE, MODEL_FILE, write_model
from headstudy.weights.training import ResumeCheckpoint, TrainingDiverged


def abandon_stale_resumes(checkpoints: Path, name: str, keep: Path) -> None:
    """Resume state of this model under another config can never be used: close its run."""
    for stale in checkpoints.glob(f"{name}-*"):
        if stale != keep and stale.is_dir():
            run_id_file = stale / "mlflow_run_id"
            if run_id_file.is_file():
                tracking.mark_killed(run_id_file.read_text().strip())
            shutil.rmtree(stale)


def train(config: DictConfig, extra_tags: dict | None = None) -> dict | None:
    """Train one model; on process 0 return what it recorded. Under DDP the other processes
    run this same function, train their slice of every batch and return None: only process 0
    talks to MLflow and writes the model, the curve and the resume state's run id."""
    kernels.check_in_force(kernels.chosen(config))
    guards.refuse_pipeline_outputs(config, "models", "metrics")
    resume_folder = resume_dir(config)
    # Before any work: a folder that cannot be written would otherwise fail after the training.
    guards.check_writable(Path(config.paths.models), Path(config.paths.metrics) / "curves", resume_folder.parent)
    prepared = Path(config.paths.prepared)
    check_training_data(prepared, config.model.vocab_size, config.model.context)
    store.check_store()  # before any work, so that a store that cannot be opened is the only message
    quiet_routine_warnings()
    resume_checkpoint = resume_folder / "last.ckpt"
    throughput = Throughput(config.data.batch_size * config.model.context)
    training = start_training(
        config,
        load_tokens(prepared, "train"),
        load_tokens(prepared, "valid"),
        [ResumeCheckpoint(resume_checkpoint), *watchers(throughput)],
    )
    if not training.trainer.is_global_zero:  # started by process 0, after it settled whether to resume
        training.fit(resume_checkpoint if resume_checkpoint.is_file() else None)
        return None

    # Only a stage that DVC runs belongs to a study execution; a manual or reproducing run stands alone.
    study_run_id = tracking.open_study_run() if provenance.in_pipeline() else None
    try:
        with guards.only_training_of(resume_folder):  # the same model started twice: the second is refused
            return train_on_process_zero(config, extra_tags or {}, study_run_id, resume_folder, training, throughput)
    finally:
        if study_run_id:
            tracking.leave_study_run(study_run_id)


def resume_dir(config: DictConfig) -> Path:
    return Path(config.paths.checkpoints) / f"{config.name}-{config_digest(config)}"


def train_on_process_zero(
    config: DictConfig,
    extra_tags: dict,
    study_run_id: str | None,
    resume_folder: Path,
    training: Training,
    throughput: Throughput,
) -> dict:
    trainer, module = training.trainer, training.module
    prepared = Path(config.paths.prepared)
    data = data_record(prepared)
    name = config.name
    resume_checkpoint = resume_folder / "last.ckpt"
    abandon_stale_resumes(resume_folder.parent, name, keep=resume_folder)
    run_id_file = resume_folder / "mlflow_run_id"
    previous_run_id = run_id_file.read_text().strip() if run_id_file.is_file() else None
    resuming = previous_run_id is not None and resume_checkpoint.is_file()
    if not resuming:  # killed before its first checkpoint, or never run: start afresh
        if previous_run_id:
            tracking.mark_killed(previous_run_id)
        resume_checkpoint.unlink(missing_ok=True)
    logger = tracking.training_logger(previous_run_id if resuming else None, name, study_run_id)
    run_id = logger.run_id
    resume_folder.mkdir(parents=True, exist_ok=True)
    run_id_file.write_text(run_id)
    if not resuming:
        tracking.record_provenance(
            run_id,
            config,
            {
                "stage": os.environ.get("DVC_STAGE", "manual"),
                "data.path": str(config.paths.prepared),
                "data.sha256": data["data_sha256"],
                "data.dvc_md5": provenance.dvc_locked_md5(prepared),
                "tokenizer.sha256": sha256_file(prepared / TOKENIZER_FILE),
                "processes": str(trainer.world_size),
                **extra_tags,
            },
            resume_folder,
        )
        tracking.log_dataset(run_id, prepared, f"{config.data.corpus}-prepared", data["data_sha256"])
    else:
        print(f"train: resuming {name} from {resume_checkpoint} (MLflow run {run_id})")

    trainer.logger = logger
    try:
        training.fit(resume_checkpoint if resuming else None)
    except TrainingDiverged as error:
        shutil.rmtree(resume_folder)  # Lightning marked the run FAILED; resuming would diverge again
        raise diverged(error, config.trainer.precision) from None
    except (KeyboardInterrupt, SystemExit) as stop:
        # Lightning ends a SIGTERM (a scheduler's preemption) in a SystemExit that would exit 0,
        # and Ctrl-C in sys.exit(1): both are interruptions, resumable from the last checkpoint.
        tracking.mark_killed(run_id)
        print(f"train: {name} interrupted; `dvc repro` resumes it from {resume_checkpoint}", file=sys.stderr)
        raise SystemExit(143 if isinstance(stop, SIGTERMException) else 130) from None

    model = module.model.cpu()
    record = training_record(config, model, data)
    write_trained_model(config, model, record)
    write_curve(config, module.validation_curve)
    tracking.log_metrics(
        run_id,
        # Not `params`: in MLflow that word means the run's settings.
        {"model/parameter_count": record["params"], "train/tokens_per_sec": throughput.tokens_per_sec},
        step=trainer.global_step,
    )
    tracking.set_tags(run_id, {"weights.sha256": record["weights_sha256"]})
    for artifact in (CONFIG_FILE, MODEL_FILE):
        tracking.log_artifact(run_id, model_dir(config) / artifact)
    tracking.log_model(run_id, model, name, config.model.context, config.model.vocab_size, trainer.global_step)
    shutil.rmtree(resume_folder)
    print(
        f"train: {name}: {throughput.tokens_per_sec:,.0f} tokens/s, weights {record['weights_sha256'][:12]}, "
        f"model in {model_dir(config)}"
    )
    if not provenance.in_pipeline():  # in a study the report stage gives the study run's address, once
        print(f"train: MLflow run {store.ui_url(run_id)}")
    return {**record, "mlflow_run_id": run_id, "tokens_per_sec": throughput.tokens_per_sec}


def write_trained_model(config: DictConfig, model: Decoder, record: dict) -> None:
    """A model that cannot be written (a full disk) leaves no staging folder behind (write_model
    removes it) and fails in one line; its resume state is kept, so the same command, once there
    is space, only writes the model. torch.save reports a full disk as a RuntimeError."""
    directory = model_dir(config)
    try:
        write_model(directory, model, settings_text(config), record)
    except (OSError, RuntimeError) as error:
        raise write_failed(
            f"the model to {directory}",
            directory.parent,
            error,
            "once it can be written, the same command resumes from the last checkpoint and only writes the model",
        ) from None


def write_curve(config: DictConfig, history: list[tuple[int, float]]) -> None:
    """Validation perplexity against training tokens, as the training recorded it (a resumed
    run's curve holds the points from before the kill too)."""
    path = Path(config.paths.metrics) / "curves" / f"{config.name}.csv"
    tokens_per_step = config.data.batch_size * config.model.context
    lines = ["step,tokens,val_ppl"] + [f"{step},{step * tokens_per_step},{ppl!r}" for step, ppl in history]
    write_atomically(path, "\n".join(lines) + "\n")


def main(config: DictConfig) -> None:
    train(config)
