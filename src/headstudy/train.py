"""Stage `train`: one model for one (head count, seed), tracked as one MLflow run.

A kill midway loses at most one validation interval: the next `dvc repro` resumes from the
last checkpoint under paths.checkpoints and continues the same MLflow run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig

from headstudy.core import jobs, tracking
from headstudy.core.config import compose_config, config_digest, model_config, run_name
from headstudy.core.data import TOKENIZER_FILE, prepared_digest, sha256_file
from headstudy.core.model import Decoder, weights_sha256
from headstudy.core.trained import CONFIG_FILE, MODEL_FILE, model_dir, write_model
from headstudy.core.training import (
    LanguageModelModule,
    ResumeCheckpoint,
    Throughput,
    TokenDataModule,
    build_trainer,
)


def abandon_stale_resumes(checkpoints: Path, name: str, keep: Path) -> None:
    """Resume state of this model under another config can never be used: close its run."""
    for stale in checkpoints.glob(f"{name}-*"):
        if stale != keep and stale.is_dir():
            run_id_file = stale / "mlflow_run_id"
            if run_id_file.is_file():
                tracking.mark_killed(run_id_file.read_text().strip())
            shutil.rmtree(stale)


def train(config: DictConfig, overrides: list[str], extra_tags: dict | None = None) -> dict | None:
    """Train one model; on process 0 return what it recorded. Under DDP the other processes
    run this same function, train their slice of every batch and return None: only process 0
    talks to MLflow and writes the model, the curve and the resume state's run id."""
    torch.set_num_threads(jobs.torch_threads(config.threads))
    L.seed_everything(config.seed, workers=True)
    name = run_name(config)
    prepared = Path(config.paths.prepared)
    resume_dir = Path(config.paths.checkpoints) / f"{name}-{config_digest(config)}"
    resume_checkpoint = resume_dir / "last.ckpt"
    throughput = Throughput(config.data.batch_size * config.model.context)
    trainer = build_trainer(config, [ResumeCheckpoint(resume_checkpoint), throughput])
    model = Decoder(model_config(config))
    datamodule = TokenDataModule(
        prepared,
        config.data.batch_size,
        config.model.context,
        config.seed,
        config.trainer.val_every_steps,
    )
    module = LanguageModelModule(model, config.optimizer, config.trainer.max_steps, config.trainer.compile)
    if not trainer.is_global_zero:  # started by process 0, after it settled whether to resume
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_checkpoint if resume_checkpoint.is_file() else None)
        return None

    abandon_stale_resumes(resume_dir.parent, name, keep=resume_dir)
    run_id_file = resume_dir / "mlflow_run_id"
    previous_run_id = run_id_file.read_text().strip() if run_id_file.is_file() else None
    resuming = previous_run_id is not None and resume_checkpoint.is_file()
    if not resuming:  # killed before its first checkpoint, or never run: start afresh
        if previous_run_id:
            tracking.mark_killed(previous_run_id)
        resume_checkpoint.unlink(missing_ok=True)
    logger = tracking.training_logger(previous_run_id if resuming else None, name)
    run_id = logger.run_id
    resume_dir.mkdir(parents=True, exist_ok=True)
    run_id_file.write_text(run_id)
    if not resuming:
        tracking.record_provenance(
            run_id,
            config,
            {
                "stage": os.environ.get("DVC_STAGE", "manual"),
                "overrides": " ".join(overrides),
                "data.sha256": prepared_digest(prepared),
                "data.dvc_md5": dvc_locked_md5(prepared),
                "tokenizer.sha256": sha256_file(prepared / TOKENIZER_FILE),
                "processes": str(trainer.world_size),
                **(extra_tags or {}),
            },
            resume_dir,
        )
    else:
        print(f"train: resuming {name} from {resume_checkpoint} (MLflow run {run_id})")

    trainer.logger = logger
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_checkpoint if resuming else None)

    record = {
        "name": name,
        "variant": config.variant,
        "heads": config.model.n_heads,
        "seed": config.seed,
        "params": sum(p.numel() for p in model.parameters()),
        "mlflow_run_id": run_id,
        "weights_sha256": weights_sha256(model),
        "tokens_per_sec": throughput.tokens_per_sec,
    }
    write_model(model_dir(config), model.cpu(), config, record)
    write_curve(config, tracking.metric_history(run_id, "val/ppl"))
    tracking.log_metrics(
        run_id,
        {"params": record["params"], "train/tokens_per_sec": record["tokens_per_sec"]},
        step=trainer.global_step,
    )
    tracking.set_tags(run_id, {"weights.sha256": record["weights_sha256"]})
    for artifact in (CONFIG_FILE, MODEL_FILE):
        tracking.log_artifact(run_id, model_dir(config) / artifact)
    shutil.rmtree(resume_dir)
    print(f"train: {name}: {record['tokens_per_sec']:,.0f} tokens/s, weights {record['weights_sha256'][:12]}")
    return record


def write_curve(config: DictConfig, history: list[tuple[int, float]]) -> None:
    """Validation perplexity against training tokens, read back from the run: a resumed run's
    curve holds the points from before the kill too."""
    path = Path(config.paths.metrics) / "curves" / f"{run_name(config)}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens_per_step = config.data.batch_size * config.model.context
    lines = ["step,tokens,val_ppl"] + [f"{step},{step * tokens_per_step},{ppl!r}" for step, ppl in history]
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)


def dvc_locked_md5(prepared: Path) -> str:
    """The prepared data's md5 as dvc.lock records it, if the pipeline has run."""
    import yaml

    lock = Path("dvc.lock")
    if not lock.is_file():
        return "none"
    for stage in yaml.safe_load(lock.read_text()).get("stages", {}).values():
        for out in stage.get("outs", []):
            if Path(out["path"]) == prepared:
                return out.get("md5", "none")
    return "none"


def main(overrides: list[str]) -> None:
    train(compose_config(overrides), overrides)
