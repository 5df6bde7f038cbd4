"""The trigger form runs what it shows: on the repository's params.yaml (a 72-GPU 1P2D
topology), a one-GPU campaign typed into the form (h200, 1 GPU, TP1/DP1, Llama-3.1-8B, levels [4]) with no
Extra overrides runs to success with dag.test(): Topology none (the form's default) drops the file's
topology instead of failing on "set hardware.gpu_count=72". The params file is params.yaml with only where
results go and the validity limits of a busy 2-core box changed (the deployment's file, not the form)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchcamp.config import load_config

pytestmark = [pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def _params(tmp: Path) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert data["topology"] and data["hardware"]["gpu_count"] == 72  # the case of the issue
    data["results"] = {"store": str(tmp / "results")}
    data["tracking"] = {"mlflow_uri": f"sqlite:///{tmp}/mlflow.db"}
    data["workload"] |= {"name": "agentic-coding", "spec": "workloads/agentic-coding.yaml",
                         "data": str(tmp / "workload.parquet")}
    data["baselines"] = {"published": []}
    data["load"] |= {"drain_s": 3, "min_requests": 1, "max_error_rate": 1.0, "max_incomplete_rate": 1.0}
    p = tmp / "params.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def form_on_params_yaml(airflow_db, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from benchcamp.campaign import form

    params = _params(tmp_path)
    monkeypatch.setattr(form, "PARAMS_FILE", params)
    return DagBag(dag_folder=str(ROOT / "dags")), params


def test_the_form_s_defaults_are_one_coherent_configuration(form_on_params_yaml):
    bag, params = form_on_params_yaml
    manual = {k: p.value for k, p in bag.dags["benchcamp_campaign"].params.items()}
    nightly = {k: p.value for k, p in bag.dags["benchcamp_nightly"].params.items()}
    # the form: one engine, GPUs = TP x DP; the nightly: params.yaml as it is (its topology, TP/DP unused)
    assert manual["topology"] == "none"
    assert manual["gpu_count"] == manual["tensor_parallel_size"] * manual["data_parallel_size"]
    assert (nightly["topology"], nightly["gpu_count"], nightly["tensor_parallel_size"]) == ("params.yaml", 72, None)
    from benchcamp.campaign.form import resolve_items

    [night] = resolve_items(nightly, "benchcamp_nightly", "scheduled__x", params)
    assert night["fingerprint"] == load_config(params).fingerprint()
    [form] = resolve_items(manual, "benchcamp_campaign", "manual__x", params)
    assert form["config"]["topology"] is None and form["config"]["hardware"]["gpu_count"] == manual["gpu_count"]


def test_tp_or_dp_with_the_file_s_topology_is_refused_not_inherited(form_on_params_yaml):
    from benchcamp.campaign.form import resolve_items
    from benchcamp.config import ConfigError

    _, params = form_on_params_yaml
    with pytest.raises(ConfigError, match="tensor_parallel_size: Topology params.yaml sets each role's"):
        resolve_items({"topology": "params.yaml", "tensor_parallel_size": 1}, "d", "r", params)


def test_a_one_gpu_campaign_typed_into_the_form_runs_to_success(form_on_params_yaml, tmp_path, caplog):
    """Also the task logs a person reads (item 3): the sweep's table line per point, the verdict's table,
    the report as a file:// link, MLflow's loggers handed to Airflow's (INFO is not an error)."""
    import logging

    from mlflow.tracking import MlflowClient
    from test_campaign_dag import _states

    bag, _ = form_on_params_yaml
    typed = {"gpu": "h200", "gpu_count": 1, "tensor_parallel_size": 1, "data_parallel_size": 1,
             "model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
             "enable_expert_parallel": False, "levels": [4], "warmup_s": 1.0, "duration_s": 20.0}
    caplog.set_level(logging.INFO)
    dr = bag.dags["benchcamp_campaign"].test(run_conf=typed)
    states = _states(dr)
    assert dr.state == "success", states
    logged = [r.getMessage() for r in caplog.records]
    header = next(i for i, m in enumerate(logged) if "tok/s/GPU" in m and "P90 user tok/s" in m and "cache hit" in m)
    row = logged[header + 1].split()
    assert row[:2] == ["c4", "yes"] and float(row[3].replace(",", "")) > 0, logged[header + 1]
    assert any(m.startswith("metric ") and "verdict" in m for m in logged) or any(
        m.startswith("note: ") for m in logged), logged[-40:]
    assert any(m.startswith("report: file:///") for m in logged), logged[-40:]
    mlflow_logger = logging.getLogger("mlflow")
    assert mlflow_logger.handlers == [] and mlflow_logger.propagate
    [run_dir] = [p for p in (tmp_path / "results" / "agentic-smoke").iterdir() if p.is_dir()]
    campaign = json.loads((run_dir / "campaign.json").read_text())
    cfg = campaign["config"]
    assert cfg["topology"] is None and cfg["hardware"] == cfg["hardware"] | {"gpu": "h200", "gpu_count": 1}
    # the description says what was measured, not params.yaml's DeepSeek on a GB300 rack
    assert cfg["campaign"]["description"] == "meta-llama/Llama-3.1-8B-Instruct on 1 x h200 (one engine), from the trigger form"
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    [parent] = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
                if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["benchcamp.fingerprint"] == campaign["fingerprint"]
