"""Nothing measured is lost to serialization: a data-parallel engine whose ranks outnumber the sessions leaves
engines idle, whose server-side cache hit rate is NaN (0 hits of 0 queries). dag.test() hands every task's
result on through Airflow's XCom (JSON over the execution API, which refuses NaN), so the run reaching its
verdict is the test; summary.json, the XCom values and MLflow's summary artifact hold null, never NaN."""

from __future__ import annotations

import json

import pytest
from test_campaign_dag import _run_dir, _states, tiny_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _strict(text: str):
    def refuse(name: str):
        raise AssertionError(f"{name} in strict JSON")

    return json.loads(text, parse_constant=refuse)


def test_idle_data_parallel_engines_reach_the_verdict_with_null_hit_rates(dagbag, tmp_path, mlflow_db):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from mlflow.tracking import MlflowClient

    conf = tiny_conf(tmp_path)
    conf.update({"gpu_count": 8, "data_parallel_size": 8, "levels": [2], "clock": "virtual"})
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=conf)
    states = _states(dr)
    assert states["engine_config.summarize"] == "success" and states["engine_config.evaluate"] == "success", states
    assert dr.state == "success", states

    summary = _strict((_run_dir(tmp_path) / "summary.json").read_text())
    headline = summary["headline"]
    engines = {k: v for k, v in headline.items() if k.startswith("cache_hit_rate_server.engine")}
    assert len(engines) == 8 and None in engines.values(), engines  # idle engines: null, not NaN
    assert any(isinstance(v, float) for v in engines.values()), engines  # busy ones measured
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dr.dag_id, XComModel.run_id == dr.run_id)
        handed = {row.task_id: row.value for row in rows if row.key == "return_value"}
    on = _strict(json.dumps(handed["engine_config.summarize"]) if not isinstance(
        handed["engine_config.summarize"], str) else handed["engine_config.summarize"])
    assert on["headline"]["cache_hit_rate_server.engine7"] in (None, engines["cache_hit_rate_server.engine7"])

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exps = [e.experiment_id for e in client.search_experiments()]
    parent = next(r for r in client.search_runs(exps) if r.data.tags.get("benchcamp.role") == "campaign")
    assert all(v == v for v in parent.data.metrics.values())  # no NaN metric
    idle = [k for k, v in engines.items() if v is None]
    assert not set(idle) & set(parent.data.metrics), idle  # not measured: not logged as a number
