"""Each step of benchcamp.campaign.steps on a local store in tmp_path, with the
simulated engine as a real subprocess over loopback HTTP (no mocks)."""

from __future__ import annotations

import json
import os

import psutil
import pytest
from campaign_support import tiny_config

from benchcamp.campaign import (
    CampaignResult,
    Metric,
    PointAborted,
    Status,
    Step,
    StoreLayout,
    judge,
    steps,
)
from benchcamp.campaign.handoff import Summary
from benchcamp.deploy.keys import deployment_api_key
from benchcamp.errors import ExitCode
from benchcamp.metrics import METRICS_WHEN_REPORTED
from benchcamp.results.store import LocalStore

# Its own per worker process: a step stops the execution's engine by its id, and under pytest -n the other
# worker runs these tests at the same time.
EXEC = f"tiny-exec-{os.getpid()}"


@pytest.fixture
def setup(tmp_path):
    store = LocalStore(tmp_path / "results")
    return store, StoreLayout.for_execution("tiny", EXEC)


def _engine_gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_steps_measure_summarize_and_resume_without_measuring_again(tmp_path, setup):
    store, layout = setup
    cfg = tiny_config(tmp_path, **{"load.levels": "[1, 2]"})
    workload = steps.prepare_workload(cfg, store, layout)
    assert store.exists(layout.workload(workload.digest))  # published for other workers
    node = steps.provision(cfg, layout.execution_id)
    deployment = steps.deploy_engine(cfg, store, layout, node)
    key = deployment_api_key(cfg, deployment.to_dict())  # the key lives in the engine's environment only
    assert key and "api_key" not in deployment.to_dict() and key not in json.dumps(deployment.to_dict())
    try:
        assert steps.sweep(cfg, store, layout, deployment, workload) == ["c1", "c2"]
    finally:
        steps.stop_engine(cfg, store, layout, deployment)
        steps.deprovision(cfg, store, layout, node)
    assert deployment.handle.pid is not None and _engine_gone(deployment.handle.pid)
    assert key not in store.get_text(layout.engine_log)
    records = (tmp_path / "results" / "tiny" / EXEC / "c1" / "records.parquet").stat().st_mtime_ns

    # A retried sweep (same execution) finds both points stored: nothing is measured again,
    # not even the endpoint is contacted (this one is gone).
    assert steps.sweep(cfg, store, layout, deployment, workload) == ["c1", "c2"]
    assert (tmp_path / "results" / "tiny" / EXEC / "c1" / "records.parquet").stat().st_mtime_ns == records

    summary = steps.summarize(cfg, store, layout, workload, "2026-11-30T00:00:00+00:00")
    assert summary.status is Status.OK and summary.points == ("c1", "c2") and not summary.error, summary
    assert summary.headline["point"] in ("c1", "c2")
    doc = json.loads(store.get_text(layout.summary_json))
    assert doc["status"] == "ok" and doc["interrupted"] is False and doc["missing_points"] == []
    assert store.get_text(layout.latest) == EXEC
    loaded = CampaignResult.load(tmp_path / "results" / "tiny")  # a campaign's folder: its latest execution
    assert loaded.execution_id == EXEC and loaded.points[0].records_path.exists()
    # the names readers use are written (a CPU KV tier's share only when the engine has one)
    assert set(Metric) - METRICS_WHEN_REPORTED <= set(loaded.points[0].summary)
    assert judge(Summary.from_dict(doc), None) == (ExitCode.OK, [])

    # track on a machine without the workload file (another worker built it): the MLflow
    # dataset is the store's copy, per request, not the stats that stand in for a lost file
    (tmp_path / "wl.parquet").unlink()
    from mlflow.tracking import MlflowClient

    run = MlflowClient(cfg.tracking.mlflow_uri).get_run(steps.track(cfg, store, layout))
    (ds,) = [d.dataset for d in run.inputs.dataset_inputs]
    assert store.url(layout.workload(workload.digest)) in ds.source
    assert "prompt_len" in ds.schema and json.loads(ds.profile)["num_rows"] > 1


def test_summarize_reports_recorded_errors_and_missing_points_and_a_retry_clears_them(tmp_path, setup):
    store, layout = setup
    cfg = tiny_config(tmp_path, **{"load.levels": "[1, 2]"})
    steps.record_error(store, layout, Step.DEPLOY, RuntimeError("engine not ready after 5s"))
    summary = steps.summarize(cfg, store, layout, None, "t0")
    assert summary.status is Status.FAILED and summary.missing_points == ("c1", "c2")
    assert summary.error == "deploy: engine not ready after 5s; not measured: c1, c2"
    code, problems = judge(Summary.from_dict(json.loads(store.get_text(layout.summary_json))), None)
    assert code == ExitCode.FAILED and "not measured: c1, c2" in problems[0]
    steps.clear_error(store, layout, Step.DEPLOY)
    assert steps.recorded_errors(store, layout) == []


def test_an_aborted_point_raises_after_its_records_are_stored_and_the_campaign_fails(tmp_path, setup):
    store, layout = setup
    cfg = tiny_config(tmp_path, **{"load.levels": "[2, 3]", "load.duration_s": 20,
                                   "engine.extra_args": "[--fault, crash-after-requests=4]"})
    workload = steps.prepare_workload(cfg, store, layout, publish=False)
    node = steps.provision(cfg, layout.execution_id)
    deployment = steps.deploy_engine(cfg, store, layout, node)
    try:
        with pytest.raises(PointAborted, match="sweep point c2 aborted"):
            steps.sweep(cfg, store, layout, deployment, workload)
    finally:
        steps.stop_engine(cfg, store, layout, deployment)
        steps.deprovision(cfg, store, layout, node)
    assert store.exists(layout.records("c2")) and not store.exists(layout.point("c3"))
    summary = steps.summarize(cfg, store, layout, workload, "t0")
    assert summary.status is Status.FAILED and summary.missing_points == ("c3",)
    assert summary.error and "sweep: sweep point c2 aborted" in summary.error and "not measured: c3" in summary.error
    assert "crash-after-requests" in store.get_text(layout.engine_log)
    # the abort is the point's one reason, not "too few requests; lengthen load.duration_s" besides
    reasons = json.loads(store.get_text(f"{layout.point('c2')}/summary.json"))["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith("point aborted: engine died"), reasons


def test_nothing_valid_measured_is_a_failed_campaign(tmp_path, setup):
    store, layout = setup
    cfg = tiny_config(tmp_path, **{"load.min_requests": 100000})
    workload = steps.prepare_workload(cfg, store, layout, publish=False)
    node = steps.provision(cfg, layout.execution_id)
    deployment = steps.deploy_engine(cfg, store, layout, node)
    try:
        steps.sweep(cfg, store, layout, deployment, workload)
    finally:
        steps.stop_engine(cfg, store, layout, deployment)
    summary = steps.summarize(cfg, store, layout, workload, "t0")
    assert summary.status is Status.NO_VALID_POINT and (summary.error or "").startswith("no valid point: c2")
    assert judge(summary, None)[0] == ExitCode.FAILED


def test_judge_is_one_table_for_the_cli_and_the_dag():
    from benchcamp.verdicts.compare import Verdict

    ok = Summary(Status.OK)
    regressed = [Verdict.from_dict({"verdict": "regressed", "metric": "p90_user_tokens_per_s", "delta_rel": -0.2,
                                    "baseline": "history", "current": 8.0, "baseline_value": 10.0, "ci_low": None,
                                    "ci_high": None, "reason": ""})]
    assert judge(ok, regressed)[0] == ExitCode.REGRESSION
    code, problems = judge(ok, regressed, trend="/r/trend.html")
    assert problems == ["REGRESSION in p90_user_tokens_per_s -20.0% vs history", "trend: /r/trend.html"], problems
    assert judge(ok, regressed, fail_on_regression=False)[0] == ExitCode.OK
    assert judge(Summary(Status.INTERRUPTED), None)[0] == ExitCode.INTERRUPTED
    assert judge(ok, None, need_verdicts=True)[0] == ExitCode.FAILED  # the DAG's evaluate did not run


def test_a_store_that_cannot_take_the_error_record_leaves_the_steps_own_error(tmp_path):
    """Disk full or read-only results: the step's error names the file it could not write (the
    point's records); recording that error in errors/ fails too, and must not replace it with
    'cannot write sweep.json'. A real read-only tmpfs (skipped where mounting is not allowed)."""
    import subprocess
    import sys
    from pathlib import Path

    from benchcamp.errors import StoreError
    from benchcamp.results.records import point_lock

    sys.path.insert(0, str(Path(__file__).parents[1] / "fakes"))
    from tmpfs import mounted_tmpfs

    with mounted_tmpfs(tmp_path, "128k") as mnt:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)
        store, layout = LocalStore(mnt), StoreLayout.for_execution("tiny", EXEC)
        with pytest.raises(StoreError) as err, steps.recorded(store, layout, Step.SWEEP):
            with point_lock(mnt / layout.point("c1")):
                pass
    msg = str(err.value)
    assert msg.startswith("cannot write records.parquet in ") and "Read-only file system" in msg, msg
    assert "sweep.json" not in msg
