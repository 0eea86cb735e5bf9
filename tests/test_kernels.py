"""A second rounding of the same training on one machine: the variant `H-avx2` is variant H's model,
at H's learning rate, computed with PyTorch's CPU kernels pinned to AVX2 (execution/kernels.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from headstudy.settings.compose import compose_config, stage_config


def test_a_rounding_of_a_variant_trains_at_the_rate_selected_for_that_variant(in_project):
    params = {"study": {"rates": "stabilised-tuning"}}
    plain = compose_config(["variant=1"], params)
    rounded = compose_config(["variant=1-avx2"], params)
    assert rounded.optimizer.lr == plain.optimizer.lr == 0.012
    assert rounded.kernels == "avx2" and rounded.model == plain.model


def test_a_training_config_names_its_kernels_only_where_the_study_chose_them(in_project):
    assert "kernels" not in stage_config("train", compose_config(["variant=1"], {}))
    assert stage_config("train", compose_config(["variant=1-avx2"], {})).kernels == "avx2"


def trained(variant: str, small_corpus: list[str], folder: Path) -> tuple[str, str]:
    """The weights' sha256 and the kernels the training reported, of 30 tiny steps."""
    folder.mkdir()
    done = subprocess.run(
        [
            "headstudy",
            "train",
            *small_corpus,
            "model=tiny",
            f"variant={variant}",
            "threads=1",
            "trainer.max_steps=30",
            "trainer.val_every_steps=30",
            f"paths.models={folder / 'models'}",
            f"paths.metrics={folder / 'metrics'}",
            f"paths.checkpoints={folder / 'checkpoints'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**subprocess.os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"},
    )
    assert done.returncode == 0, done.stderr
    [record] = (folder / "models").glob("*/run.json")
    return json.loads(record.read_text())["weights_sha256"], done.stdout


@pytest.mark.slow
def test_the_avx2_variant_computes_with_avx2_kernels_and_rounds_otherwise_where_the_cpu_has_avx512(
    small_corpus, tmp_path
):
    plain, _ = trained("1", small_corpus, tmp_path / "plain")
    pinned, _ = trained("1-avx2", small_corpus, tmp_path / "pinned")
    again, _ = trained("1-avx2", small_corpus, tmp_path / "again")
    assert pinned == again  # deterministic run to run
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        assert pinned != plain
