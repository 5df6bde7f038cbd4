"""Both DAGs import cleanly, their params validate, retries/tags/pools are set,
teardowns are in place, and parsing imports nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DAG_IDS = ("benchcamp_campaign", "benchcamp_nightly")


def test_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(DAG_IDS) <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_retries_tags_and_setup_teardown(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert "benchcamp" in dag.tags and len(dag.tags) >= 3
    tasks = {t.task_id: t for t in dag.tasks}
    assert tasks["engine_config.provision_node"].retries >= 1  # retry-safe: reuses the execution's node
    assert tasks["engine_config.provision_node"].is_setup and tasks["engine_config.deploy_engine"].is_setup
    assert tasks["engine_config.stop_engine"].is_teardown and tasks["engine_config.deprovision_node"].is_teardown
    assert tasks["engine_config.deprovision_node"].retries >= 1
    assert tasks["engine_config.deploy_engine"].pool == "gpu_nodes"
    # sweeps of all runs share the load-generator hosts' slots (not one per run)
    assert tasks["engine_config.sweep"].pool == "loadgen_hosts"
    assert tasks["engine_config.sweep"].max_active_tis_per_dagrun is None
    assert tasks["engine_config.summarize"].trigger_rule == "all_done"
    assert tasks["verdict"].trigger_rule == "all_done"
    # a failure that fails the run notifies: bad input (nothing else runs) and the verdict
    # (every other failure: step errors, teardowns, tracking, regressions reach it through the store)
    from tasks.notifiers import CampaignNotifier
    for name in ("resolve_config", "verdict"):
        callbacks = tasks[name].on_failure_callback
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        assert any(isinstance(c, CampaignNotifier) for c in callbacks), name
    # teardowns wait for the sweep
    assert "engine_config.sweep" in tasks["engine_config.stop_engine"].upstream_task_ids


def test_schedules(dagbag):
    assert dagbag.dags["benchcamp_campaign"].schedule is None
    nightly = dagbag.dags["benchcamp_nightly"]
    assert nightly.schedule == "0 2 * * *"
    assert "reap_expired" in {t.task_id for t in nightly.tasks}


def test_params_form_defaults_validate_and_bad_values_are_rejected(dagbag):
    dag = dagbag.dags["benchcamp_campaign"]
    params = dag.params
    for name in ("engine_version", "model", "gpu", "gpu_count", "tensor_parallel_size", "data_parallel_size",
                 "enable_expert_parallel", "max_num_seqs", "max_num_batched_tokens", "workload", "levels",
                 "duration_s", "pricing_profile", "baseline_run_id", "provider", "matrix"):
        p = params.get_param(name)
        assert p.schema.get("title") and p.description and p.schema.get("type"), name
    from benchcamp.profiles import available
    assert params.get_param("gpu").schema["enum"] == available("gpus")       # the GPU profiles' files
    assert {"h200", "b200", "cpu", "mi355x"} <= set(available("gpus"))
    engine_profile = params.get_param("engine_profile")                       # free text, proposals from files
    assert engine_profile.value is None and engine_profile.schema["examples"] == available("engines")
    # whole-number bounds as exclusive ones: Airflow's number input clamps to minimum/maximum without a word
    assert params.get_param("max_num_seqs").schema["exclusiveMinimum"] == 0
    assert not [k for k in params if {"minimum", "maximum"} & set(params.get_param(k).schema)]
    resolved = params.validate()
    # the UI reads "" in a typed field as a missing required value and disables Trigger
    assert not [k for k, v in resolved.items() if v == ""]
    import yaml

    from benchcamp.campaign.form import PARAMS_FILE
    on_file = yaml.safe_load(PARAMS_FILE.read_text())  # tests/params-http.yaml here (conftest)
    # the manual form opens on the first-run preset; the nightly's defaults are the params file's values
    from benchcamp.campaign.form import presets
    first = presets()["first-run"]["set"]
    assert resolved["preset"] == "first-run"
    assert (resolved["gpu"], resolved["gpu_count"], resolved["levels"]) == (
        first["hardware.gpu"], first["hardware.gpu_count"], first["load.levels"])
    nightly = dagbag.dags["benchcamp_nightly"].params.validate()
    assert "preset" not in nightly
    assert (nightly["gpu"], nightly["levels"]) == (on_file["hardware"]["gpu"], on_file["load"]["levels"])
    from airflow.sdk.exceptions import ParamValidationError
    for name, value in (("max_num_seqs", 0), ("gpu", "a100"), ("levels", []), ("provider", "gcp"),
                        ("engine_version", "latest"), ("duration_s", -1), ("gpu_count", -1), ("levels", [-4])):
        with pytest.raises(ParamValidationError):
            params.get_param(name).resolve(value)


def test_form_resolves_to_the_same_config_as_params_yaml(airflow_db):
    from benchcamp.campaign.form import PARAMS_FILE, form_fields
    from benchcamp.config import load_config
    from tasks.campaign_tasks import resolve_items

    defaults = {k: spec["default"] for k, spec in form_fields().items()}
    # Preset params.yaml, every other field left as the form opened: the params file's campaign exactly
    items = resolve_items(dict(defaults, preset="params.yaml"), "benchcamp_campaign", "manual__x")
    assert len(items) == 1
    assert PARAMS_FILE == ROOT / "tests" / "params-http.yaml"  # conftest: the DAG tests' HTTP campaign
    assert items[0].fingerprint == load_config(PARAMS_FILE).fingerprint()
    # ...and one field changed from the form's default still applies
    [one] = resolve_items(dict(defaults, preset="params.yaml", levels=[64]), "benchcamp_campaign", "manual__x")
    assert one.config["load"]["levels"] == [64] and one.config["hardware"]["gpu_count"] == 8
    two = resolve_items(dict(defaults, preset="params.yaml", matrix=[{}, {"engine.max_num_seqs": 64}]), "d", "r")
    assert [i.config["engine"]["max_num_seqs"] for i in two] == [256, 64]
    assert two[0].execution_id != two[1].execution_id


def test_bad_matrix_entry_names_the_field(airflow_db):
    from benchcamp.config import ConfigError
    from tasks.campaign_tasks import resolve_items
    with pytest.raises(ConfigError, match=r"matrix\[1\].*engine.max_num_seq"):
        resolve_items({"matrix": [{}, {"engine.max_num_seq": 1}]}, "d", "r")


def test_parsing_imports_nothing_heavy(airflow_db):
    code = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"b = DagBag(dag_folder={str(ROOT / 'dags')!r})\n"
        "assert not b.import_errors, b.import_errors\n"
        "heavy = [m for m in ('benchcamp.sim.engine', 'benchcamp.loadgen', 'mlflow', 'pandas', 'pyarrow', 'boto3',"
        " 'benchcamp.metrics', 'benchcamp.deploy') if m in sys.modules]\n"
        "print(json.dumps(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
