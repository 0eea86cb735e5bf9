"""The saved view of the runs table (the UI's "Views") that is the study's dashboard, stored as
an experiment tag in the envelope the MLflow 3.17 UI writes for one, and opened by the README's
link (store.ui_url). Only the view's contents here: no store is opened."""

from __future__ import annotations

import json
import time

from mlflow.tracking import MlflowClient

# A saved view of the runs table (the UI's "Views"), stored as an experiment tag the way the UI
# stores one, that ui_url() opens: the dashboard of the study. The studies' own columns (each
# variant's test perplexity and each comparison with its 95% CI, on the study runs) come first,
# then the model runs' test and validation perplexity; not the wide Dataset column, which would
# push the metrics out of sight.
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
# Runs grouped by variant (MLflow's "Group by": the mean curve of a variant's seeds, with a band),
# and every run shown, not the UI's first 10 (a study trains 12 models).
GROUP_BY_VARIANT = {"aggregateFunction": "average", "groupByKeys": [{"mode": "param", "groupByData": "variant"}]}
SHOW_ALL_RUNS = "SHOW_ALL"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def save_results_view(mlflow_client: MlflowClient, experiment: str, extra_metrics: list[str]) -> None:
    """The runs table: the study columns the view has, then extra_metrics (a study's headline)
    not among them, then RESULTS_COLUMNS; grouped by variant, every run shown, newest first,
    saved in the envelope the 3.17 UI writes for a saved view. Added, not replaced: the studies
    of a project share the experiment, and one study's report must not take away another's."""
    now = int(time.time() * 1000)
    columns = saved_view_columns(mlflow_client, experiment)
    columns += [column for column in (f"metrics.`{key}`" for key in extra_metrics) if column not in columns]
    state = {
        "selectedColumns": columns + RESULTS_COLUMNS,
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "groupBy": GROUP_BY_VARIANT,
        "runsHiddenMode": SHOW_ALL_RUNS,
    }
    envelope = {"name": "headstudy results", "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    mlflow_client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + RESULTS_VIEW, json.dumps(envelope))


def dashboard_metrics(metrics: dict[str, float]) -> list[str]:
    """The headline's keys the view shows, in the order it shows them: each variant's test
    perplexity, then each comparison's per-token change followed by its 95% CI."""
    order = {"": 0, "_ci95_lower": 1, "_ci95_upper": 2}

    def place(key: str) -> tuple:
        stem = key.removesuffix("_ci95_lower").removesuffix("_ci95_upper")
        return (not key.startswith("test_ppl/"), stem, order[key[len(stem) :]])

    return sorted((key for key in metrics if key.startswith("test_ppl/") or "/per_token" in key), key=place)


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
