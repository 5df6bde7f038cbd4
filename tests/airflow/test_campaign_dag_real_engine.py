"""dag.test() of the campaign DAG against the real vLLM (CPU build, tiny model): the trigger conf carries
params.real-cpu.yaml's settings as overrides; deploy_engine launches the real server, the sweep measures it,
MLflow and the report follow, and the stop_engine teardown ends its whole process tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realengine"))
from realengine_support import PRESET, engine_processes, wait_gone  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _dotted(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "per_metric":
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_campaign_dag_measures_the_real_engine_and_its_teardown_ends_the_tree(dagbag, tmp_path, vllm_install):
    import tempfile

    from mlflow.tracking import MlflowClient

    from benchcamp.provision.base import safe_name

    overrides = _dotted(yaml.safe_load(PRESET.read_text())) | {
        "campaign.name": "dagreal", "load.levels": [3], "load.warmup_s": 2, "load.duration_s": 12,
        "load.drain_s": 15, "load.min_requests": 5, "load.max_sched_lag_p99_ms": 2000, "load.max_client_cpu": 1.0,
        "workload.data": str(tmp_path / "agentic-tiny.parquet"), "results.store": str(tmp_path / "results"),
        "tracking.mlflow_uri": f"sqlite:///{tmp_path}/mlflow.db",
    }
    dag = dagbag.dags["benchcamp_campaign"]
    dr = dag.test(run_conf={"overrides": overrides, "matrix": [{}]})
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert dr.state == "success", states
    assert states["engine_config.deploy_engine"] == states["engine_config.stop_engine"] == "success"

    execution = safe_name(f"benchcamp_campaign.{dr.run_id}.m0")
    engines = Path(tempfile.gettempdir()) / "benchcamp-engines" / execution
    assert not wait_gone(engines), "the stop_engine teardown left engine processes"
    assert sorted(p.name for p in engines.iterdir()) == ["engine-argv.json", "engine.log"]  # scratch removed

    run = tmp_path / "results" / "dagreal" / execution
    log = (run / "engine.log").read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in log and "device_config=cpu" in log
    point = json.loads((run / "c3" / "point.json").read_text())
    assert point["server_metrics_available"] and point["server_metrics_delta"]["vllm:generation_tokens"] > 0
    assert json.loads((run / "c3" / "summary.json").read_text())["requests_ok"] >= 5
    runs = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_runs(
        [e.experiment_id for e in MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_experiments()])
    parents = [r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"]
    assert len(parents) == 1 and parents[0].data.tags["benchcamp.engine_kind"] == "vllm"
    assert not engine_processes(engines)
