"""Guards around the pipeline's outputs: checks made before any work, so that a command refused
here has changed nothing."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from headstudy.common.errors import ConfigError
from headstudy.execution.locks import exclusive
from headstudy.settings.compose import project_root

# The folders dvc.yaml writes, under the project root and under every studies/NAME folder.
PIPELINE_OUTPUTS = {
    "prepared": "data/prepared",
    "models": "models",
    "metrics": "metrics",
    "baselines": "metrics",
    "reports": "reports",
}


def refuse_pipeline_outputs(config: DictConfig, *keys: str) -> None:
    """Outside `dvc repro`, refuse to write where the pipeline keeps its outputs: a manual run
    with other settings would replace them under a name that then means something else.
    DVC sets DVC_STAGE for every stage it runs."""
    if "DVC_STAGE" in os.environ:
        return
    root = project_root()
    owners = [root, *sorted(path for path in (root / "studies").glob("*") if path.is_dir())]
    clashes = []
    for key in keys:
        target = Path(config.paths[key]).resolve()
        for owner in owners:
            output = (owner / PIPELINE_OUTPUTS[key]).resolve()
            if target == output or output in target.parents:
                clashes.append(key)
                break
    if clashes:
        given = " ".join(f"paths.{key}={config.paths[key]}" for key in clashes)
        wanted = " ".join(f"paths.{key}=..." for key in clashes)
        raise ConfigError(
            f"{given}: the pipeline's own output, written only by `dvc repro`; "
            f"for a run by hand pass {wanted} (another folder), or run `dvc repro`"
        )


def check_writable(*folders: Path, before: str = "training, which would fail only at its end") -> None:
    """Each folder, or the nearest one above it that exists, takes a file. Nothing is left behind:
    a command refused later for another reason has made no folder."""
    for folder in map(Path, folders):
        existing = next(path for path in (folder.absolute(), *folder.absolute().parents) if path.exists())
        try:
            with tempfile.NamedTemporaryFile(dir=existing, prefix=".headstudy-write-check-"):
                pass
        except OSError as error:
            raise ConfigError(
                f"{folder} cannot be written ({error.strerror or error}): free it or point "
                f"paths.* elsewhere before {before}"
            ) from None


def stage_output_folders(command: str, config: DictConfig) -> list[Path]:
    """The folders a stage writes into. A folder that is replaced whole (the prepared data) is
    written beside it and emptied, so it and the folder that holds it must both take files."""
    paths = config.get("paths") or {}
    if command == "prepare":
        prepared = Path(paths.prepared)
        return [prepared, prepared.parent]
    if command == "baselines":
        return [Path(paths.baselines).parent]
    if command in ("evaluate", "score", "ablate", "answers"):
        return [Path(paths.metrics)]
    if command == "diagnose":
        return [Path(paths.metrics) / "diagnostics"]
    if command in ("inspect", "report", "cliff"):
        reports = Path(paths.reports)
        return [reports, reports / "figures"] + ([reports / "figures" / "heads"] if command == "inspect" else [])
    return []


def check_stage_outputs(command: str, config: DictConfig) -> None:
    """Before a stage does any work, as train checks its own: a folder that cannot be written
    would otherwise fail with a traceback once the work is done."""
    check_writable(*stage_output_folders(command, config), before=f"{command} does its work")


@contextmanager
def only_training_of(resume_folder: Path) -> Iterator[None]:
    """One process at a time trains a given model with given settings: a second one started
    beside it would share its checkpoint folder and MLflow run. Refused at once, not queued."""
    lock = Path(resume_folder).with_name(Path(resume_folder).name + ".lock")
    with exclusive(
        lock,
        0,  # refused at once, never queued
        unmade=lambda reason: f"{lock} cannot be created ({reason}): free it or point paths.* elsewhere",
        held=lambda: f"another process is training this model with these settings now ({lock} is "
        "locked): wait for it to finish",
        remove=True,  # no waiter can hold it: a second training is refused, not queued
    ):
        try:
            yield
        except BaseException:
            run_id_file = Path(resume_folder) / "mlflow_run_id"
            if run_id_file.is_file():
                from headstudy.bookkeeping import tracking

                # Lightning ends a completed fit's run FINISHED; what failed after it (writing the
                # model, logging it) must not leave a run that looks done.
                tracking.mark_failed_if_finished(run_id_file.read_text().strip())
            raise
