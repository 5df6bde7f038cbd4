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


def real_sets(tmp: Path, **extra) -> list[str]:
    """--set overrides on params.real-cpu.yaml: every store under ``tmp``, a short sweep."""
    sets = {
        "workload.data": str(tmp / "agentic-tiny.parquet"),
        "workload.spec": str(ROOT / "workloads" / "agentic-tiny.yaml"),
        "results.store": str(tmp / "results"),
        "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db",
        "load.levels": "[2, 4]",
        "load.warmup_s": 3,
        "load.duration_s": 20,
        "load.drain_s": 15,
        "load.min_requests": 10,
        # The engine's worker holds one core, the API server and the client share the other.
        "load.max_sched_lag_p99_ms": 2000,
        "load.max_client_cpu": 1.0,
    } | extra
    return [f"{k}={v}" for k, v in sets.items()]


def real_config(tmp: Path, **extra):
    from benchcamp.config import load_config

    return load_config(PRESET, real_sets(tmp, **extra))


def engine_processes(under: Path | None = None) -> list[psutil.Process]:
    """Processes of a vLLM tree (the API server runs `vllm serve`; its children rename themselves,
    which also blanks their /proc environ), or, given ``under``, every process whose working
    directory lies under that folder: an engine's working directory is its execution's engine folder,
    inherited by its whole tree (its multiprocessing resource trackers too, which unlink the tree's
    shared memory once it is gone) and kept when the tree is orphaned."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if under is not None:
                if Path(p.cwd()).is_relative_to(under):
                    found.append(p)
                continue
            name, cmd = p.info["name"] or "", " ".join(p.info["cmdline"] or [])
            if name.startswith("VLLM::") or ("vllm" in cmd and " serve " in f" {cmd} ") or "vllm.entrypoints" in cmd:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def outside_files(test_tmp: Path) -> set[str]:
    """Where a vLLM would write outside its execution's folder if its environment let it: the system's
    temp folder, the test's own (the TMPDIR of the benchcamp it runs), the home caches, /dev/shm."""
    tmp = Path(tempfile.gettempdir())
    places = [
        *(str(p) for p in test_tmp.glob("vllm*")),
        *(str(p) for p in test_tmp.glob("torchinductor*")),
        *(str(p) for p in tmp.glob("vllm*")),
        *(str(p) for p in tmp.glob("torchinductor*")),
        # not tempfile's tmp* folders: other processes on the machine (an MLflow server's job workers, the
        # other xdist worker's tests) make and remove them there; vLLM's own are psm_* / sem.* / torch files
        *(str(p) for p in Path("/dev/shm").glob("*") if not (p.name.startswith("tmp") and p.is_dir())),
    ]
    for cache in (Path.home() / ".cache" / "vllm", Path.home() / ".config" / "vllm", Path.home() / ".triton"):
        if cache.exists():
            places.append(str(cache))
    return set(places)


def in_use(paths: set[str]) -> set[str]:
    """Those of ``paths`` some live process holds open or mapped (or holds a file inside): another
    session's engine on this machine, not a leftover."""
    held: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            held.update(os.readlink(fd) for fd in (proc / "fd").iterdir())
            held.update(line.split(None, 5)[-1].strip() for line in (proc / "maps").read_text().splitlines()
                        if "/dev/shm/" in line)
        except OSError:
            continue
    return {p for p in paths if any(h == p or h.startswith(p + "/") for h in held)}


def wait_gone(under: Path, timeout: float = 20.0) -> list[psutil.Process]:
    """The engine processes working ``under`` a folder still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := engine_processes(under)) and time.monotonic() < deadline:
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
