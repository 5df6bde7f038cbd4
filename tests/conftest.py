"""Suite-wide: no test leaves the process's signal state behind for the tests after it.

Dispositions and the blocked mask are inherited by every child a later test starts (an
ignored or blocked SIGINT made a Ctrl-C test's child deaf to Ctrl-C in the full run only).
The guard restores what a test changed and warns with the test's id, so the culprit shows
in the run's warnings summary instead of as another test's failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

import pytest

GUARDED = (signal.SIGINT, signal.SIGTERM)

# Bytecode is cached for every process the suite starts (Airflow components and tasks, benchcamp CLIs,
# servers): `uv sync` installs no .pyc, and under PYTHONDONTWRITEBYTECODE (set on the shared box CI runs on)
# each of those processes compiled every module it imported from source (~1-3 s each). The Makefile
# unexports it too; this covers a bare `uv run pytest`. The .pyc files are git-ignored.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture(autouse=True)
def _signal_state_restored(request: pytest.FixtureRequest):
    handlers = {sig: signal.getsignal(sig) for sig in GUARDED}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    changed = [sig.name for sig in GUARDED if signal.getsignal(sig) is not handlers[sig]]
    now_mask = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if now_mask != mask:
        changed.append(f"blocked mask {sorted(s.name for s in now_mask)}")
    for sig, handler in handlers.items():
        if handler is not None:  # None: set outside Python, nothing to restore to
            signal.signal(sig, handler)
    if changed:
        warnings.warn(f"{request.node.nodeid} left signal state changed: {', '.join(changed)} (restored)",
                      stacklevel=1)


# The synthetic campaigns and the MLflow template live with the tracking tests (tests/tracking/factory.py),
# loaded once under one name for every folder that uses them (the report tests import it by that name).
_spec = importlib.util.spec_from_file_location("benchcamp_test_factory", Path(__file__).parent / "tracking" / "factory.py")
factory = sys.modules["benchcamp_test_factory"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


@pytest.fixture(scope="session")
def mlflow_db_template(tmp_path_factory) -> Path:
    """An empty, migrated MLflow SQLite store, made once per session: a test copies it where its
    config points instead of paying MLflow's migrations (~10 s) in its run. A copy is exactly the
    store a fresh `mlflow` makes."""
    return factory.migrated_template(tmp_path_factory)


@pytest.fixture
def mlflow_db(tmp_path, mlflow_db_template) -> Path:
    """A migrated MLflow store at tmp_path/mlflow.db (where the tests' configs point tracking.mlflow_uri)."""
    db = tmp_path / "mlflow.db"
    shutil.copy(mlflow_db_template, db)
    return db


@pytest.fixture
def sqlite_uri(mlflow_db) -> str:
    return f"sqlite:///{mlflow_db}"


@pytest.fixture(scope="session")
def agentperf_replays():
    """agentperf-local's replay files (`make agentperf-data`; `make test` fetches them first). Where
    they are missing the test skips and says so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run
    sets) it fails instead, so CI cannot pass without the AA-AgentPerf tests."""
    from benchcamp.workload.agentperf import FETCH_HINT, find_replays

    root = find_replays()
    if root is None or not (root / "agentperf-default-v1").is_dir():
        why = f"no agentperf-local 0.3.4 replays here: {FETCH_HINT}"
        if os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1":
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return root


@pytest.fixture(scope="session")
def vllm_install():
    """The real CPU vLLM and its tiny model (`make real-engine`; `make test` builds it first). Where it
    is missing the test skips and says so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run sets) it
    fails instead, so CI cannot pass without the real-engine tests."""
    from benchcamp.deploy import find_vllm

    found = find_vllm()
    if found is None or not found.cpu:
        why = f"no real CPU vLLM here ({found.describe() if found else 'none found'}): run `make real-engine`"
        if os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1":
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return found


# The real single-node Slurm cluster (tests/provision/slurm_cluster.py), one per session for every folder that
# runs jobs on it (the provider's tests, the DAG's): up on first use, jobs cancelled and daemons stopped at the end.
_spec = importlib.util.spec_from_file_location("benchcamp_slurm_cluster", Path(__file__).parent / "provision" / "slurm_cluster.py")
slurm_cluster_support = sys.modules["benchcamp_slurm_cluster"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slurm_cluster_support)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm (SLURM_CONF set in this process's environment); skipped with the reason
    where it cannot be installed (``make slurm``: apt-get as root)."""
    why = slurm_cluster_support.install()
    if why:
        pytest.skip(f"no Slurm test cluster: {why}")
    cluster = slurm_cluster_support.Cluster(tmp_path_factory.mktemp("slurm")).start()
    saved = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        cluster.stop()
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
