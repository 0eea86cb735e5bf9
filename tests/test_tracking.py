"""What MLflow shows of a study, read back the way the UI reads it: through the REST API of a
real `mlflow server` on the study's SQLite store. A tiny study (one model, 30 steps, a small
text corpus) runs as `dvc exp run` with a params change; the report's tracking then runs as the
report stage would."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import mlflow
import pandas as pd
import pytest
import torch
import yaml
from browser import chromium, run_chromium
from conftest import ROOT, default_interrupt, default_signals, headstudy_here, served_mlflow
from matplotlib.colors import to_hex
from tinyproject import set_threads

from headstudy.analysis.rendering.headline import report_metrics
from headstudy.analysis.statistics import paired_difference
from headstudy.bookkeeping import dashboard, store, tracking
from headstudy.formats.trained import load_model

pytestmark = pytest.mark.slow

EXPERIMENT_NAME = "tiny-exp"
WORDS = "the cat sat on a mat dog ran after bird sang wet street animal crossed at night".split()


def command(project: Path, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("MLFLOW_TRACKING_URI", "HEADSTUDY_CONF")}
    env.update(
        DVC_NO_ANALYTICS="1",
        HEADSTUDY_MLFLOW_MODEL="1",  # these tests look at the logged model (conftest sets 0)
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    result = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def tiny_project(project: Path) -> None:
    for item in ("dvc.yaml", "conf", "src", ".gitignore"):
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, project / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, project / item)
    set_threads(project, 1)
    textdir = project / "conf/data/textdir.yaml"
    textdir.write_text(textdir.read_text().replace("vocab_size: 1024", "vocab_size: 300"))
    rng = random.Random(0)
    (project / "corpus").mkdir()
    lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) for _ in range(1500))
    (project / "corpus/a.txt").write_text("\n".join(lines) + "\n")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(
        study={"variants": [1], "seeds": [0]},
        data={"corpus": "textdir"},
        model={"preset": "tiny"},
        trainer={"max_steps": 25, "val_every_steps": 10},
    )
    params["report"]["compare"] = []  # one variant: no pairs (configure refuses pairs of absent variants)
    params["report"].pop("chapter_claim")  # and a claim beside no comparison
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    command(project, "git", "init", "-q")
    command(project, "dvc", "init", "-q")
    command(project, "git", "add", "-A")
    command(project, "git", "commit", "-qm", "tiny study")


class Rest:
    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **query) -> dict:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(query)}", timeout=30) as reply:
            return json.load(reply)

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.load(reply)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The tiny study after `dvc exp run -S trainer.max_steps=30` and the report's tracking
    call, its store served by `mlflow server`; yields (project, REST client, server URL)."""
    project = tmp_path_factory.mktemp("tracked")
    tiny_project(project)
    command(project, "dvc", "exp", "run", "-n", EXPERIMENT_NAME, "-S", "trainer.max_steps=30", "evaluate@1-0")

    evaluated = json.loads((project / "metrics/h1-s0.json").read_text())
    (project / "reports").mkdir()
    (project / "reports/results.html").write_text("<html><body>tiny study</body></html>\n")
    summary = {
        "rows": [{"variant": "1", "test_ppl_mean": evaluated["test_ppl"]}],
        # A comparison over two seeds, as the report computes one.
        "comparisons": [
            {
                "variant_a": "1",
                "variant_b": "4",
                **paired_difference({0: 40.0, 1: 42.0}, {0: 30.0, 1: 33.0}, "1 head", "4 heads"),
            }
        ],
    }
    (project / "reports/summary.json").write_text(json.dumps(summary))
    with pytest.MonkeyPatch.context() as patch:  # as DVC runs the report stage of this experiment
        patch.chdir(project)
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("HEADSTUDY_CONF", raising=False)
        patch.setenv("DVC_EXP_NAME", EXPERIMENT_NAME)
        patch.setenv("DVC_STAGE", "report")
        tracking.log_study_report(
            [project / "reports/results.html", project / "reports/summary.json"], summary, ["the answer"]
        )

    log_file = tmp_path_factory.mktemp("server") / "server.log"
    with served_mlflow(f"sqlite:///{project / 'mlflow.db'}", log_file) as url:
        yield project, Rest(url), url


def test_a_report_made_by_hand_logs_to_the_by_hand_experiment_not_the_studies(tmp_path, monkeypatch):
    """docs/tracking.md: runs by hand go to `headstudy-by-hand`; only stages that DVC runs belong
    to the studies' experiment."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("HEADSTUDY_CONF", str(ROOT / "conf"))
    for name in ("DVC_STAGE", "DVC_EXP_NAME"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "results.html").write_text("<html><body>by hand</body></html>\n")
    summary = {"rows": [{"variant": "1", "test_ppl_mean": 40.0}, {"variant": "4", "test_ppl_mean": 30.0}]}

    run_id = tracking.log_study_report([tmp_path / "results.html"], summary, ["4 heads against 1 head: -25.0%"])

    mlflow_client = mlflow.tracking.MlflowClient(uri)
    run = mlflow_client.get_run(run_id)
    assert mlflow_client.get_experiment(run.info.experiment_id).name == store.BY_HAND_EXPERIMENT
    assert run.data.metrics["test_ppl/4"] == 30.0 and run.info.status == "FINISHED"
    studies = mlflow_client.get_experiment_by_name(store.EXPERIMENT)
    assert studies is None or not mlflow_client.search_runs([studies.experiment_id])


def tags(entity: dict) -> dict[str, str]:
    return {tag["key"]: tag["value"] for tag in entity.get("tags", [])}


def runs_by_name(rest: Rest, experiment_id: str) -> dict[str, dict]:
    found = rest.post("/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id]})["runs"]
    return {run["info"]["run_name"]: run for run in found}


def experiment(rest: Rest) -> dict:
    return rest.get("/api/2.0/mlflow/experiments/get-by-name", experiment_name="headstudy")["experiment"]


def test_experiment_is_a_model_training_experiment_that_says_what_it_asks(study):
    _, rest, _ = study
    found = tags(experiment(rest))
    assert found["mlflow.experimentKind"] == "custom_model_development"
    assert "four heads beat one head" in found["mlflow.note.content"]
    view = json.loads(json.loads(found["mlflow.sharedViewState.results"])["state"])
    assert "metrics.`test/ppl`" in view["selectedColumns"]
    assert "metrics.`change_pct/4_vs_1/per_token`" in view["selectedColumns"]


def test_model_run_is_nested_under_the_study_run_of_its_dvc_experiment(study):
    _, rest, _ = study
    runs = runs_by_name(rest, experiment(rest)["experiment_id"])
    assert set(runs) == {"h1-s0", f"default @ {EXPERIMENT_NAME}"}  # the project root's study, this experiment
    parent = runs[f"default @ {EXPERIMENT_NAME}"]
    child = runs["h1-s0"]
    assert tags(child["data"])["mlflow.parentRunId"] == parent["info"]["run_id"]
    assert tags(child["data"])["dvc.exp_name"] == tags(parent["data"])["dvc.exp_name"] == EXPERIMENT_NAME
    assert tags(child["data"])["stage"] == "train@1-0"
    assert {run["info"]["status"] for run in runs.values()} == {"FINISHED"}


def test_editing_params_alone_leaves_the_tree_clean(study):
    _, rest, _ = study
    child = runs_by_name(rest, experiment(rest)["experiment_id"])["h1-s0"]
    assert tags(child["data"])["git.dirty"] == "false"
    assert tags(child["data"])["git.params_changed"] == "true"  # dvc exp run -S edited params.yaml


def test_training_run_holds_a_loss_curve_test_perplexity_and_only_training_params(study):
    project, rest, _ = study
    child = runs_by_name(rest, experiment(rest)["experiment_id"])["h1-s0"]
    evaluated = json.loads((project / "metrics/h1-s0.json").read_text())
    metrics = {metric["key"]: metric["value"] for metric in child["data"]["metrics"]}
    assert metrics["test/ppl"] == evaluated["test_ppl"]
    assert metrics["model/parameter_count"] == evaluated["params"]
    assert {"train/loss", "val/ppl", "train/tokens_per_sec"} <= set(metrics)
    assert not {"params", "epoch"} & set(metrics)
    history = rest.get("/api/2.0/mlflow/metrics/get-history", run_id=child["info"]["run_id"], metric_key="train/loss")
    assert len({point["step"] for point in history["metrics"]}) >= 20
    # Beside each validation perplexity, the tokens trained on: the x axis of the curves file.
    tokens = rest.get("/api/2.0/mlflow/metrics/get-history", run_id=child["info"]["run_id"], metric_key="tokens")
    curve = (project / "metrics/curves/h1-s0.csv").read_text().splitlines()[1:]
    assert {point["step"]: point["value"] for point in tokens["metrics"]} == {
        int(step): float(trained) for step, trained, _ in (line.split(",") for line in curve)
    }
    params = {param["key"]: param["value"] for param in child["data"]["params"]}
    assert params["model.n_heads"] == "1" and params["trainer.max_steps"] == "30"
    assert not [key for key in params if key.split(".")[0] in ("paths", "inspect", "baselines")]


def test_training_run_has_the_prepared_data_as_its_dataset_and_the_test_split_as_its_evaluations(study):
    _, rest, _ = study
    child = runs_by_name(rest, experiment(rest)["experiment_id"])["h1-s0"]
    used = {tags(found)["mlflow.data.context"]: found["dataset"] for found in child["inputs"]["dataset_inputs"]}
    assert set(used) == {"training", "test"}
    assert used["training"]["name"] == "textdir-prepared" and used["test"]["name"] == "textdir-prepared-test"
    assert used["training"]["digest"] == used["test"]["digest"] == tags(child["data"])["data.sha256"][:16]
    assert list(json.loads(used["test"]["profile"])["features_shape"]) == ["test"]


def test_the_logged_model_shows_its_test_perplexity_on_the_test_split_and_ranks_by_it(study):
    """MLflow's model list: each trained model with test/ppl against the test split, sortable."""
    project, rest, _ = study
    child = runs_by_name(rest, experiment(rest)["experiment_id"])["h1-s0"]
    [output] = child["outputs"]["model_outputs"]
    logged = rest.get(f"/api/2.0/mlflow/logged-models/{output['model_id']}")["model"]
    metrics = {metric["key"]: metric for metric in logged["data"]["metrics"]}
    evaluated = json.loads((project / "metrics/h1-s0.json").read_text())
    assert metrics["test/ppl"]["value"] == evaluated["test_ppl"]
    assert metrics["test/word_ppl"]["value"] == evaluated["test_word_ppl"]
    assert metrics["test/ppl"]["dataset_name"] == "textdir-prepared-test"
    assert metrics["test/ppl"]["dataset_digest"] == tags(child["data"])["data.sha256"][:16]
    ranked = rest.post(
        "/api/2.0/mlflow/logged-models/search",
        {
            "experiment_ids": [experiment(rest)["experiment_id"]],
            "filter": f"metrics.`test/ppl` <= {evaluated['test_ppl']}",
            "order_by": [{"field_name": "metrics.test/ppl", "ascending": True}],
        },
    )["models"]
    assert [model["info"]["model_id"] for model in ranked] == [output["model_id"]]


def test_logged_model_loads_and_computes_what_the_trained_model_computes(study, monkeypatch):
    project, rest, url = study
    child = runs_by_name(rest, experiment(rest)["experiment_id"])["h1-s0"]
    [output] = child["outputs"]["model_outputs"]
    model_uri = tags(child["data"])["model.uri"]
    assert model_uri == f"models:/{output['model_id']}"
    logged = rest.get(f"/api/2.0/mlflow/logged-models/{output['model_id']}")["model"]
    assert logged["info"]["source_run_id"] == child["info"]["run_id"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    loaded = mlflow.pytorch.load_model(model_uri)
    trained = load_model(project / "models/h1-s0")
    tokens = torch.randint(0, 300, (3, 17))
    with torch.no_grad():
        assert torch.equal(loaded(tokens), trained(tokens))


def test_report_goes_to_the_study_run_and_closes_it_leaving_training_runs_alone(study):
    _, rest, _ = study
    runs = runs_by_name(rest, experiment(rest)["experiment_id"])
    [parent] = [run for name, run in runs.items() if name != "h1-s0"]
    assert tags(parent["data"])["study.state"] == "closed"
    metrics = {metric["key"]: metric["value"] for metric in parent["data"]["metrics"]}
    test_ppl = {metric["key"]: metric["value"] for metric in runs["h1-s0"]["data"]["metrics"]}["test/ppl"]
    # As analysis.rendering.headline names them: 4 heads against 1 in percent, negative when 4 heads are better.
    assert metrics["test_ppl/1"] == dashboard.significant(test_ppl)
    assert metrics["change_pct/4_vs_1/per_token_ci95_lower"] < metrics["change_pct/4_vs_1/per_token"] < 0
    assert "seeds" not in " ".join(metrics)

    def artifacts(run) -> set[str]:
        listed = rest.get("/api/2.0/mlflow/artifacts/list", run_id=run["info"]["run_id"])
        return {item["path"] for item in listed.get("files", [])}

    assert artifacts(parent) == {"results.html", "summary.json"}
    assert artifacts(runs["h1-s0"]) == {"config.yaml", "model.pt", "provenance"}


def test_dvc_plots_show_every_variant_of_the_study_and_need_no_network(tmp_path):
    """The curve chart of `dvc plots show` draws one line per model of the report's curve table,
    named as in the report, whichever variants the study has, and the page it writes loads nothing
    from the internet."""
    [curves] = [
        plot["reports/validation_curves.csv"]
        for plot in yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
        if isinstance(plot, dict) and "reports/validation_curves.csv" in plot
    ]
    assert (curves["x"], curves["y"]) == ("tokens", "perplexity")

    project = tmp_path / "plots"
    project.mkdir()
    shutil.copy(ROOT / "dvc.yaml", project)
    shutil.copy(ROOT / "params.yaml", project)
    command(project, "git", "init", "-q")
    command(project, "dvc", "init", "-q")
    for name in ("config", "plots-offline.html", "plots"):
        copy = shutil.copytree if (ROOT / ".dvc" / name).is_dir() else shutil.copy
        copy(ROOT / ".dvc" / name, project / ".dvc" / name)
    (project / "reports").mkdir()
    # The committed study's models, and one more, as a user's new variant adds it.
    models = [row["label"] for row in json.loads((ROOT / "reports/summary.json").read_text())["rows"]]
    models.append("8 heads")
    rows = [(model, tokens, 90.0 - index) for index, model in enumerate(models) for tokens in (1000, 2000)]
    pd.DataFrame(rows, columns=["model", "tokens", "perplexity"]).to_csv(
        project / "reports/validation_curves.csv", index=False
    )

    shown = json.loads(command(project, "dvc", "plots", "show", "--json"))
    assert not [error for error in shown.get("errors", []) if error["name"] == "reports/validation_curves.csv"]
    [drawn] = shown["data"]["reports/validation_curves.csv"]
    assert all(f'"model": "{model}"' in json.dumps(drawn["content"]) for model in models)

    command(project, "dvc", "plots", "show")
    page = (project / "dvc_plots/index.html").read_text()
    assert "function vegaEmbed" in page and "vegaEmbed('#reports_validation_curves_csv'" in page
    assert "<script src" not in page and "cdn." not in page

    # As drawn: a line per model in the study's order, in the report's colours (matplotlib's
    # default cycle, which the report's figures use in the same order), named as in the report.
    chromium()
    drawn = run_chromium("--virtual-time-budget=5000", "--dump-dom", (project / "dvc_plots/index.html").as_uri()).stdout
    strokes = re.findall(r'<polyline points="[^"]*" fill="none" stroke="([^"]*)"', drawn)
    report_colours = [to_hex(colour) for colour in matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]]
    assert strokes == report_colours[: len(models)], strokes
    legend = re.findall(r'<text x="\d+(?:\.\d+)?" y="\d+(?:\.\d+)?">([^<]*)</text>', drawn)
    assert legend[-len(models) :] == models, legend
    assert not [name for name in legend if "workspace" in name], legend
    assert json.loads((ROOT / ".dvc/plots/variants.json").read_text())["encoding"]["color"]["scale"] == {
        "scheme": "category10"  # Vega's name for the same ten colours, for a reader's own Vega
    }


def test_a_second_study_adds_its_columns_to_the_saved_view_instead_of_replacing_them(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow_client, experiment_id = store.client(), store.experiment_id()
    dashboard.save_results_view(mlflow_client, experiment_id, ["compare/4_vs_1/relative"])
    dashboard.save_results_view(mlflow_client, experiment_id, ["compare/8_vs_4/relative"])
    dashboard.save_results_view(mlflow_client, experiment_id, ["compare/4_vs_1/relative"])  # the first study again

    saved = mlflow_client.get_experiment(experiment_id).tags["mlflow.sharedViewState.results"]
    columns = json.loads(json.loads(saved)["state"])["selectedColumns"]
    assert columns[-len(dashboard.RESULTS_COLUMNS) :] == dashboard.RESULTS_COLUMNS
    assert columns[: -len(dashboard.RESULTS_COLUMNS)] == [
        "metrics.`compare/4_vs_1/relative`",
        "metrics.`compare/8_vs_4/relative`",
    ]


def test_the_results_view_leads_with_the_comparisons_cis_then_test_perplexity_newest_runs_first(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow_client, experiment_id = store.client(), store.experiment_id()
    summary = {
        "rows": [{"variant": "1", "test_ppl_mean": 40.123456}, {"variant": "4", "test_ppl_mean": 30.98765}],
        "comparisons": [
            {"variant_a": "1", "variant_b": "4", **paired_difference({0: 40.0, 1: 42.0}, {0: 30.0, 1: 33.0}, "a", "b")}
        ],
    }
    headline_keys = dashboard.dashboard_metrics(report_metrics(summary))
    assert headline_keys == [
        "change_pct/4_vs_1/per_token",
        "change_pct/4_vs_1/per_token_ci95_lower",
        "change_pct/4_vs_1/per_token_ci95_upper",
        "test_ppl/1",
        "test_ppl/4",
    ]
    dashboard.save_results_view(mlflow_client, experiment_id, headline_keys)
    state = json.loads(
        json.loads(mlflow_client.get_experiment(experiment_id).tags["mlflow.sharedViewState.results"])["state"]
    )
    columns = [f"metrics.`{key}`" for key in headline_keys]
    assert state["selectedColumns"][:7] == columns + ["metrics.`test/ppl`", "metrics.`val/ppl`"]
    # MLflow orders metric columns by name unless the view orders them.
    assert state["columnOrder"][:7] == dashboard.LEADING_COLUMNS + columns
    assert set(state["columnWidths"]) == set(columns)
    # Not grouped: a study run, whose models are nested under it, is a row of its own.
    assert "groupBy" not in state and (state["orderByKey"], state["orderByAsc"]) == ("attributes.start_time", False)
    assert state["runsHiddenMode"] == "SHOW_ALL"
    assert dashboard.significant(30.98765) == 30.99 and dashboard.significant(-23.235052642126153) == -23.24


# Runs by hand, under DVC and of `headstudy reproduce`, in a folder of their own: a git
# repository with a change not committed, a tiny corpus and a tiny model (20 steps).

HAND_DATA = ["data=textdir", "data.dir=corpus", "data.vocab_size=300", "paths.prepared=prepared"]
HAND_TINY = ["model=tiny", "threads=1", "trainer.max_steps=20", "trainer.val_every_steps=10"]


def by_hand(folder: Path, *args: str, wait: bool = True, **env_changes: str):
    """`headstudy ARGS` in folder with the project's conf/ and the store folder/mlflow.db: by hand
    (no DVC_STAGE) unless env_changes set one. In this process when waited for; else a process of
    its own, for a test to interrupt."""
    env = {key: value for key, value in os.environ.items() if key not in ("DVC_STAGE", "DVC_EXP_NAME")}
    env.update(
        {
            "HEADSTUDY_CONF": str(ROOT / "conf"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
            **env_changes,
        }
    )
    if not wait:
        return subprocess.Popen(
            ["headstudy", *args],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=default_signals,  # the test may interrupt it: SIGINT and SIGTERM must reach it
        )
    result = headstudy_here(folder, *args, **env_changes)
    assert result.returncode in (0, 1), f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def git_repository(folder: Path) -> str:
    """folder as a git repository with one commit and a change to it; the commit."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q")
    (folder / "notes.txt").write_text("first\n")
    git("add", "notes.txt")
    git("commit", "-qm", "notes")
    (folder / "notes.txt").write_text("first\nsecond, not committed\n")
    return git("rev-parse", "HEAD").strip()


def runs_of(folder: Path, *experiment_names: str) -> list:
    """The runs of these experiments (by default every one) in the store folder/mlflow.db."""
    mlflow_client = mlflow.tracking.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    if experiment_names:
        found = [mlflow_client.get_experiment_by_name(name) for name in experiment_names]
    else:
        found = mlflow_client.search_experiments()
    return (
        mlflow_client.search_runs([experiment.experiment_id for experiment in found if experiment])
        if any(found)
        else []
    )


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """Model h1-s0 trained and evaluated as DVC runs the stages (DVC_STAGE set), then reproduced;
    h1-s1 trained and evaluated by hand, its output going to a pipe, not a terminal."""
    folder = tmp_path_factory.mktemp("tracked-by-hand")
    commit = git_repository(folder)
    rng = random.Random(0)
    (folder / "corpus").mkdir()
    lines = (" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(600))
    (folder / "corpus/a.txt").write_text("\n".join(lines) + "\n")
    by_hand(folder, "prepare", *HAND_DATA)
    by_hand(folder, "train", *HAND_DATA, *HAND_TINY, DVC_STAGE="train@1-0")
    by_hand(folder, "evaluate", *HAND_DATA, *HAND_TINY, DVC_STAGE="evaluate@1-0")
    [staged] = [run for run in runs_of(folder, "headstudy") if run.info.run_name == "h1-s0"]
    reproduced = by_hand(folder, "reproduce", staged.info.run_id)
    trained = by_hand(
        folder, "train", *HAND_DATA, *HAND_TINY, "seed=1", "paths.models=hand-models", "paths.metrics=hand-metrics"
    )
    by_hand(
        folder, "evaluate", *HAND_DATA, *HAND_TINY, "seed=1", "paths.models=hand-models", "paths.metrics=hand-metrics"
    )
    return SimpleNamespace(folder=folder, commit=commit, staged=staged, reproduced=reproduced, trained=trained)


def test_runs_by_hand_and_reproductions_go_to_their_own_experiment_where_evaluate_finds_them(tracked):
    folder = tracked.folder
    studies = {run.info.run_name: run for run in runs_of(folder, "headstudy")}
    assert len(studies) == 2 and "h1-s0" in studies  # the model and its study's parent run
    assert studies["h1-s0"].data.tags["stage"] == "train@1-0"
    evaluated = json.loads((folder / "metrics/h1-s0.json").read_text())
    assert studies["h1-s0"].data.metrics["test/ppl"] == evaluated["test_ppl"]

    apart = runs_of(folder, "headstudy-by-hand")
    [reproduction] = [run for run in apart if run.data.tags.get("reproduces") == tracked.staged.info.run_id]
    assert reproduction.data.tags["stage"] == "reproduce" and "test/ppl" in reproduction.data.metrics
    assert "weights sha256:" in tracked.reproduced.stdout
    [manual] = [run for run in apart if run.info.run_name == "h1-s1"]
    assert manual.data.tags["stage"] == "manual"
    assert manual.data.metrics["test/ppl"] == json.loads((folder / "hand-metrics/h1-s1.json").read_text())["test_ppl"]
    assert f"/#/experiments/{manual.info.experiment_id}/runs/{manual.info.run_id}" in tracked.trained.stdout


def test_runs_that_record_git_state_carry_mlflow_standard_git_commit_tag(tracked):
    recorded = runs_of(tracked.folder)
    assert len(recorded) == 4  # the study's parent, its model, the reproduction and the model by hand
    for run in recorded:
        assert run.data.tags["git.commit"] == tracked.commit
        assert run.data.tags["mlflow.source.git.commit"] == tracked.commit, run.info.run_name


def ui_text_extensions() -> set[str]:
    """The file extensions that MLflow's UI (the build in the installed package) previews as text."""
    build = Path(mlflow.__file__).parent / "server/js/build/static/js"
    for script in build.glob("*.js"):
        found = re.search(r'new Set\((\["txt","pbtxt"[^\]]*\])', script.read_text(errors="replace"))
        if found:
            return set(re.findall(r'"(\w+)"', found.group(1)))
    raise AssertionError(f"no list of previewable text extensions in {build}")


def test_provenance_is_logged_as_text_files_the_ui_previews(tracked):
    [manual] = [run for run in runs_of(tracked.folder) if run.info.run_name == "h1-s1"]
    mlflow_client = mlflow.tracking.MlflowClient(f"sqlite:///{tracked.folder / 'mlflow.db'}")
    logged = {item.path for item in mlflow_client.list_artifacts(manual.info.run_id, "provenance")}
    assert {"provenance/requirements-frozen.txt", "provenance/git-diff.txt"} <= logged
    previewed = ui_text_extensions()
    assert {path for path in logged if path.rsplit(".", 1)[-1] not in previewed} == set()
    diff = Path(
        mlflow_client.download_artifacts(
            manual.info.run_id, "provenance/git-diff.txt", str(tracked.folder / "downloaded")
        )
    )
    assert "+second, not committed" in diff.read_text()


def test_study_parent_run_is_named_by_its_folder_and_the_time_it_started(tracked):
    [parent] = [run for run in runs_of(tracked.folder, "headstudy") if run.info.run_name != "h1-s0"]
    assert re.fullmatch(r"default @ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", parent.info.run_name), parent.info.run_name


def test_study_parent_runs_are_named_by_study_folder_and_dvc_experiment(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "conf").mkdir(parents=True)
    (project / "conf/config.yaml").write_text("threads: 1\n")
    (project / "studies/lr-tuning").mkdir(parents=True)
    commit = git_repository(project)
    monkeypatch.delenv("HEADSTUDY_CONF", raising=False)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # where a store named by the variable keeps its artifacts
    mlflow_client = store.client()

    def opened(folder: Path, **environment: str):
        monkeypatch.chdir(folder)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        return mlflow_client.get_run(tracking.open_study_run())

    root = opened(project)
    study = opened(project / "studies/lr-tuning")
    experiment = opened(project, DVC_EXP_NAME="bold-gull")
    assert re.fullmatch(r"default @ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", root.info.run_name)
    assert re.fullmatch(r"studies/lr-tuning @ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", study.info.run_name)
    assert experiment.info.run_name == "default @ bold-gull"
    for run in (root, study, experiment):
        assert run.data.tags["mlflow.source.git.commit"] == commit


def test_validation_is_one_line_when_output_is_not_a_terminal(tracked):
    output = tracked.trained.stdout
    pieces = [piece.strip() for piece in re.split(r"[\r\n]", output) if piece.strip()]
    validations = [piece for piece in pieces if "Validation" in piece]
    one_line = r"Validation at step \d+/\d+: val/ppl=\S+ \(\d+\.\d s\)(; study left: [^;]+)?"
    assert validations == [piece for piece in validations if re.fullmatch(one_line, piece)]
    assert [piece.split(":")[0] for piece in validations] == ["Validation at step 10/20", "Validation at step 20/20"]
    assert any(piece.startswith("Training: 100%") and "20/20" in piece for piece in pieces)  # the training bar stays
    assert "\x1b[" not in output  # no cursor movement in a log


def wait_for_checkpoint(folder: Path, name: str, training: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not list((folder / "checkpoints").glob(f"{name}-*/last.ckpt")):
        assert training.poll() is None, training.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)


@pytest.mark.parametrize("interruption, seed, status", [(signal.SIGINT, 20, 130), (signal.SIGTERM, 21, 143)])
def test_an_interrupted_training_is_marked_killed_not_failed(tracked, interruption, seed, status):
    folder = tracked.folder
    training = by_hand(
        folder,
        "train",
        *HAND_DATA,
        "model=tiny",
        "threads=1",
        f"seed={seed}",
        "trainer.max_steps=4000",
        "trainer.val_every_steps=10",
        wait=False,
    )
    try:
        wait_for_checkpoint(folder, f"h1-s{seed}", training)
        training.send_signal(interruption)  # Ctrl-C, or a scheduler's preemption
        _, errors = training.communicate(timeout=120)
    finally:
        if training.poll() is None:
            training.kill()
    assert training.returncode == status, errors[-3000:]
    [run] = [run for run in runs_of(folder) if run.info.run_name == f"h1-s{seed}"]
    assert run.info.status == "KILLED"
    assert list((folder / "checkpoints").glob(f"h1-s{seed}-*/last.ckpt"))  # resumable


def test_an_interrupt_within_a_store_write_comes_after_the_write():
    done = []
    # Ctrl-C at its default here, however pytest was started: with SIGINT ignored there is nothing to defer.
    with default_interrupt():
        with pytest.raises(KeyboardInterrupt):
            with tracking.interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the write begins
                time.sleep(0.2)  # the write goes on: a Python handler would have run by now
                done.append("written")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back
    assert done == ["written"]
