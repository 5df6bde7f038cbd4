"""Airflow test setup: a private AIRFLOW_HOME with a migrated SQLite DB and the gpu_nodes pool.

The environment is set when this file is imported, before anything imports
airflow (its settings are read at import time). Under xdist each worker gets
its own home.

`airflow db migrate` runs once per run (both xdist workers share it), into a template (migrated_airflow_db):
every Airflow home of the suite (this process's, the standalone's, the Celery
cluster's) starts from a copy of it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from airflow_support import copy_airflow_db

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(tempfile.mkdtemp(prefix="benchcamp-airflow-home-"))
# made at import, so every process that collects this folder has one, whether or not it ran an Airflow test
atexit.register(shutil.rmtree, HOME, ignore_errors=True)
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    "BENCHCAMP_PROJECT_DIR": str(ROOT),
    # The DAG tests deploy one simulated engine over loopback HTTP: the form's defaults come from the
    # wall-clock HTTP campaign, not from the seed-language default (tests/campaign/test_form_profiles.py
    # checks the form on params.yaml itself).
    "BENCHCAMP_PARAMS": str(ROOT / "tests" / "params-http.yaml"),
}
os.environ.update(AIRFLOW_ENV)


def airflow_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(exe), *args], env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=True)


# The pools the campaign DAG uses, as `airflow pools import` reads them.
POOLS = {
    "gpu_nodes": {"slots": 2, "description": "GPU nodes held by benchcamp campaigns"},
    "loadgen_hosts": {"slots": 1, "description": "load-generator hosts"},
}


def _migrate(home: Path) -> Path:
    env = {"AIRFLOW_HOME": str(home)}
    airflow_cli("db", "migrate", env=env)
    pools = home / "pools.json"
    pools.write_text(json.dumps(POOLS))
    airflow_cli("pools", "import", str(pools), env=env)
    return home / "airflow.db"


@pytest.fixture(scope="session")
def migrated_airflow_db(built_once) -> Path:
    """A migrated Airflow DB with the pools, built once per run (one for both workers under xdist): copy it
    with copy_airflow_db."""
    return built_once("airflow-template-home", _migrate)


@pytest.fixture(scope="session")
def airflow_db(migrated_airflow_db):
    """This process's AIRFLOW_HOME with a migrated DB and the pools the campaign DAG uses."""
    copy_airflow_db(migrated_airflow_db, HOME)
    yield HOME
    shutil.rmtree(HOME, ignore_errors=True)


@pytest.fixture
def dagbag(airflow_db):
    """A fresh parse per test: ``dag.test(run_conf=...)`` resolves the run's conf into the DAG's Param objects
    (``Param.resolve`` keeps the value), so a shared DagBag handed one test's conf (clock, GPU count) to the next."""
    from airflow.dag_processing.dagbag import DagBag
    return DagBag(dag_folder=str(ROOT / "dags"))
