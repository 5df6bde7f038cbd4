"""The real vLLM (its CPU build and the tiny local model, from `make real-engine`) for the tests
that need an engine's real behaviour.

`make test` builds it first (scripts/real_engine/build.sh; reused once built). Where it is
missing, these tests skip and say so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run sets)
they fail instead, so CI can never pass without running them.

Every test here must leave nothing of the engine behind: no process of its tree (API server,
EngineCore, worker), nothing new in the home cache, /dev/shm or the system temp folder, which
``no_engine_leftovers`` checks around each test.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "params.real-cpu.yaml"
REQUIRED = os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1"


@pytest.fixture(scope="session")
def vllm_install():
    from benchcamp.deploy import find_vllm

    found = find_vllm()
    if found is None or not found.cpu:
        why = f"no real CPU vLLM here ({found.describe() if found else 'none found'}): run `make real-engine`"
        if REQUIRED:
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return found


def real_sets(tmp: Path, **extra) -> list[str]:
    """--set overrides on params.real-cpu.yaml: every store under ``tmp``, a short sweep."""
    sets = {
        "workload.data": str(tmp / "agentic-tiny.parquet"),
        "workload.spec": str(ROOT / "workloads" / "agentic-tiny.yaml"),
        "results.store": str(tmp / "results"),
        "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db",
        "load.levels": "[2, 6]",
        "load.warmup_s": 3,
        "load.duration_s": 15,
        "load.drain_s": 20,
        "load.min_requests": 10,
        # The engine's worker holds one core, the API server and the client share the other.
        "load.max_sched_lag_p99_ms": 2000,
        "load.max_client_cpu": 1.0,
    } | extra
    return [f"{k}={v}" for k, v in sets.items()]


def real_config(tmp: Path, **extra):
    from benchcamp.config import load_config

    return load_config(PRESET, real_sets(tmp, **extra))


def _engine_processes() -> list[psutil.Process]:
    """Processes of a vLLM tree: the API server runs `vllm serve`, its children rename themselves."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            name, cmd = p.info["name"] or "", " ".join(p.info["cmdline"] or [])
            if name.startswith("VLLM::") or ("vllm" in cmd and " serve " in f" {cmd} ") or "vllm.entrypoints" in cmd:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _outside_files() -> set[str]:
    """Where a vLLM would write outside its execution's folder if its environment let it."""
    tmp = Path(tempfile.gettempdir())
    places = [
        *(str(p) for p in tmp.glob("bc-vllm-*")),
        *(str(p) for p in tmp.glob("vllm*")),
        *(str(p) for p in tmp.glob("torchinductor*")),
        *(str(p) for p in Path("/dev/shm").glob("*")),
    ]
    for cache in (Path.home() / ".cache" / "vllm", Path.home() / ".config" / "vllm", Path.home() / ".triton"):
        if cache.exists():
            places.append(str(cache))
    return set(places)


def wait_gone(timeout: float = 20.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := _engine_processes()) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left


@pytest.fixture
def no_engine_leftovers() -> Iterator[None]:
    before_procs = {p.pid for p in _engine_processes()}
    assert not before_procs, f"a vLLM is already running before the test: {sorted(before_procs)}"
    before = _outside_files()
    yield
    left = wait_gone()
    assert not left, f"engine processes left: {[(p.pid, p.name()) for p in left]}"
    new = _outside_files() - before
    assert not new, f"the engine left files outside its execution's folder: {sorted(new)}"


@contextmanager
def running_engine(cfg, tmp: Path, execution_id: str = "realengine-test") -> Iterator:
    """A real engine deployed by benchcamp's own deploy (local provider) and stopped after."""
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.provision import Node

    node = Node(kind="local", node_id="local", host=cfg.provider.local.host, meta={"execution_id": execution_id})
    dep = deploy(node, cfg, log_dir=tmp / "engine", die_with_parent=True, results_root=tmp)
    try:
        wait_ready(dep, cfg.provider.local.startup_timeout_s)
        yield dep
    finally:
        stop(dep)
