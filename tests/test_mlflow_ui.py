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
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from headstudy.analysis.rendering.headline import report_metrics
from headstudy.analysis.sections.comparisons import answer_line
from headstudy.bookkeeping import dashboard, store, tracking

pytestmark = pytest.mark.slow

RUN_NAME = "h1-s0"
STUDY_RUN_NAME = "default @ 2026-12-06 04:00:00 UTC"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """The studies' experiment as headstudy creates it (kind, note, saved views) with a finished
    study run (the committed default study's headline metrics, its results view saved as its
    report saves it) and its one model run nested under it, served by `mlflow server`; the link
    the project prints, with HEADSTUDY_MLFLOW_UI naming that server as a reader names the UI they
    started."""
    chromium()  # skip before starting a server for nothing
    folder = tmp_path_factory.mktemp("mlflow-ui")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        client, experiment = store.client(), store.experiment_id()
        headline = report_metrics(json.loads((ROOT / "reports/summary.json").read_text()))
        study = client.create_run(experiment, run_name=STUDY_RUN_NAME, tags={tracking.STUDY_STATE: "closed"})
        client.log_batch(study.info.run_id, metrics=[Metric(key, value, 0, 0) for key, value in headline.items()])
        client.set_terminated(study.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
        dashboard.save_results_view(client, experiment, dashboard.dashboard_metrics(headline))
        run = client.create_run(
            experiment, run_name=RUN_NAME, tags={MLFLOW_PARENT_RUN_ID: study.info.run_id}
        ).info.run_id
        client.log_batch(
            run,
            metrics=[
                Metric("test/ppl", 42.5, 0, 0),
                *(Metric("val/ppl", 60 / step**0.1, 0, step) for step in (10, 100)),
                *(Metric("tokens", 1024 * step, 0, step) for step in (10, 100)),
            ],
            params=[Param("variant", "1"), Param("seed", "0")],
        )
        client.set_terminated(run, RunStatus.to_string(RunStatus.FINISHED))
        kind = client.get_experiment(experiment).tags.get("mlflow.experimentKind")
        with served_mlflow(uri, folder / "server.log") as url:
            patch.setenv(store.UI_VARIABLE, url)
            readme_link = store.ui_url()
            assert readme_link.startswith(f"{url}/#/experiments/{experiment}/runs?"), readme_link
            yield SimpleNamespace(
                url=url,
                experiment=experiment,
                kind=kind,
                readme_link=readme_link,
                headline=dashboard.dashboard_metrics(headline),
                folder=folder,
                patch=patch,
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
    # The study run, its model run nested under it (a click on its toggle shows it).
    assert opened.runs == {STUDY_RUN_NAME}, opened
    assert opened.saved_view, opened
    assert f"metrics.`{ui.headline[0]}`" in opened.columns, opened


def test_the_results_view_leads_with_the_study_run_and_the_headline_in_columns_wide_enough_to_read(ui):
    """At 1600 x 1000: the study run is the first row; the first metric columns are the
    headline's comparison, its estimate, then its interval's low end before its high end, each
    name shown whole (MLflow itself orders metric columns by name)."""
    where = """(() => {
      const box = e => e.getBoundingClientRect();
      const rows = [...document.querySelectorAll('a[href*="/runs/"]')]
        .filter(a => a.textContent.trim()).map(a => ({name: a.textContent.trim(), top: box(a).top}));
      const headers = [...document.querySelectorAll('[role="columnheader"][col-id^="metrics."]')].map(h => {
        // The name is cut (an ellipsis) where its text reaches past the element that clips it.
        const label = [...h.querySelectorAll('*')].find(e => e.children.length === 0 && e.textContent.trim());
        const text = document.createRange();
        text.selectNodeContents(label);
        let clip = label.parentElement;
        while (clip !== h && getComputedStyle(clip).overflowX === 'visible') clip = clip.parentElement;
        return {id: h.getAttribute('col-id'), left: box(h).left, right: box(h).right,
                whole: box(text).right <= box(clip).right};
      });
      return {rows, headers};
    })()"""
    ready = 'document.querySelector(\'[role="columnheader"][col-id^="metrics."]\') !== null'
    shown = evaluate_in_page(ui.readme_link, where, (1600, 1000), ready=ready)
    rows = sorted(shown["rows"], key=lambda row: row["top"])
    assert rows and rows[0]["name"] == STUDY_RUN_NAME, rows
    headers = sorted(shown["headers"], key=lambda header: header["left"])
    leading = [f"metrics.`{key}`" for key in ui.headline[:3]]
    assert [header["id"] for header in headers[:3]] == leading, headers
    assert headers[0]["whole"] and headers[0]["right"] <= 1600, headers[0]


def test_the_curves_view_opens_the_chart_of_validation_perplexity_against_tokens_by_variant_on_log_axes(ui):
    link = store.ui_url(view=dashboard.CURVES_VIEW)
    assert link.endswith("viewStateShareKey=curves&compareRunsMode=CHART"), link
    where = """(() => {
      const titles = [...document.querySelectorAll('[data-testid="experiment-view-compare-runs-chart-area"] *')]
        .filter(e => e.children.length === 0 && e.textContent.trim() === 'val/ppl');
      const area = document.querySelector('[data-testid="experiment-view-compare-runs-chart-area"]');
      return {title: titles.length > 0, text: area ? area.innerText : '', page: document.body.innerText};
    })()"""
    # A chart draws after its card (a spinner first): wait for the first one's plot.
    ready = (
        "document.querySelector('[data-testid=\"experiment-view-compare-runs-chart-area\"] .js-plotly-plot') !== null"
    )
    shown = evaluate_in_page(link, where, (1600, 1000), ready=ready)
    assert shown["title"], shown["text"][:500]
    assert shown["text"].lstrip().startswith("val"), shown["text"][:500]  # its section first
    assert "\ntokens\n" in shown["text"], shown["text"][:500]  # the x axis's title
    assert "Group by: variant" in shown["page"], shown["page"][:1000]
    saved = json.loads(
        json.loads(store.client().get_experiment(ui.experiment).tags[store.VIEW_TAG_PREFIX + "curves"])["state"]
    )
    [chart] = saved["compareRunCharts"]
    assert (chart["metricKey"], chart["selectedXAxisMetricKey"]) == ("val/ppl", "tokens")
    assert (chart["xAxisScaleType"], chart["scaleType"]) == ("log", "log")


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
