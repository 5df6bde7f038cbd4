"""No secret at rest in Airflow's metadata database, through dag.test().

Secrets are planted in every input that takes one, each a distinct random value:
- the HF token in an Airflow Variable (``AIRFLOW_VAR_*``, the environment secrets backend),
  named by the form's ``hf_token_ref``;
- an endpoint's API key as the password of an Airflow connection (``AIRFLOW_CONN_*``), the
  endpoint being a simulated engine this test starts with that key;
- S3 credentials (``AWS_SECRET_ACCESS_KEY``) in the workers' environment;
- the local engine's own key (the deployment's key generator returns a planted value);
- and, in a second run, secrets typed as values: a password in the form's endpoint URL, an
  ``--hf-token`` in a matrix entry's ``engine.extra_args`` and an ``--api-key=`` in the conf's
  overrides. That run is refused at resolve_config.
Then every row of every table of the SQLite metadata DB is read (values decoded: JSON, bytes,
zlib, pickle), and what dag.test() printed (its task logs, unmasked): each secret is found 0
times, except the refused run's, found only in ``dag_run.conf`` (Airflow stores the conf the
user typed before any task runs: that is why they are refused there).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from airflow_support import scan_airflow_db, scan_text
from test_campaign_dag import _engines_left, _engines_of, _states, tiny_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _planted(label: str) -> str:
    return f"{label}-{secrets.token_hex(12)}"


@pytest.fixture
def endpoint_engine(tmp_path):
    """A simulated engine that requires ``key``: the 'existing endpoint' of provider=endpoint."""
    from benchcamp.config import load_config
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.provision.base import Node

    key = _planted("endpoint-conn-password")
    cfg = load_config(None, {"engine.model": "meta-llama/Llama-3.1-8B-Instruct", "engine.model_profile": "llama-3.1-8b",
                             "hardware.gpu_count": 1, "engine.tensor_parallel_size": 1,
                             "engine.data_parallel_size": 1, "engine.enable_expert_parallel": False,
                             "engine.extra_args": ["--api-key", key]})
    dep = deploy(Node(kind="local", host="127.0.0.1", node_id="endpoint", meta={}), cfg, log_dir=tmp_path / "ep")
    try:
        wait_ready(dep, 120)
        yield dep.endpoint, key
    finally:
        stop(dep)


def test_campaign_dag_stores_no_secret_in_the_metadata_db(dagbag, airflow_db, tmp_path, mlflow_db, monkeypatch,
                                                          endpoint_engine, capfd):
    import benchcamp.secrets.redaction

    endpoint_url, endpoint_key = endpoint_engine
    planted = {
        "hf_token (airflow variable)": _planted("hf-variable"),
        "endpoint key (airflow connection)": endpoint_key,
        "AWS_SECRET_ACCESS_KEY (env)": _planted("aws-secret"),
        "local engine key": _planted("local-engine-key"),
    }
    monkeypatch.setenv("AIRFLOW_VAR_BENCH_HF_TOKEN", planted["hf_token (airflow variable)"])
    monkeypatch.setenv("AIRFLOW_CONN_BENCH_ENDPOINT",
                       json.dumps({"conn_type": "http", "password": endpoint_key}))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", planted["AWS_SECRET_ACCESS_KEY (env)"])
    local_key = planted["local engine key"]

    def planted_key() -> str:
        benchcamp.secrets.redaction.register(local_key)
        return local_key

    monkeypatch.setattr(benchcamp.secrets.redaction, "new_api_key", planted_key)

    dag = dagbag.dags["benchcamp_campaign"]
    endpoint_entry = {"provider.kind": "endpoint", "provider.endpoint.url": endpoint_url,
                      "provider.endpoint.airflow_conn_id": "bench_endpoint"}
    conf = tiny_conf(tmp_path, [{}, endpoint_entry])
    conf["hf_token_ref"] = "airflow-variable:bench_hf_token"
    dr = dag.test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "success", states
    assert _engines_left(_engines_of(dr)) == []
    runs = sorted(p for p in (tmp_path / "results" / "dagtest").iterdir() if p.is_dir())
    assert len(runs) == 2
    # The references were resolved where needed: the engine got the token, the sweeps the keys.
    local_run = next(r for r in runs if r.name.endswith("m0"))
    assert "hf_token=set" in (local_run / "engine.log").read_text()
    assert all((r / "c4" / "records.parquet").exists() for r in runs)

    # Secrets typed as values: refused at resolve_config, before anything but the run's conf holds them.
    typed = {
        "endpoint_url password (form)": _planted("form-url-password"),
        "--hf-token in engine.extra_args (matrix)": _planted("hf-extra-args"),
        "--api-key= in overrides (conf)": _planted("conf-api-key"),
    }
    refused_conf = tiny_conf(tmp_path, [{"engine.extra_args": ["--hf-token", typed["--hf-token in engine.extra_args (matrix)"]]}])
    refused_conf["endpoint_url"] = f"http://bench:{typed['endpoint_url password (form)']}@127.0.0.1:9"
    refused_conf["overrides"]["engine.extra_args"] = [f"--api-key={typed['--api-key= in overrides (conf)']}"]
    refused = dag.test(run_conf=refused_conf)
    assert refused.state == "failed" and _states(refused)["resolve_config"] == "failed", _states(refused)
    assert "success" not in _states(refused).values(), _states(refused)  # nothing ran on it

    printed = capfd.readouterr()
    assert "secret given as a value" in printed.out + printed.err

    found = scan_airflow_db(Path(airflow_db) / "airflow.db", {**planted, **typed})
    assert {k: v for k, v in found.items() if k in planted and v} == {}, found
    # The refused run's secrets: in the run's conf only (Airflow stores it before any task runs).
    assert {k: sorted(set(v)) for k, v in found.items() if k in typed} == {k: ["dag_run.conf"] for k in typed}, found
    # The scan reads XCom and the rendered fields (the controls): the configs are in both, the deployment's key
    # reference in XCom (Airflow cuts rendered fields at [core]max_templated_field_length, 4096 characters).
    controls = scan_airflow_db(Path(airflow_db) / "airflow.db", {"config": '"extra_args"', "key ref": "engine-env:"})
    assert {"xcom.value", "rendered_task_instance_fields.rendered_fields"} <= set(controls["config"]), controls
    assert "xcom.value" in controls["key ref"], controls
    # dag.test() prints every task's log unmasked: benchcamp's own redaction is all that stands here.
    assert scan_text(printed.out + printed.err, {**planted, **typed}) == {}
