"""The saved views of the runs table (the UI's "Views") that are the study's dashboard, stored as
experiment tags in the envelope the MLflow 3.17 UI writes for one, and opened by the addresses
store.ui_url gives. Only the views' contents here: no store is opened."""

from __future__ import annotations

import json
import time

from mlflow.tracking import MlflowClient

# Two saved views of the runs table (the UI's "Views"), each stored as an experiment tag the way
# the UI stores one, that ui_url() opens. "headstudy results": the runs newest first and not
# grouped, so that the latest study's run is the first row, its model runs nested under it; the
# studies' own columns (each comparison with its interval, each variant's test perplexity) first,
# each wide enough for its name, then the model runs' test and validation perplexity; not the wide
# Dataset column, which would push the metrics out of sight.
RESULTS_VIEW = "results"
RESULTS_COLUMNS = [
    "metrics.`test/ppl`",
    "metrics.`val/ppl`",
    "params.`variant`",
    "params.`seed`",
    "attributes.`Models`",
    "metrics.`train/loss`",
    "metrics.`model/parameter_count`",
    "params.`trainer.max_steps`",
]
# The runs table's first columns (the UI's own ids): the run's name, then its creation time with
# the toggle that shows a study run's models.
LEADING_COLUMNS = ["attributes.`Run Name`", "runDateAndNestInfo"]
# "headstudy curves": the chart view of the runs grouped by variant (MLflow's "Group by": the mean
# curve of a variant's seeds, with a band), validation perplexity against tokens first, both axes
# logarithmic as the report draws it. MLflow groups the table and the charts alike, hence a view
# of its own.
CURVES_VIEW = "curves"
GROUP_BY_VARIANT = {"aggregateFunction": "average", "groupByKeys": [{"mode": "param", "groupByData": "variant"}]}
CURVES_SECTION = {
    "uuid": "headstudy-validation",
    "name": "val",
    "display": True,
    "isReordered": True,
    "deleted": False,
    "isGenerated": True,
}
VALIDATION_CHART = {
    "uuid": "headstudy-val-ppl",
    "type": "LINE",
    "metricSectionId": CURVES_SECTION["uuid"],
    "metricKey": "val/ppl",
    "displayName": "val/ppl",
    "isGenerated": True,
    "deleted": False,
    "runsCountToCompare": 10,
    "xAxisKey": "metric",  # the metric `tokens`, logged at each validation step
    "selectedXAxisMetricKey": "tokens",
    "useGlobalXaxisKey": False,
    "xAxisScaleType": "log",
    "scaleType": "log",
    "lineSmoothness": 0,
    "useGlobalLineSmoothing": True,
    "range": {},
    "yAxisKey": "METRIC",
    "yAxisExpressions": [],
    "ignoreOutliers": False,
}
# Every run shown, not the UI's first 10 (a study trains 12 models).
SHOW_ALL_RUNS = "SHOW_ALL"
NEWEST_FIRST = {"orderByKey": "attributes.start_time", "orderByAsc": False}
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEWS = {RESULTS_VIEW: "headstudy results", CURVES_VIEW: "headstudy curves"}


def save_results_view(mlflow_client: MlflowClient, experiment: str, extra_metrics: list[str]) -> None:
    """The runs table: extra_metrics (the headline of the study just reported) first, then the
    other studies' columns the view has, then RESULTS_COLUMNS; newest first, not grouped, every
    run shown. Added, not replaced: the studies of a project share the experiment, and one
    study's report must not take away another's."""
    study_columns = [f"metrics.`{key}`" for key in extra_metrics]
    study_columns += [column for column in saved_view_columns(mlflow_client, experiment) if column not in study_columns]
    state = {
        "selectedColumns": study_columns + RESULTS_COLUMNS,
        "columnOrder": LEADING_COLUMNS + study_columns + RESULTS_COLUMNS,
        "columnWidths": {column: header_width(column) for column in study_columns},
        **NEWEST_FIRST,
        "runsHiddenMode": SHOW_ALL_RUNS,
    }
    save_view(mlflow_client, experiment, RESULTS_VIEW, state)


def save_curves_view(mlflow_client: MlflowClient, experiment: str) -> None:
    """The chart view grouped by variant, validation perplexity first (the UI adds a chart for
    every other metric after it)."""
    state = {
        "selectedColumns": RESULTS_COLUMNS,
        **NEWEST_FIRST,
        "groupBy": GROUP_BY_VARIANT,
        "runsHiddenMode": SHOW_ALL_RUNS,
        "isAccordionReordered": True,
        "compareRunSections": [CURVES_SECTION],
        "compareRunCharts": [VALIDATION_CHART],
    }
    save_view(mlflow_client, experiment, CURVES_VIEW, state)


def save_view(mlflow_client: MlflowClient, experiment: str, view: str, state: dict) -> None:
    """state as the saved view `view`, in the envelope the 3.17 UI writes for one."""
    now = int(time.time() * 1000)
    envelope = {"name": VIEWS[view], "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    mlflow_client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + view, json.dumps(envelope))


def header_width(column: str) -> int:
    """Pixels in which the runs table shows a metric column's name whole, beside its icons."""
    name = column.removeprefix("metrics.`").removesuffix("`")
    return 40 + 7 * len(name)


def dashboard_metrics(metrics: dict[str, float]) -> list[str]:
    """The headline's keys the results view shows, in the order it shows them: each comparison's
    per-token change followed by its interval, in the headline's order (report_metrics' order),
    then each variant's test perplexity."""
    changes = [key for key in metrics if "/per_token" in key]
    return changes + [key for key in metrics if key.startswith("test_ppl/")]


def significant(value: float, digits: int = 4) -> float:
    """value at `digits` significant digits, as the view shows it (the report keeps the exact one)."""
    return float(f"{value:.{digits}g}")


def saved_view_columns(mlflow_client: MlflowClient, experiment: str) -> list[str]:
    """The results view's columns beyond RESULTS_COLUMNS, as saved now (none if unreadable)."""
    saved = mlflow_client.get_experiment(experiment).tags.get(VIEW_TAG_PREFIX + RESULTS_VIEW)
    try:
        columns = json.loads(json.loads(saved)["state"])["selectedColumns"] if saved else []
    except (ValueError, KeyError, TypeError):
        return []
    return [column for column in columns if column not in RESULTS_COLUMNS]
