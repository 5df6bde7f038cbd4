"""The nightly guard through the nightly DAG: a series of nights, each a dag.test() run of benchcamp_nightly
(every task in order, in this process: the scheduler's order without a scheduler), then an engine setting
planted. The simulated engine in virtual time stands in for the real CPU vLLM (its nights take minutes
each on this machine's shared cores, too slow for a series); halving its batch below the load is the
planted change. Real MLflow store, results store and notifier (log target)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

UNCHANGED, PLANTED = 5, 2


def night_conf(tmp: Path, planted: bool) -> dict:
    overrides = {
        "campaign.name": "guarded", "load.min_requests": 1, "load.max_error_rate": 1.0,
        "load.max_incomplete_rate": 1.0, "workload.data": str(tmp / "workload.parquet"),
        "results.store": str(tmp / "results"), "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db",
        "baselines.published": [],
    }
    return {
        "provider": "local", "engine_kind": "simulated", "clock": "virtual",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
        "gpu": "h200", "gpu_count": 1, "tensor_parallel_size": 1, "data_parallel_size": 1,
        "enable_expert_parallel": False, "workload": "agentic-coding", "levels": [8],
        "warmup_s": 5.0, "duration_s": 60.0, "baseline_run_id": None, "notify": "log",
        # the planted change: the engine batches 2 sequences where 8 agents wait
        "max_num_seqs": 2 if planted else 64,
        "overrides": overrides, "matrix": [{}],
    }


def _verdicts(tmp: Path, dr) -> dict:
    runs = sorted((p for p in (tmp / "results" / "guarded").iterdir() if p.name.startswith(dr.dag_id)),
                  key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "report" / "verdicts.json").read_text())


def test_a_planted_change_ends_in_one_regression_and_one_notification(dagbag, tmp_path, mlflow_db, caplog):
    dag = dagbag.dags["benchcamp_nightly"]
    notify_log = logging.getLogger("benchcamp.verdicts.notify")
    notify_log.addHandler(caplog.handler)  # Airflow's logging setup replaced the root's handlers
    states, regressions, alarms = [], [], []
    try:
        with caplog.at_level(logging.ERROR, logger="benchcamp.verdicts.notify"):
            for night in range(UNCHANGED + PLANTED):
                dr = dag.test(run_conf=night_conf(tmp_path, planted=night >= UNCHANGED))
                doc = _verdicts(tmp_path, dr)
                states.append(str(dr.state))
                guarded = [v for v in doc["verdicts"] if v["baseline_kind"] == "historical"]
                regressions.append(sorted(v["metric"] for v in guarded if v["alarm"] == "opened"))
                # one record may reach caplog twice (this logger's handler and the root's): count messages
                alarms.append(len({r.getMessage() for r in caplog.records if "REGRESSION" in r.getMessage()}))
    finally:
        notify_log.removeHandler(caplog.handler)
    # the unchanged nights: no regression, no notification, every run green
    assert states[:UNCHANGED] == ["success"] * UNCHANGED, states
    assert regressions[:UNCHANGED] == [[]] * UNCHANGED and alarms[UNCHANGED - 1] == 0, (regressions, alarms)
    # the planted change: suspected on its first night, confirmed (exit 3, one notification) on its second
    assert regressions[UNCHANGED] == [] and states[UNCHANGED] == "success", (regressions, states)
    assert regressions[UNCHANGED + 1], regressions
    assert states[UNCHANGED + 1] == "failed" and alarms[-1] == 1, (states, alarms)
    text = next(r.getMessage() for r in caplog.records if "REGRESSION" in r.getMessage())
    assert "engine.max_num_seqs 64 -> 2" in text and "began on night" in text and "trend:" in text, text
