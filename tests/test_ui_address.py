"""The MLflow addresses the project prints follow the UI in use: the `mlflow server` that
MLFLOW_TRACKING_URI names, else the `mlflow ui` that serves the local store, at the host and port
that HEADSTUDY_MLFLOW_UI (or the MLFLOW_HOST and MLFLOW_PORT that `mlflow ui` reads) gives. No
server is started and no run is trained: only the addresses and the hints that go with them."""

from __future__ import annotations

import pytest
from conftest import ROOT, assert_refused
from mlflow.tracking import MlflowClient
from test_store import headstudy

from headstudy.bookkeeping import progress, store, tracking
from headstudy.common.errors import ConfigError

UI_SETTINGS = ("MLFLOW_TRACKING_URI", store.UI_VARIABLE, "MLFLOW_HOST", "MLFLOW_PORT", "MLFLOW_STATIC_PREFIX")


@pytest.fixture
def shell(monkeypatch, tmp_path):
    """A shell with none of the settings that choose the UI's address, in an empty folder; the
    test sets those it needs."""
    for name in UI_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_by_default_the_links_point_at_mlflow_uis_own_default_address(shell):
    assert store.ui_address() == "http://127.0.0.1:5000"
    assert store.ui_command() == "mlflow ui --backend-store-uri sqlite:///mlflow.db"
    assert store.ui_url(experiment="7") == (
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=results"
    )


def test_a_ui_on_another_port_is_one_variable_and_the_hint_starts_it_there(shell):
    shell.setenv(store.UI_VARIABLE, "http://127.0.0.1:5001/")
    assert store.ui_address() == "http://127.0.0.1:5001"
    assert store.ui_url(experiment="7").startswith("http://127.0.0.1:5001/#/experiments/7/runs?")
    assert store.ui_command() == "mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5001"
    hint = progress.mlflow_ui_hint()
    assert "`mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5001`" in hint, hint

    shell.setenv(store.UI_VARIABLE, "http://workstation.local:8080/mlflow")
    assert store.ui_url(experiment="7").startswith("http://workstation.local:8080/mlflow/#/experiments/7/")
    assert store.ui_command().endswith(" --host workstation.local --port 8080 --static-prefix /mlflow")


def test_the_host_and_port_that_mlflow_ui_reads_from_the_environment_are_the_links_too(shell):
    shell.setenv("MLFLOW_PORT", "5002")
    shell.setenv("MLFLOW_HOST", "0.0.0.0")  # every interface: this machine's browser uses 127.0.0.1
    assert store.ui_address() == "http://127.0.0.1:5002"
    assert store.ui_command() == "mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5002"


def test_runs_on_a_server_link_to_that_server_without_its_password_and_no_hint_to_start_one(shell):
    shell.setenv("MLFLOW_TRACKING_URI", "http://analyst:s3cret@mlflow.example.org:8080/")
    assert store.ui_address() == "http://mlflow.example.org:8080"
    assert store.ui_url(experiment="3").startswith("http://mlflow.example.org:8080/#/experiments/3/runs?")
    assert store.ui_command() is None
    assert progress.mlflow_ui_hint() is None

    # A server reached under another name (a proxy): the variable wins.
    shell.setenv(store.UI_VARIABLE, "https://mlflow.example.org")
    assert store.ui_address() == "https://mlflow.example.org"
    assert store.ui_command() is None


def test_a_database_store_is_served_by_mlflow_ui_named_without_its_password(shell):
    shell.setenv("MLFLOW_TRACKING_URI", "postgresql://analyst:s3cret-pw@db.example/runs")
    assert store.ui_address() == "http://127.0.0.1:5000"
    assert store.ui_command() == "mlflow ui --backend-store-uri postgresql://analyst:***@db.example/runs"


def test_a_run_link_names_its_experiment_and_asks_for_the_model_training_view(shell, tmp_path):
    shell.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shell.setenv(store.UI_VARIABLE, "http://127.0.0.1:5003")
    run = MlflowClient().create_run(store.experiment_id()).info
    assert store.ui_url(run.run_id) == (
        f"http://127.0.0.1:5003/#/experiments/{run.experiment_id}/runs/{run.run_id}?workflowType=machine_learning"
    )


def test_the_report_line_names_the_ui_in_use_and_how_to_start_it(shell, tmp_path, capsys):
    shell.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shell.setenv("HEADSTUDY_CONF", str(ROOT / "conf"))
    shell.setenv("MLFLOW_PORT", "5004")
    for name in ("DVC_STAGE", "DVC_EXP_NAME"):
        shell.delenv(name, raising=False)
    (tmp_path / "results.html").write_text("<html><body>by hand</body></html>\n")
    run_id = tracking.log_study_report(
        [tmp_path / "results.html"], {"rows": [{"variant": "1", "test_ppl_mean": 40.0}]}, ["one variant"]
    )

    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("report: logged")]
    experiment = MlflowClient().get_run(run_id).info.experiment_id
    assert f"`mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'} --port 5004`, then " in line, line
    link = store.ui_url(run_id)  # the study run's page, whose description is the answer
    assert link.startswith(f"http://127.0.0.1:5004/#/experiments/{experiment}/runs/{run_id}?"), link
    assert line.endswith(f" {link}"), line


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (store.UI_VARIABLE, "localhost:5001"),
        (store.UI_VARIABLE, "http://:5001"),
        ("MLFLOW_PORT", "five"),
        (store.MODEL_VARIABLE, "no"),
    ],
)
def test_a_bad_ui_address_or_model_switch_is_one_line_before_the_store_is_opened(shell, tmp_path, name, value):
    database = tmp_path / "mlflow.db"
    shell.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{database}")
    shell.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        store.check_store()
    message = str(refused.value)
    assert message.startswith(f"{name}={value!r} is "), message
    assert "\n" not in message
    assert not database.exists()


@pytest.mark.slow
def test_a_command_refuses_a_bad_ui_address_in_one_line(tmp_path):
    result = headstudy(tmp_path, "reproduce", "0123456789abcdef", timeout=90, HEADSTUDY_MLFLOW_UI="localhost:5001")
    assert_refused(result, "reproduce", "HEADSTUDY_MLFLOW_UI='localhost:5001'", "http://HOST:PORT")


def test_the_ui_address_is_documented_where_readers_look_for_it():
    looking = (ROOT / "docs/tracking.md").read_text().split("## Looking at runs")[1].split("\n## ")[0]
    for name in (store.UI_VARIABLE, "MLFLOW_TRACKING_URI", "MLFLOW_HOST", "MLFLOW_PORT", "MLFLOW_STATIC_PREFIX"):
        assert f"`{name}`" in looking, name
    assert store.UI_VARIABLE in (ROOT / "README.md").read_text()
