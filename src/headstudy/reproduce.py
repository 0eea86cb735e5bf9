"""`headstudy reproduce RUN_ID [trainer.devices=N ...]`: retrain and re-evaluate a tracked run from
its logged config, in a temporary directory, and say whether the result is bit-identical. Keys
given after the run id change where it runs (a 2-process run on one process, say): its weights
may then differ in the last bits, and the comparison says so."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from headstudy.bookkeeping import provenance, store
from headstudy.common.errors import ConfigError, first_line
from headstudy.execution import kernels
from headstudy.formats.prepared import TOKENIZER_FILE, prepared_digest, sha256_file
from headstudy.settings.compose import validate

ENVIRONMENT_CAUSES = ("env.torch", "env.threads", "env.cpu_kind", "env.cpu_capability", "env.kernels")
# Where every run logged before conf/trainer named it trained: one CPU process, float32.
BEFORE_TRAINER_DEVICES = {
    "trainer": {
        "accelerator": "cpu",
        "devices": 1,
        "num_nodes": 1,
        "strategy": "auto",
        "precision": "32-true",
        "compile": False,
    }
}


def check_prepared_data(run, prepared: Path) -> None:
    recorded = run.data.tags
    if not (prepared / TOKENIZER_FILE).is_file():
        raise ConfigError(f"{prepared}/{TOKENIZER_FILE} not found: run `dvc repro prepare` first")
    tokenizer = sha256_file(prepared / TOKENIZER_FILE)
    if tokenizer != recorded.get("tokenizer.sha256"):
        raise ConfigError(
            f"{prepared}/{TOKENIZER_FILE} has sha256 {tokenizer}, run {run.info.run_id} "
            f"recorded {recorded.get('tokenizer.sha256')}: the tokenizer differs"
        )
    data = prepared_digest(prepared)
    if data != recorded.get("data.sha256"):
        raise ConfigError(
            f"{prepared}/ has sha256 {data}, run {run.info.run_id} recorded "
            f"{recorded.get('data.sha256')}: the prepared token data differs"
        )


def reproducible_run(run_id: str):
    """A finished training run: only that has the config and the result to compare against."""
    try:
        run = store.get_run(run_id)
    except LookupError as error:
        raise ConfigError(str(error)) from None
    status = run.info.status
    if status != "FINISHED":
        raise ConfigError(
            f"run {run_id} is {status}: only a finished training run has the config "
            "artifact and the weights to reproduce"
        )
    recorded_data = "data.path" in run.data.tags or "paths.prepared" in run.data.params
    if "weights.sha256" not in run.data.tags or not recorded_data:
        raise ConfigError(
            f"run {run_id} ({run.data.tags.get('mlflow.runName')}) is not a headstudy "
            "training run: it records no weights.sha256 or config"
        )
    return run


def environment_differences(run) -> dict[str, tuple[str, str]]:
    now = provenance.environment()
    return {
        key: (run.data.tags.get(key, "unrecorded"), value)
        for key, value in now.items()
        if run.data.tags.get(key) != value
    }


# Settings of where a run ran, which `reproduce` may change.
TOPOLOGY_KEYS = ("trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy", "threads")


def reproduce(run_id: str, topology: list[str] = ()) -> bool:
    from headstudy.evaluate import evaluate
    from headstudy.formats.trained import CONFIG_FILE
    from headstudy.train import train

    store.check_store()
    run = reproducible_run(run_id)
    # Runs record their data folder as the tag data.path (older ones as the param paths.prepared).
    check_prepared_data(run, Path(run.data.tags.get("data.path") or run.data.params["paths.prepared"]))
    with tempfile.TemporaryDirectory(prefix="headstudy-reproduce-") as scratch:
        scratch = Path(scratch)
        try:
            saved_config = store.download_artifact(run_id, CONFIG_FILE, scratch)
        except Exception as error:  # whatever the artifact store raises: the file is not there
            raise ConfigError(
                f"run {run_id} has no readable {CONFIG_FILE} artifact ({first_line(error)}): it cannot be reproduced"
            ) from None
        config = OmegaConf.merge(BEFORE_TRAINER_DEVICES, OmegaConf.load(saved_config))
        OmegaConf.set_struct(config, False)
        config.name = run.data.tags.get("mlflow.runName")
        config.threads = int(run.data.tags.get("env.threads", 1))
        config.paths = {"prepared": run.data.tags.get("data.path") or run.data.params["paths.prepared"]}
        for setting in topology:
            key, _, value = setting.partition("=")
            if key not in TOPOLOGY_KEYS:
                raise ConfigError(
                    f"reproduce: {key} is not a setting of where a run runs; expected one of {', '.join(TOPOLOGY_KEYS)}"
                )
            OmegaConf.update(config, key, yaml.safe_load(value) if value else value)
        if run.data.tags.get("env.kernels", "default") != "default":
            config.kernels = run.data.tags["env.kernels"]
        validate(config)
        kernels.select(kernels.chosen(config))  # torch is imported: this command starts again with them set
        import torch

        torch.set_num_threads(config.threads)  # as train sets it: the comparison below must see the same
        differences = environment_differences(run)
        for key, (then, now) in differences.items():
            print(f"reproduce: environment differs: {key} was {then!r}, is {now!r}")
        for key in ("models", "metrics", "checkpoints"):
            config.paths[key] = str(scratch / key)
        print(f"reproduce: retraining run {run_id} ({run.data.tags.get('mlflow.runName')})")
        record = train(config, extra_tags={"reproduces": run_id, "stage": "reproduce"})
        if record is None:  # another process of a DDP run: process 0 evaluates and compares
            return True
        metrics = evaluate(config, run_id=record["mlflow_run_id"])

    recorded_hash = run.data.tags.get("weights.sha256")
    recorded_ppl = run.data.metrics.get("test/ppl")
    same_weights = record["weights_sha256"] == recorded_hash
    same_ppl = metrics["test_ppl"] == recorded_ppl
    print(
        f"weights sha256: {'identical' if same_weights else 'different'}: "
        f"logged {recorded_hash}, now {record['weights_sha256']}"
    )
    print(f"test/ppl: {'identical' if same_ppl else 'different'}: logged {recorded_ppl!r}, now {metrics['test_ppl']!r}")
    if recorded_ppl and not same_ppl:
        print(f"test/ppl: relative difference {metrics['test_ppl'] / recorded_ppl - 1:+.2e}")
    if not (same_weights and same_ppl):
        causes = [key for key in ENVIRONMENT_CAUSES if key in differences]
        if causes:
            print(f"reproduce: likely cause: the environment differs in {', '.join(causes)}")
    return same_weights and same_ppl


def main(args: list[str]) -> None:
    if not args or "=" in args[0]:
        raise ConfigError("usage: headstudy reproduce RUN_ID [trainer.devices=N ...]")
    if not reproduce(args[0], args[1:]):
        sys.exit(1)
