"""The saved view of the runs table (the UI's "Views") that is the study's dashboard, stored as
an experiment tag in the envelope the MLflow 3.17 UI writes for one, and opened by the README's
link (store.ui_url). Only the view's contents here: no store is opened."""

from __future__ import annotations

import json
import time

from mlflow.tracking import MlflowClient

# A saved view of the runs table (the UI's "Views"), stored as an experiment tag the way the UI
# stores one, that ui_url() opens: the columns a reader of this study looks for.
RESULTS_VIEW = "results"
RESULTS_COLUMNS = [
    # Not the wide Dataset column, which would push the metrics out of sight.
    "attributes.`Models`",
    "metrics.`test/ppl`",
    "metrics.`val/ppl`",
    "metrics.`train/loss`",
    "metrics.`model/parameter_count`",
    "params.`variant`",
    "params.`seed`",
    "params.`trainer.max_steps`",
]
VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def save_results_view(mlflow_client: MlflowClient, experiment: str, extra_metrics: list[str]) -> None:
    """The runs table with RESULTS_COLUMNS and extra_metrics (a study's comparisons) added to
    the columns the view has, newest first, saved in the envelope the 3.17 UI writes for a saved
    view. Added, not replaced: the studies of a project share the experiment, and one study's
    report must not take away another's columns."""
    now = int(time.time() * 1000)
    columns = RESULTS_COLUMNS + saved_view_columns(mlflow_client, experiment)
    columns += [column for column in (f"metrics.`{key}`" for key in extra_metrics) if column not in columns]
    state = {"selectedColumns": columns, "orderByKey": "attributes.start_time", "orderByAsc": False}
    envelope = {"name": "headstudy results", "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    mlflow_client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + RESULTS_VIEW, json.dumps(envelope))


def saved_view_columns(mlflow_client: MlflowClient, experiment: str) -> list[str]:
    """The results view's columns beyond RESULTS_COLUMNS, as saved now (none if unreadable)."""
    saved = mlflow_client.get_experiment(experiment).tags.get(VIEW_TAG_PREFIX + RESULTS_VIEW)
    try:
        columns = json.loads(json.loads(saved)["state"])["selectedColumns"] if saved else []
    except (ValueError, KeyError, TypeError):
        return []
    return [column for column in columns if column not in RESULTS_COLUMNS]
