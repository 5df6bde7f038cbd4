"""Airflow test setup: a private AIRFLOW_HOME with a migrated SQLite DB and the gpu_nodes pool.

The environment is set when this file is imported, before anything imports
airflow (its settings are read at import time). Under xdist each worker gets
its own home.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(tempfile.mkdtemp(prefix="benchcamp-airflow-home-"))
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    "BENCHCAMP_PROJECT_DIR": str(ROOT),
}
os.environ.update(AIRFLOW_ENV)


def airflow_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(exe), *args], env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=True)


@pytest.fixture(scope="session")
def airflow_db():
    """`airflow db migrate` once per session, plus the pools the campaign DAG uses."""
    airflow_cli("db", "migrate")
    airflow_cli("pools", "set", "gpu_nodes", "2", "GPU nodes held by benchcamp campaigns")
    airflow_cli("pools", "set", "loadgen_hosts", "1", "load-generator hosts")
    yield HOME
    shutil.rmtree(HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag
    return DagBag(dag_folder=str(ROOT / "dags"))
