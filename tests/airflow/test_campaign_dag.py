"""dag.test() of the campaign DAG: local provider, simulated engine, tiny load.

Real everything: the engine subprocess over loopback HTTP, the load generator,
a SQLite MLflow store under tmp_path, the results store folder under tmp_path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def tiny_conf(tmp: Path, matrix: list[dict] | None = None) -> dict:
    return {
        "provider": "local", "engine_kind": "simulated",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
        "gpu": "h200", "gpu_count": 1, "tensor_parallel_size": 1, "data_parallel_size": 1,
        "enable_expert_parallel": False, "workload": "agentic-coding", "levels": [4],
        "warmup_s": 0.5, "duration_s": 4.0, "baseline_run_id": None,
        "overrides": {
            "campaign.name": "dagtest", "load.drain_s": 3, "load.min_requests": 1, "load.workers": 1,
            # 2 shared cores: let a busy client still count as a valid point (validity has its own tests)
            "load.max_error_rate": 1.0, "load.max_sched_lag_p99_ms": 10000, "load.max_client_cpu": 1.0,
            "load.max_incomplete_rate": 1.0,
            "workload.data": str(tmp / "workload.parquet"), "results.store": str(tmp / "results"),
            "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db", "baselines.published": [],
        },
        "matrix": matrix or [{}],
    }


def _engines_left(prefix: str) -> list[int]:
    """Engine processes (anything carrying a benchcamp execution id that starts with ``prefix``) still alive."""
    left = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("BENCHCAMP_EXECUTION_ID", "").startswith(prefix) and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return left


def _engines_of(dr) -> str:
    """The execution ids of a DAG run's engines begin so: its own, not those of another test's run of the same DAG
    serving beside it (the other xdist worker's, another session's on a shared machine)."""
    from benchcamp.provision.base import safe_name

    return safe_name(f"{dr.dag_id}.{dr.run_id}.")


def _states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def _run_dir(tmp: Path) -> Path:
    runs = [p for p in (tmp / "results" / "dagtest").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_campaign_dag_test_succeeds_and_leaves_runs_report_and_no_engine(dagbag, tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    dag = dagbag.dags["benchcamp_campaign"]
    dr = dag.test(run_conf=tiny_conf(tmp_path))
    states = _states(dr)
    assert dr.state == "success", states
    assert states["engine_config.stop_engine"] == "success" and states["engine_config.deprovision_node"] == "success"

    run_dir = _run_dir(tmp_path)
    assert (run_dir / "c4" / "records.parquet").exists()
    report = run_dir / "report"
    assert report.is_dir() and any(report.iterdir())
    assert json.loads((report / "verdicts.json").read_text())["regressed"] is False
    engine_log = (run_dir / "engine.log").read_text()
    assert "vLLM API server" in engine_log or engine_log  # kept as an artifact

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps)
    parents = [r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 1
    assert parents[0].data.tags.get("benchcamp.execution_id") == run_dir.name
    # the deployment's API key (token_urlsafe(32): 43 url-safe chars) never reaches MLflow params or tags
    logged = list(parents[0].data.params.values()) + list(parents[0].data.tags.values())
    assert not [v for v in logged if re.fullmatch(r"[A-Za-z0-9_-]{43}", str(v))]
    assert _engines_left(_engines_of(dr)) == []


def test_campaign_dag_test_engine_crash_fails_tears_down_and_keeps_records(dagbag, tmp_path, mlflow_db):
    from benchcamp.results.records import read_records

    dag = dagbag.dags["benchcamp_campaign"]
    crash = [{"engine.extra_args": ["--fault", "crash-after-requests=6"], "load.duration_s": 20}]
    dr = dag.test(run_conf=tiny_conf(tmp_path, crash))
    states = _states(dr)
    assert dr.state == "failed", states
    assert states["engine_config.sweep"] == "failed"
    assert states["engine_config.stop_engine"] == "success"          # teardown ran
    assert states["engine_config.deprovision_node"] == "success"
    assert states["verdict"] == "failed"

    run_dir = _run_dir(tmp_path)
    error = json.loads((run_dir / "summary.json").read_text())["error"]
    assert "aborted" in error and "c4" in error, error          # a clear reason
    records = read_records(run_dir / "c4" / "records.parquet")
    assert (records["status"] == 200).sum() >= 1                 # measured before the crash, kept
    assert "crash-after-requests" in (run_dir / "engine.log").read_text()
    assert _engines_left(_engines_of(dr)) == []


def test_campaign_dag_test_with_no_valid_point_fails_with_the_reason(dagbag, tmp_path, mlflow_db, caplog):
    """Every point measured but invalid (fewer requests than load.min_requests): the DAG run
    fails at its verdict, with the point's reason, as `benchcamp run` exits 1; it never ends green
    without a headline. Measured the way the default params.yaml measures (the nightly run): on the
    virtual clock with a prefill/decode topology, so no engine is deployed and the sweep task drives
    the simulator (cheaper than deploying one: the verdict does not depend on the clock)."""
    dag = dagbag.dags["benchcamp_campaign"]
    role = {"gpus_per_node": 1, "data_parallel_size": 1, "enable_expert_parallel": False,
            "kv_connector": {"kind": "NixlConnector"},
            "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_length": 2.0}}
    conf = tiny_conf(tmp_path)
    conf["gpu_count"], conf["clock"] = 2, "virtual"
    conf["overrides"]["topology"] = {"prefill": role, "decode": role,
                                     "router": {"policy": "session_affinity", "pd_disaggregation": True}}
    # open loop (4 sessions/s): a closed loop this short for 100000 requests is refused before provisioning
    # (test_failed_resolve_config); the open loop's rate is its own, so only the measurement can tell
    conf["load_mode"] = "open"
    conf["overrides"]["load.min_requests"] = 100000
    dr = dag.test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "failed", states
    assert states["engine_config.sweep"] == "success" and states["engine_config.summarize"] == "success"
    assert states["verdict"] == "failed"

    summary = json.loads((_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["status"] == "no valid point" and not summary["headline"] and summary["clock"] == "virtual"
    assert (_run_dir(tmp_path) / "r4" / "records.parquet").exists()  # measured in the sweep task, kept
    assert "fewer than load.min_requests=100000" in summary["error"]
    # the run's failure notice (on_failure_callback, the log notifier) carries the verdict's reason
    notices = [r.getMessage() for r in caplog.records if r.name == "benchcamp.verdicts.notify"]
    assert any("no valid point: r4:" in n and "load.min_requests=100000" in n for n in notices), notices
    assert _engines_left(_engines_of(dr)) == []


def test_campaign_dag_test_deploys_a_1p1d_topology_and_tears_all_of_it_down(dagbag, tmp_path, mlflow_db):
    """The same DAG with a `topology:` override: a prefill and a decode simulated engine joined by the simulated
    KV connector, behind the router; per-role counters in the point; every process gone after teardown."""
    role = {"gpus_per_node": 1, "data_parallel_size": 1, "enable_expert_parallel": False,
            "kv_connector": {"kind": "NixlConnector"},
            "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_length": 2.0}}
    conf = tiny_conf(tmp_path)
    conf["gpu_count"] = 2
    conf["overrides"]["topology"] = {"prefill": role, "decode": role,
                                     "router": {"policy": "session_affinity", "pd_disaggregation": True}}
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "success", states
    assert states["engine_config.stop_engine"] == "success"
    run_dir = _run_dir(tmp_path)
    delta = json.loads((run_dir / "c4" / "point.json").read_text())["server_metrics_delta"]
    assert delta["decode/vllm:external_prefix_cache_hits"] > 0 and delta["prefill/vllm:prompt_tokens"] > 0
    log = (run_dir / "engine.log").read_text()
    assert "==> engine-p0 (prefill)" in log and "==> engine-d0 (decode)" in log
    assert _engines_left(_engines_of(dr)) == []

