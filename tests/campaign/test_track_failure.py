"""Tracking that fails after measuring, in the steps the Airflow tasks wrap: earlier attempts
raise (Airflow retries them), the last one records the failure and lets evaluate render the
report untracked; the verdict fails naming it; a later success clears it.
Virtual clock (the simulator in-process), a real SQLite MLflow store."""

from __future__ import annotations

import pytest
from campaign_support import tiny_config
from mlflow.exceptions import MlflowException

from benchcamp.campaign import Step, StoreLayout, steps
from benchcamp.results.store import LocalStore

pytestmark = pytest.mark.timeout(300)


def test_a_failed_track_is_retried_then_recorded_and_the_verdict_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    # the discard port: nothing listens, MLflow's requests are refused
    broken = tiny_config(tmp_path, **{"load.clock": "virtual", "tracking.mlflow_uri": "http://127.0.0.1:9"})
    store, layout = LocalStore(tmp_path / "results"), StoreLayout.for_execution("tiny", "tiny-track-1")
    workload = steps.prepare_workload(broken, store, layout)
    node = steps.provision(broken, layout.execution_id)
    deployment = steps.deploy_engine(broken, store, layout, node)
    steps.sweep(broken, store, layout, deployment, workload)
    steps.stop_engine(broken, store, layout, deployment)
    steps.deprovision(broken, store, layout, node)
    assert steps.summarize(broken, store, layout, workload, "2026-11-30T00:00:00+00:00").status == "ok"

    with pytest.raises(MlflowException):  # not the last attempt: raised, for Airflow to retry
        steps.track(broken, store, layout)
    assert steps.track(broken, store, layout, last_attempt=True) is None
    evaluation = steps.evaluate(broken, store, layout, None)
    assert store.exists(layout.verdicts) and evaluation.report  # the report is still rendered
    problems, outcome = steps.judge_stored(store, layout)
    assert outcome.exit_code == 1 and outcome.status == "ok"
    assert problems[0].startswith("track: ") and "rerun the track task" in problems[0], problems



def test_a_step_that_succeeds_on_a_retry_clears_its_recorded_failure(tmp_path):
    store, layout = LocalStore(tmp_path / "results"), StoreLayout.for_execution("tiny", "tiny-track-2")
    with pytest.raises(RuntimeError), steps.recorded(store, layout, Step.TRACK):
        raise RuntimeError("MLflow down")
    assert steps.recorded_errors(store, layout) == ["track: MLflow down"]
    with steps.recorded(store, layout, Step.TRACK):
        pass
    assert steps.recorded_errors(store, layout) == []
