"""The MLflow UI as a reader opens it: headless Chromium on a real `mlflow server` over a store
that headstudy's own tracking code made (the experiment, its tags and saved view, one model
run), no training.

MLflow 3.17 picks an experiment's view (GenAI, or Model training with its runs table) from the
sidebar's GenAI / Model training switch: the URL's `workflowType`, else what this browser last
chose there (localStorage `mlflow.workflowType_v1`), else GenAI. It does not read the
experiment's `mlflow.experimentKind` tag for that, and no tag or server setting changes it. So
the experiments list's link (`#/experiments/ID`, no workflowType) opens a first-time reader's
browser on the GenAI overview, and the address the project prints (store.ui_url(), README's
link) is the way into the runs table."""

from __future__ import annotations

import html
import json
import re
from types import SimpleNamespace

import pytest
from browser import chromium, evaluate_in_page, run_chromium
from conftest import ROOT, served_mlflow
from mlflow.entities import Metric, Param, RunStatus

from headstudy.analysis.sections.comparisons import answer_line
from headstudy.bookkeeping import store, tracking

pytestmark = pytest.mark.slow

RUN_NAME = "h1-s0"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """The studies' experiment as headstudy creates it (kind, note, saved results view) with one
    finished model run, served by `mlflow server`; the link the project prints, with
    HEADSTUDY_MLFLOW_UI naming that server as a reader names the UI they started."""
    chromium()  # skip before starting a server for nothing
    folder = tmp_path_factory.mktemp("mlflow-ui")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        client, experiment = store.client(), store.experiment_id()
        run = client.create_run(experiment, run_name=RUN_NAME).info.run_id
        client.log_batch(
            run, metrics=[Metric("test/ppl", 42.5, 0, 0)], params=[Param("variant", "1"), Param("seed", "0")]
        )
        client.set_terminated(run, RunStatus.to_string(RunStatus.FINISHED))
        kind = client.get_experiment(experiment).tags.get("mlflow.experimentKind")
        with served_mlflow(uri, folder / "server.log") as url:
            patch.setenv(store.UI_VARIABLE, url)
            readme_link = store.ui_url()
            assert readme_link.startswith(f"{url}/#/experiments/{experiment}/runs?"), readme_link
            yield SimpleNamespace(
                url=url, experiment=experiment, kind=kind, readme_link=readme_link, folder=folder, patch=patch
            )


def rendered(url: str) -> str:
    """The DOM once the single-page app has loaded, fetched and redirected, in a fresh profile:
    a reader who has never used the sidebar switch."""
    return run_chromium("--window-size=1280,900", "--virtual-time-budget=20000", "--dump-dom", url).stdout


def experiment_link(listing: str, name: str) -> str:
    """The href of the experiment `name` in the rendered experiments list."""
    for anchor in re.findall(r"<a\b[^>]*>", listing):
        if 'data-testid="experiment-list-item-link"' in anchor and f'title="{name}"' in anchor:
            return html.unescape(re.search(r'href="([^"]*)"', anchor).group(1))
    raise AssertionError(f"no link to the experiment {name!r} in the experiments list")


def seen(dom: str, experiment: str) -> SimpleNamespace:
    """What the page shows: its tab ("Runs", "Overview", from the title the UI sets), the
    workflow types of the experiment's sidebar tabs (genai or machine_learning), those tabs, the
    runs table's column ids and its run names, and the saved view it applies."""
    title = re.search(rf"<title>([^<]*) - Experiment {experiment} - MLflow</title>", dom)
    sidebar = [
        html.unescape(href) for href in re.findall(rf'href="#/experiments/{experiment}/([^"]*workflowType=[^"]*)"', dom)
    ]
    return SimpleNamespace(
        tab=title.group(1) if title else None,
        workflow={re.search(r"workflowType=(\w+)", href).group(1) for href in sidebar},
        tabs={href.split("?")[0] for href in sidebar},
        columns=set(re.findall(r'role="gridcell" col-id="([^"]*)"', dom)),
        runs=set(re.findall(rf'href="#/experiments/{experiment}/runs/\w+"><span[^>]*>([^<]*)</span>', dom)),
        saved_view="headstudy results" in dom,
    )


def test_the_experiments_list_opens_the_genai_overview_so_the_readme_links_the_runs_table(ui):
    # The experiment says it is model training; the 3.17 UI does not use that to pick the view.
    assert ui.kind == "custom_model_development"
    listing = rendered(f"{ui.url}/#/experiments")
    link = experiment_link(listing, store.EXPERIMENT)
    assert link == f"#/experiments/{ui.experiment}", link  # nothing in the link says which view

    opened = seen(rendered(f"{ui.url}/{link}"), ui.experiment)
    if opened.tab == "Runs" and opened.workflow == {"machine_learning"}:
        pytest.fail(
            "the experiments list now opens the model-training runs table: MLflow honours the "
            "experiment's kind, and README can send readers through the experiments list"
        )
    assert (opened.tab, opened.workflow) == ("Overview", {"genai"}), opened
    assert "runs" not in opened.tabs and RUN_NAME not in opened.runs, opened


def test_the_readme_link_opens_the_results_view_of_the_runs_table_in_model_training(ui):
    opened = seen(rendered(ui.readme_link), ui.experiment)
    assert opened.tab == "Runs", opened
    # The Model training sidebar (Runs, Models, Traces), not GenAI's around a "Training runs" table.
    assert opened.workflow == {"machine_learning"}, opened
    assert {"runs", "models"} <= opened.tabs, opened
    assert opened.runs == {RUN_NAME}, opened
    # The saved view "headstudy results" and its columns: test/ppl is no default column.
    assert opened.saved_view, opened
    assert {"metrics.`test/ppl`", "params.`variant`"} <= opened.columns, opened


def test_the_link_the_report_prints_opens_on_the_committed_answer_without_scrolling(ui, capsys):
    """The report stage's closing line, of the committed default study's summary, opened at
    1600 x 1000: the three comparisons, estimates and intervals, are laid out inside the first
    screen of the study run's page, above the fold of its description."""
    summary = json.loads((ROOT / "reports/summary.json").read_text())
    headline = [answer_line(comparison) for comparison in summary["comparisons"]]
    (ui.folder / "results.html").write_text("<html><body>the report</body></html>\n")
    ui.patch.setenv("DVC_STAGE", "report")  # as DVC runs it: the study's experiment
    tracking.log_study_report([ui.folder / "results.html"], summary, headline)
    [printed] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("report: logged")]
    link = printed.rsplit(" ", 1)[1]
    assert link.startswith(f"{ui.url}/#/experiments/{ui.experiment}/runs/"), printed

    where = """(() => {
      const lines = %s;
      const leaves = [...document.querySelectorAll('body *')].filter(e => e.children.length === 0);
      // The description folds behind a gradient where it is longer than a few lines.
      const fold = document.querySelector('[data-testid="truncation-gradient"]');
      const folded = fold ? fold.getBoundingClientRect().top : Infinity;
      return lines.map(line => leaves.filter(e => e.textContent.includes(line)).map(e => {
        const box = e.getBoundingClientRect();
        return {top: box.top, bottom: box.bottom, right: box.right, folded: box.bottom > folded};
      }));
    })()"""
    # Each line's opening words and its interval, as the study run's description gives them.
    wanted = [line.split(":")[0] for line in headline] + [re.search(r"\[[^]]*\]", line).group(0) for line in headline]
    shown = f"document.body && document.body.innerText.includes({json.dumps(headline[-1])})"
    boxes = evaluate_in_page(link, where % json.dumps(wanted), (1600, 1000), ready=shown)
    for text, found in zip(wanted, boxes, strict=True):
        assert found, f"{text!r} is not on the study run's page"
        seen = [box for box in found if 0 <= box["top"] and box["bottom"] <= 1000 and box["right"] <= 1600]
        assert any(not box["folded"] for box in seen), (text, found)
