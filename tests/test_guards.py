"""Bad input and faults, tried as a careless user would. Each one stops with one line that names
the key or file and what was expected, exits 2, leaves nothing half-written, no MLflow run
RUNNING and no NaN in any result. On a tiny text corpus, a tiny model and a real MLflow store,
through headstudy.cli.main in this process (conftest's `headstudy_here`); through the installed
`headstudy` command where the process is what a test checks: a signal, a training running while
another process starts the same one, a full disk in a mount namespace of its own."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, assert_nothing_half_written, assert_refused, default_signals, headstudy_here
from mlflow.tracking import MlflowClient

from headstudy.common.errors import ConfigError
from headstudy.common.files import write_json

DATA = ["data=textdir", "data.dir=corpus", "data.vocab_size=300", "paths.prepared=prepared"]
# One thread: another test file may be training beside this one.
TINY = ["model=tiny", "threads=1", "trainer.max_steps=20", "trainer.val_every_steps=10"]
WORDS = "the cat sat on a mat dog ran after bird sang wet street animal crossed at night".split()


def write_corpus(folder: Path, lines: int = 600) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    text = "\n".join(" ".join(rng.choice(WORDS, 12)) for _ in range(lines))
    (folder / "a.txt").write_text(text + "\n")


def runs(work: Path) -> list:
    """Every run of the store: a study's, and those by hand (their own experiment)."""
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiments = [client.get_experiment_by_name(name) for name in ("headstudy", "headstudy-by-hand")]
    ids = [experiment.experiment_id for experiment in experiments if experiment]
    return client.search_runs(ids) if ids else []


def assert_no_run_running(work: Path) -> None:
    assert not [run.info.run_name for run in runs(work) if run.info.status == "RUNNING"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder with a text corpus and its prepared data (300-token BPE)."""
    folder = tmp_path_factory.mktemp("guards")
    write_corpus(folder / "corpus")
    result = headstudy_here(folder, "prepare", *DATA)
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def trained(work) -> Path:
    """One tiny model of 20 steps (the README's small budget), trained by hand into models/."""
    result = headstudy_here(work, "train", *DATA, *TINY)
    assert result.returncode == 0, result.stderr
    return work / "models" / "h1-s0"


@pytest.fixture(scope="module")
def diverged(work) -> subprocess.CompletedProcess:
    return headstudy_here(work, "train", *DATA, *TINY, "seed=7", "optimizer.lr=1000")


def copy_prepared(work: Path, name: str) -> Path:
    copy = work / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(work / "prepared", copy)
    return copy


# Silent wrong results


@pytest.mark.slow
def test_divergence_stops_training_naming_the_step_and_the_learning_rate(work, diverged):
    line = assert_refused(diverged, "train", "training diverged", "at step", "optimizer.lr=1000")
    assert "train/loss is nan" in line or "train/loss is inf" in line or "val/ppl is inf" in line
    assert not (work / "models" / "h1-s7").exists()
    assert not (work / "metrics" / "curves" / "h1-s7.csv").exists()
    assert not list((work / "checkpoints").glob("h1-s7-*"))
    [run] = [run for run in runs(work) if run.info.run_name == "h1-s7"]
    assert run.info.status == "FAILED"
    assert_no_run_running(work)
    assert_nothing_half_written(work)


@pytest.mark.slow
def test_reproduce_refuses_a_failed_run(work, diverged):
    [failed] = [run for run in runs(work) if run.info.run_name == "h1-s7"]
    before = len(runs(work))
    assert_refused(headstudy_here(work, "reproduce", failed.info.run_id), "reproduce", failed.info.run_id, "FAILED")
    assert len(runs(work)) == before


@pytest.mark.slow
def test_evaluate_refuses_a_model_trained_with_other_settings(work, trained):
    result = headstudy_here(work, "evaluate", *DATA, *TINY, "model.width=64", "paths.metrics=metrics-wide")
    assert_refused(result, "evaluate", "models/h1-s0/config.yaml", "model.width (saved 32, requested 64)")
    assert not (work / "metrics-wide").exists()

    swapped = work / "swapped"
    shutil.copytree(trained, swapped / "h1-s1")  # h1-s0's model under the name of seed 1
    result = headstudy_here(
        work, "evaluate", *DATA, *TINY, "seed=1", f"paths.models={swapped}", "paths.metrics=metrics-swapped"
    )
    assert_refused(result, "evaluate", "swapped/h1-s1/config.yaml", "seed (saved 0, requested 1)")
    assert not (work / "metrics-swapped").exists()


@pytest.mark.slow
def test_evaluate_refuses_prepared_data_other_than_the_training_data(work, trained):
    tampered = copy_prepared(work, "prepared-tampered")
    test = np.load(tampered / "test.npy")
    test[10] = test[11]  # still valid token ids: only the hash can tell
    np.save(tampered / "test.npy", test)
    result = headstudy_here(
        work, "evaluate", *DATA, *TINY, f"paths.prepared={tampered}", "paths.metrics=metrics-tampered"
    )
    assert_refused(result, "evaluate", f"{tampered}/test.npy", "models/h1-s0/run.json")
    assert not (work / "metrics-tampered").exists()


@pytest.mark.slow
def test_evaluate_writes_only_deterministic_metrics_and_logs_to_the_training_run(work, trained):
    result = headstudy_here(work, "evaluate", *DATA, *TINY)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((work / "metrics" / "h1-s0.json").read_text())
    # Numbers only, so that `dvc metrics show` tabulates them; the name and the hash are in run.json.
    assert set(metrics) == {
        "heads",
        "seed",
        "params",
        "lr",
        "test_ppl",
        "test_nll",
        "test_tokens_predicted",
        "test_word_ppl",
    }
    record = json.loads((work / "models" / "h1-s0" / "run.json").read_text())
    [run] = [run for run in runs(work) if run.data.tags.get("weights.sha256") == record["weights_sha256"]]
    assert run.data.metrics["test/ppl"] == metrics["test_ppl"]
    assert_nothing_half_written(work)


@pytest.mark.slow
def test_model_folder_holds_only_content_that_a_retrain_reproduces(work, trained):
    record = json.loads((trained / "run.json").read_text())
    assert set(record) == {
        "name",
        "variant",
        "heads",
        "seed",
        "lr",
        "params",
        "weights_sha256",
        "data_sha256",
        "data_files",
    }
    assert set(record["data_files"]) == {"stats.json", "tokenizer.json", "train.npy", "valid.npy", "test.npy"}
    first = {path.name: path.read_bytes() for path in trained.iterdir()}
    result = headstudy_here(work, "train", *DATA, *TINY)  # the same model again, in the same place
    assert result.returncode == 0, result.stderr
    assert {path.name: path.read_bytes() for path in trained.iterdir()} == first
    assert len([run for run in runs(work) if run.info.run_name == "h1-s0"]) == 2  # the runs live in MLflow


@pytest.mark.slow
def test_tiny_budgets_train(work):
    for steps, every in ((1, 1), (3, 1)):
        result = headstudy_here(
            work,
            "train",
            *DATA,
            "model=tiny",
            "threads=1",
            f"seed={10 + steps}",
            f"trainer.max_steps={steps}",
            f"trainer.val_every_steps={every}",
        )
        assert result.returncode == 0, result.stderr
        assert (work / "models" / f"h1-s{10 + steps}" / "model.pt").is_file()
    assert_nothing_half_written(work)


@pytest.mark.slow
def test_train_refuses_a_vocabulary_other_than_the_prepared_tokenizer(work):
    before = len(runs(work))
    result = headstudy_here(work, "train", *DATA, *TINY, "seed=30", "data.vocab_size=1024")
    assert_refused(result, "train", "model.vocab_size=1024", "300 tokens", "data.vocab_size=300")
    assert not (work / "models" / "h1-s30").exists()
    assert len(runs(work)) == before


def test_prepare_refuses_a_vocabulary_the_bpe_cannot_reach(work):
    result = headstudy_here(work, "prepare", *DATA, "data.vocab_size=70000", "paths.prepared=prepared-big")
    line = assert_refused(result, "prepare", "data.vocab_size=70000", "stops at")
    reached = int(line.split("stops at ")[1].split()[0])
    assert 300 <= reached < 70000
    assert not list(work.glob("prepared-big*"))


def test_manual_runs_refuse_the_pipeline_outputs(tmp_path, work):
    project = tmp_path / "project"  # a project of its own: conf/ makes its folder the root
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "studies" / "budget").mkdir(parents=True)
    env = {"HEADSTUDY_CONF": str(project / "conf"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}
    prepared = f"paths.prepared={work / 'prepared'}"
    cases = [
        (project, ["train", prepared], ["paths.models=models", "paths.metrics=metrics"]),
        (project, ["evaluate", prepared], ["paths.metrics=metrics"]),
        (project, ["prepare"], ["paths.prepared=data/prepared"]),
        (project / "studies" / "budget", ["train", prepared], ["paths.models=models"]),
    ]
    for cwd, args, names in cases:
        line = assert_refused(headstudy_here(cwd, *args, **env), args[0], *names, "dvc repro")
        assert "pass paths." in line
    assert sorted(path.name for path in project.iterdir()) == ["conf", "studies"]
    assert not (tmp_path / "m.db").exists()

    # Under DVC (which sets DVC_STAGE for every stage) the same command writes its output.
    result = headstudy_here(project, "baselines", *DATA[:-1], prepared, DVC_STAGE="baselines", **env)
    assert result.returncode == 0, result.stderr
    assert (project / "metrics" / "baselines.json").is_file()


# Crashes that must be clear errors


def test_train_refuses_a_train_split_shorter_than_the_context(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "short.txt").write_text("ab\n" * 10)
    data = [
        "data=textdir",
        "data.dir=corpus",
        "data.vocab_size=257",
        "paths.prepared=prepared",
        "data.valid_fraction=0.1",
        "data.test_fraction=0.1",
    ]
    assert headstudy_here(tmp_path, "prepare", *data).returncode == 0
    result = headstudy_here(tmp_path, "train", *data, *TINY)
    assert_refused(result, "train", "prepared/train.npy holds", "model.context=32")
    assert not (tmp_path / "models").exists() and not (tmp_path / "mlflow.db").exists()


def test_prepare_refuses_a_binary_file_named_txt(tmp_path):
    write_corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "b.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    result = headstudy_here(tmp_path, "prepare", *DATA)
    assert_refused(result, "prepare", "corpus/b.txt is not UTF-8 text", "data.dir")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus"]


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def pickled(path: Path) -> None:
    np.save(path, np.array([{"ids": [1, 2, 3]}], dtype=object), allow_pickle=True)


def not_npy(path: Path) -> None:
    path.write_bytes(b"this is not a numpy file at all")


def floats(path: Path) -> None:
    np.save(path, np.load(path).astype(np.float32))


def ids_out_of_range(path: Path) -> None:
    tokens = np.load(path)
    tokens[5] = 5000
    np.save(path, tokens)


@pytest.mark.parametrize(
    "damage, expected",
    [
        (truncated, "is not a readable .npy token array"),
        (pickled, "is not a readable .npy token array"),
        (not_npy, "is not a readable .npy token array"),
        (floats, "expected one row of integer token ids"),
        (ids_out_of_range, "holds token id 5000, but the tokenizer has 300 tokens"),
    ],
)
def test_damaged_token_files_are_refused_naming_the_file(work, damage, expected):
    prepared = copy_prepared(work, f"prepared-{damage.__name__}")
    damage(prepared / "train.npy")
    settings = [f"paths.prepared={prepared}", f"paths.metrics=metrics-{damage.__name__}"]
    result = headstudy_here(work, "baselines", *DATA, *settings)
    assert_refused(result, "baselines", f"{prepared}/train.npy", expected)
    assert not (work / f"metrics-{damage.__name__}").exists()


@pytest.mark.slow
def test_a_tracking_store_that_cannot_be_opened_is_one_line(work, tmp_path):
    store = tmp_path / "not-a-store.db"
    store.write_text("this is not an SQLite database\n")
    uri = f"sqlite:///{store}"
    result = headstudy_here(work, "train", *DATA, *TINY, "seed=40", MLFLOW_TRACKING_URI=uri)
    assert_refused(result, "train", "cannot open the MLflow store", uri, "MLFLOW_TRACKING_URI")
    assert len(result.stderr.strip().splitlines()) <= 3
    assert not (work / "models" / "h1-s40").exists()


def test_json_writer_refuses_non_finite_numbers(tmp_path):
    path = tmp_path / "metrics.json"
    with pytest.raises(ConfigError, match=r"metrics.json: refusing .*test_ppl=nan, rows.0.ppl=inf"):
        write_json(path, {"test_ppl": math.nan, "rows": [{"ppl": math.inf}], "name": "h1-s0"})
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_empty_or_repeated_study_is_refused_before_any_stage_runs(tmp_path):
    """DVC itself expands an empty matrix list to no stages and a repeated value to one stage,
    silently: the first stage that runs refuses the study."""
    project = tmp_path / "study"
    project.mkdir()
    shutil.copy(ROOT / "dvc.yaml", project)
    for folder in ("conf", "src", "corpus"):
        shutil.copytree(ROOT / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=project, env=env, check=True)
    for key, values, message in (
        ("variants", [], "study.variants in params.yaml must be a non-empty list of variants, got []"),
        ("seeds", [0, 1, 0], "study.seeds in params.yaml lists 0 more than once"),
    ):
        study = {**params["study"], key: values}
        (project / "params.yaml").write_text(yaml.safe_dump({**params, "study": study}))
        result = subprocess.run(["dvc", "repro"], cwd=project, env=env, capture_output=True, text=True)
        assert result.returncode != 0
        assert f"headstudy configure: error: {message}" in result.stderr + result.stdout
        assert "Traceback" not in result.stderr + result.stdout
        assert not (project / "data" / "prepared").exists()


# Every study states a budget that validates (configure refuses one that does not, and composes the
# models before it reads the report): the cases below break something else.
BUDGET = {"max_steps": 20, "val_every_steps": 10}


@pytest.mark.parametrize(
    "params, named",
    [
        ({"study": {"variants": [1], "seeds": [0]}, "trainer": BUDGET}, "expected a `report:` section with a title"),
        (
            {"study": {"variants": [1], "seeds": [0]}, "trainer": BUDGET, "report": {"compare": []}},
            "report.title in params.yaml is missing: expected the report's title",
        ),
        (
            {
                "study": {"variants": [1], "seeds": [0]},
                "trainer": BUDGET,
                "report": {"title": "t", "seed_claim": {"a": 1, "b": 4}},
            },
            "report.seed_claim in params.yaml is now report.chapter_claim",
        ),
        (
            {
                "study": {"variants": [1], "seeds": [0]},
                "trainer": BUDGET,
                "report": {"title": "t", "pool_if_variance_ratio_below": "4"},
            },
            "report.pool_if_variance_ratio_below in params.yaml must be a number above 1",
        ),
        (
            {
                "study": {"variants": [1], "seeds": [0]},
                "trainer": BUDGET,
                "report": {"title": "t"},
                "optimizer": {"lr": ".nan"},
            },
            "optimizer.lr must be a finite positive number",
        ),
        (
            {
                "study": {"variants": [1], "seeds": [0]},
                "trainer": BUDGET,
                "report": {"title": "t"},
                "optimizer": {"weight_decay": -1},
            },
            "optimizer.weight_decay must be a finite number >= 0",
        ),
        (
            {
                "study": {"variants": [1], "seeds": [0]},
                "trainer": BUDGET,
                "report": {"title": "t"},
                "optimizer": {"betas": [2, 3]},
            },
            "optimizer.betas must be two numbers in [0, 1)",
        ),
        (
            {"study": {"variants": [1], "seeds": [0]}, "report": {"title": "t"}, "trainer": {"max_steps": "abc"}},
            "trainer.max_steps",
        ),
    ],
)
def test_configure_refuses_a_bad_study_in_one_line_and_writes_nothing(tmp_path, params, named):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert_refused(headstudy_here(tmp_path, "configure"), "configure", named)
    assert not (tmp_path / "configs").exists()


@pytest.mark.slow
def test_evaluate_refuses_weights_changed_after_training(work, trained):
    import torch

    tampered = work / "tampered-models" / "h1-s0"
    shutil.copytree(trained, tampered)
    saved = torch.load(tampered / "model.pt", weights_only=True)
    first = next(iter(saved["state_dict"]))
    saved["state_dict"][first] = saved["state_dict"][first] * 2  # still loads, scores something else
    torch.save(saved, tampered / "model.pt")
    result = headstudy_here(
        work, "evaluate", *DATA, *TINY, f"paths.models={tampered.parent}", "paths.metrics=metrics-tampered"
    )
    assert_refused(result, "evaluate", "tampered-models/h1-s0/model.pt", "run.json records")
    assert not (work / "metrics-tampered").exists()


def test_prepare_refuses_a_zero_filled_file_named_txt(tmp_path):
    write_corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "zeros.txt").write_bytes(b"\0" * 4096)
    result = headstudy_here(tmp_path, "prepare", *DATA)
    assert_refused(result, "prepare", "corpus/zeros.txt holds NUL bytes")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus"]


def start_training(work: Path, seed: int) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "DVC_STAGE"}
    env.update({"HEADSTUDY_CONF": str(ROOT / "conf"), "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"})
    return subprocess.Popen(
        [
            "headstudy",
            "train",
            *DATA,
            "model=tiny",
            "threads=1",
            f"seed={seed}",
            "trainer.max_steps=4000",
            "trainer.val_every_steps=20",
        ],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # the test sends it SIGTERM: it must not inherit the signal ignored
    )


def wait_for_checkpoint(work: Path, name: str, training: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 120
    while not list((work / "checkpoints").glob(f"{name}-*/last.ckpt")):
        assert training.poll() is None, training.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_exits_non_zero_marks_the_run_killed_and_keeps_the_checkpoint(work):
    training = start_training(work, seed=50)
    wait_for_checkpoint(work, "h1-s50", training)
    training.terminate()  # SIGTERM, as a batch scheduler preempts a job
    assert training.wait(timeout=60) == 143, training.stderr.read()
    [killed] = [run for run in runs(work) if run.info.run_name == "h1-s50"]
    assert killed.info.status == "KILLED"
    assert list((work / "checkpoints").glob("h1-s50-*/last.ckpt"))
    assert not (work / "models" / "h1-s50").exists()


@pytest.mark.slow
def test_a_second_identical_training_is_refused_while_the_first_runs(work):
    first = start_training(work, seed=60)
    try:
        wait_for_checkpoint(work, "h1-s60", first)
        second = headstudy_here(
            work,
            "train",
            *DATA,
            "model=tiny",
            "threads=1",
            "seed=60",
            "trainer.max_steps=4000",
            "trainer.val_every_steps=20",
        )
        assert_refused(second, "train", "another process is training this model")
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert_no_run_running(work)


def in_a_full_disk(
    work: Path, folder: str, command: list[str], size: str = "48k", before: str = "", **env_changes: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`command` by hand in a mount namespace of its own where work/folder is a tmpfs of `size`
    (48 KiB: less than a tiny model), after the shell commands `before`, and what the folder held
    when it ended (the namespace takes it away)."""
    (work / folder).mkdir(exist_ok=True)
    listing = work / f"{folder}.listing"
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {folder} || exit 77; {before}"
        f'"$@"; status=$?; find {folder} > {listing}; exit $status'
    )
    env = {key: value for key, value in os.environ.items() if key != "DVC_STAGE"}
    env.update({"HEADSTUDY_CONF": str(ROOT / "conf"), "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"})
    env.update(env_changes)
    result = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *command], cwd=work, env=env, capture_output=True, text=True
    )
    if result.returncode == 77 or not listing.is_file():
        pytest.skip(f"no mount namespace with a tmpfs here: {result.stderr.strip()[:200]}")
    return result, listing.read_text().split()


@pytest.mark.slow
def test_a_store_whose_disk_filled_fails_the_command_in_one_line_naming_it(work):
    # The store is made, then the disk filled: the training's first write to it fails.
    made_then_filled = (
        f'"{sys.executable}" -c "from headstudy.bookkeeping.store import check_store; check_store()" || exit 3; '
        "cat /dev/zero > fullstore/filler 2>/dev/null; "
    )
    training = ["headstudy", "train", *DATA, *TINY, "seed=72"]
    result, listing = in_a_full_disk(
        work, "fullstore", training, "1m", made_then_filled, MLFLOW_TRACKING_URI="sqlite:///fullstore/mlflow.db"
    )
    assert_refused(result, "train", "the MLflow store sqlite:///fullstore/mlflow.db", "database or disk is full")
    assert "fullstore/mlflow.db" in listing
    assert not (work / "models" / "h1-s72").exists()


@pytest.mark.slow
def test_a_full_disk_while_writing_the_resume_checkpoint_leaves_no_staging_and_fails_the_run(work):
    training = ["headstudy", "train", *DATA, *TINY, "seed=71", "paths.checkpoints=full/checkpoints"]
    result, listing = in_a_full_disk(work, "full", training)
    assert_refused(result, "train", "writing the resume checkpoint full/checkpoints/h1-s71-", "bytes free")
    assert not [path for path in listing if path.endswith(".partial")], listing
    [failed] = [run for run in runs(work) if run.info.run_name == "h1-s71"]
    assert failed.info.status == "FAILED"
    assert not (work / "models" / "h1-s71").exists()


@pytest.mark.slow
def test_a_full_disk_while_writing_the_model_leaves_no_staging_and_the_rerun_only_writes_it(work):
    training = ["headstudy", "train", *DATA, *TINY, "seed=70", "paths.models=full/models"]
    result, listing = in_a_full_disk(work, "full", training)
    assert_refused(result, "train", "writing the model to full/models/h1-s70 failed", "bytes free")
    assert listing == ["full", "full/models"]  # no full/models/h1-s70.partial
    [failed] = [run for run in runs(work) if run.info.run_name == "h1-s70"]
    assert failed.info.status == "FAILED"  # not FINISHED without a model

    rerun = headstudy_here(work, *training[1:])
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming h1-s70" in rerun.stdout
    [finished] = [run for run in runs(work) if run.info.run_name == "h1-s70"]
    assert finished.info.status == "FINISHED" and finished.info.run_id == failed.info.run_id
    assert all(math.isfinite(value) for value in finished.data.metrics.values())  # no speed of 0 steps
    assert (
        finished.data.tags["weights.sha256"]
        == json.loads((work / "full/models/h1-s70/run.json").read_text())["weights_sha256"]
    )
    assert_nothing_half_written(work / "full")
