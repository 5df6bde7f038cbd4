"""Helpers of the real-engine tests (tests/realengine): the preset's overrides for a short campaign,
a real engine deployed by benchcamp's own deploy, and what an engine could leave behind."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "params.real-cpu.yaml"
REQUIRED = os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1"
TEST_TAG_ENV = "BENCHCAMP_TEST_TAG"  # inherited by every process a test starts: its engines are found by it


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


def engine_processes(tag: str | None = None) -> list[psutil.Process]:
    """Processes of a vLLM tree (the API server runs `vllm serve`, its children rename themselves),
    of the test tagged ``tag`` when given."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            name, cmd = p.info["name"] or "", " ".join(p.info["cmdline"] or [])
            if name.startswith("VLLM::") or ("vllm" in cmd and " serve " in f" {cmd} ") or "vllm.entrypoints" in cmd:
                if p.status() != psutil.STATUS_ZOMBIE and (tag is None or p.environ().get(TEST_TAG_ENV) == tag):
                    found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def outside_files() -> set[str]:
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


def in_use_by_others(tag: str) -> set[str]:
    """The IPC folders of engines still running for other sessions on this machine (not this test's)."""
    used = set()
    for p in engine_processes():
        try:
            env = p.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if env.get(TEST_TAG_ENV) != tag and env.get("VLLM_RPC_BASE_PATH"):
            used.add(env["VLLM_RPC_BASE_PATH"])
    return used


def wait_gone(tag: str, timeout: float = 20.0) -> list[psutil.Process]:
    """The engine processes of the test tagged ``tag`` still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := engine_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left


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
