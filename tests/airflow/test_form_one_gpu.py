"""The trigger form runs what it shows, on the repository's params.yaml (the rack-scale campaign: a 72-GPU 1P2D
topology): the form's own defaults (the first-run preset) run to success, and so does the one-GPU campaign the
README types into it (another model, no Extra overrides), with dag.test(). The params file is params.yaml with
only where results go and the error limits of a busy 2-core box changed (the deployment's file, not the form):
its workload, sweep windows and load.min_requests are the file's."""

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
    data["baselines"] = {"published": []}
    data["load"] |= {"max_error_rate": 1.0, "max_incomplete_rate": 1.0, "max_sched_lag_p99_ms": 10000,
                     "max_client_cpu": 1.0}
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
    assert night.fingerprint == load_config(params).fingerprint()
    [form] = resolve_items(manual, "benchcamp_campaign", "manual__x", params)
    assert form.config["topology"] is None and form.config["hardware"]["gpu_count"] == manual["gpu_count"]


def test_tp_or_dp_with_the_file_s_topology_is_refused_not_inherited(form_on_params_yaml):
    from benchcamp.campaign.form import resolve_items
    from benchcamp.config import ConfigError

    _, params = form_on_params_yaml
    with pytest.raises(ConfigError, match="tensor_parallel_size: Topology params.yaml sets each role's"):
        resolve_items({"topology": "params.yaml", "tensor_parallel_size": 1}, "d", "r", params)


def _run(bag, conf: dict, caplog) -> tuple[object, list[str], float]:
    import logging
    import time

    from test_campaign_dag import _states

    caplog.set_level(logging.INFO)
    t0 = time.monotonic()
    dr = bag.dags["benchcamp_campaign"].test(run_conf=conf)
    took = time.monotonic() - t0
    states = _states(dr)
    assert dr.state == "success", states
    print(f"dag.test of {sorted(conf) or 'the defaults'}: {took:.0f} s")  # the figure the README quotes
    return dr, [r.getMessage() for r in caplog.records], took


def _read_logs(logged: list[str]) -> None:
    """The task logs a person reads: the sweep's table line per point under the definitions of its figures, the
    verdict's table, the report as a file:// link, where the MLflow run is, and no raw dict after the tables."""
    import logging

    header = next(i for i, m in enumerate(logged) if m.split()[:2] == ["point", "valid"] and "P90 user tok/s" in m)
    assert logged[header - 1].startswith("tok/s/GPU = window rule"), logged[header - 1]
    row = logged[header + 1].split()
    assert row[1] == "yes" and float(row[3].replace(",", "")) > 0, logged[header + 1]
    assert any(m.startswith("metric ") and "verdict" in m for m in logged) or any(
        m.startswith("note: ") for m in logged), logged[-40:]
    assert any(m.startswith("report: file:///") for m in logged), logged[-40:]
    assert any(m.startswith("MLflow: run ") and "mlflow ui --backend-store-uri sqlite:///" in m for m in logged)
    assert not [m for m in logged if m.startswith("Done. Returned value was")], "a raw dict after the tables"
    mlflow_logger = logging.getLogger("mlflow")
    assert mlflow_logger.handlers == [] and mlflow_logger.propagate


def test_the_form_s_defaults_run_to_success(form_on_params_yaml, tmp_path, caplog):
    """Trigger with nothing typed: the first-run preset (one H200, Llama-3.1-8B, the simulated engine over HTTP)."""
    bag, _ = form_on_params_yaml
    _, logged, _ = _run(bag, {}, caplog)
    _read_logs(logged)
    [run_dir] = [p for p in (tmp_path / "results" / "first-run").iterdir() if p.is_dir()]
    cfg = json.loads((run_dir / "campaign.json").read_text())["config"]
    assert cfg["topology"] is None and cfg["hardware"] == cfg["hardware"] | {"gpu": "h200", "gpu_count": 1}


# The one-GPU campaign of the README's Airflow section, field by field (nothing in Extra overrides).
README_ONE_GPU = {"campaign_name": "dagtest", "model": "openai/gpt-oss-20b", "model_profile": "gpt-oss-20b", "levels": [4],
                  "duration_s": 30.0}


def test_a_one_gpu_campaign_typed_as_the_readme_says_runs_to_success(form_on_params_yaml, tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    bag, _ = form_on_params_yaml
    _, logged, _ = _run(bag, README_ONE_GPU, caplog)
    _read_logs(logged)
    [run_dir] = [p for p in (tmp_path / "results" / "dagtest").iterdir() if p.is_dir()]
    campaign = json.loads((run_dir / "campaign.json").read_text())
    cfg = campaign["config"]
    assert cfg["topology"] is None and cfg["hardware"] == cfg["hardware"] | {"gpu": "h200", "gpu_count": 1}
    assert cfg["engine"]["model"] == "openai/gpt-oss-20b" and cfg["load"]["min_requests"] == 20  # the file's
    # the description says what was measured, not params.yaml's DeepSeek on a GB300 rack
    assert cfg["campaign"]["description"] == "openai/gpt-oss-20b on 1 x h200 (one engine), from the trigger form"
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    [parent] = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
                if r.data.tags.get("benchcamp.role") == "campaign"]
    assert parent.data.tags["benchcamp.fingerprint"] == campaign["fingerprint"]
    assert any(parent.info.run_id in m for m in logged if m.startswith("MLflow: run "))
