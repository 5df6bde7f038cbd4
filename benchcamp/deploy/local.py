"""The engine as a local process: launch, stop, kill its tree, find it again.

The engine runs in its own session (process group): Ctrl-C in a terminal does
not reach it, and ``stop`` kills the whole group (vLLM forks workers). Its
environment carries the execution id (a retried deploy or the deprovision step
finds leftovers by it) and the results root. Two lifetimes:

- ``die_with_parent`` (``benchcamp run``): the kernel sends SIGTERM to the
  engine when the process that started it dies, even by ``kill -9``
  (Linux ``PR_SET_PDEATHSIG``); elsewhere, the next run in the same results
  root reaps it (:func:`reap_orphans`: its owner process is gone).
- otherwise (the Airflow deploy task): the engine outlives the task that
  started it; the stop_engine teardown (or deprovision) ends it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchcamp.deploy.deployment import Deployment
from benchcamp.secrets import redaction

log = logging.getLogger(__name__)

EXECUTION_ENV = "BENCHCAMP_EXECUTION_ID"
RESULTS_ENV = "BENCHCAMP_RESULTS_DIR"
OWNER_ENV = "BENCHCAMP_OWNER"  # "<pid>:<create time>" of a process the engine must not outlive
LOG_TAIL_LINES = 30
_PR_SET_PDEATHSIG = 1


def _die_with(owner_pid: int) -> Callable[[], None]:
    """preexec_fn: SIGTERM this child when its parent dies; exit at once if it already has."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != owner_pid:  # the parent died before prctl took effect
            os._exit(1)

    return arm


def _owner_tag(pid: int) -> str:
    import psutil

    return f"{pid}:{psutil.Process(pid).create_time():.3f}"


def launch(
    argv: list[str],
    log_dir: Path,
    *,
    api_key: str,
    execution_id: str,
    results_root: str | Path | None,
    die_with_parent: bool,
    meta: dict[str, Any],
    secret_env: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    cwd: Path | None = None,
    log_name: str = "engine.log",
) -> tuple[int, float, Path]:
    """Start ``argv`` (no secrets in it: see redaction.split_engine_secrets) with the key,
    ``secret_env`` and ``extra_env`` in its environment, in ``cwd`` (default: this process's);
    returns (pid, create_time, log path)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / log_name
    (log_dir / f"{log_path.stem}-argv.json").write_text(
        json.dumps({"argv": redaction.mask_argv(argv), **meta}, indent=2)
    )
    env = dict(
        os.environ,
        **(extra_env or {}),
        **(secret_env or {}),
        VLLM_API_KEY=api_key,
        PYTHONUNBUFFERED="1",
        **{EXECUTION_ENV: execution_id, RESULTS_ENV: str(Path(results_root).resolve()) if results_root else ""},
    )
    env.pop(OWNER_ENV, None)
    preexec = None
    if die_with_parent:
        env[OWNER_ENV] = _owner_tag(os.getpid())
        if sys.platform.startswith("linux"):
            preexec = _die_with(os.getpid())
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            cwd=cwd or os.getcwd(),
            preexec_fn=preexec,
        )  # noqa: PLW1509  (prctl must run in the child)
    import psutil

    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = 0.0
    return proc.pid, created, log_path


def log_tail(dep: Deployment, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The engine's last ``lines`` log lines, secrets redacted."""
    if not dep.log_path or not Path(dep.log_path).exists():
        return []
    with open(dep.log_path, errors="replace") as f:
        tail = deque(f, maxlen=lines)
    return [redaction.redact(line.rstrip("\n"), [dep.api_key]) for line in tail]


def tail_text(dep: Deployment) -> str:
    tail = log_tail(dep)
    if not tail:
        return "(no engine log)"
    return f"last {len(tail)} lines of {dep.log_path}:\n" + "\n".join("  | " + t for t in tail)


def _process(dep: Deployment) -> Any:
    """The engine's psutil.Process, or None if gone (or the pid was reused)."""
    return alive(dep.handle)


def alive(proc: dict[str, Any]) -> Any:
    """The psutil.Process of ``{"pid", "create_time"}``, or None if gone (or the pid was reused)."""
    import psutil

    pid = proc.get("pid")
    if not pid:
        return None
    try:
        p = psutil.Process(pid)
        if proc.get("create_time") and abs(p.create_time() - proc["create_time"]) > 1.0:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.NoSuchProcess:
        return None


def is_running(dep: Deployment) -> bool:
    if dep.handle.get("kind") != "local":
        return True
    return _process(dep) is not None


def stop(dep: Deployment, grace_s: float = 10.0) -> None:
    """Stop a local engine: SIGTERM to its process group, SIGKILL after ``grace_s``, then
    remove its scratch folders (caches, temp files).

    Idempotent; remote engines stop with their node (deprovision), a multi-node EC2 topology's local
    router here.
    """
    if dep.handle.get("kind") != "local":
        router = dep.handle.get("router") or {}  # a multi-node EC2 topology's router runs beside the orchestrator
        p = alive(router) if router else None
        if p is not None:
            kill_tree(p, grace_s)
            log.info("router pid %s stopped", router.get("pid"))
        return
    for proc in [dep.handle, *(dep.handle.get("peers") or [])]:  # the head, then a multi-node launch's peers
        p = alive(proc)
        if p is not None:
            kill_tree(p, grace_s)
            log.info("engine pid %s stopped", proc.get("pid"))
    for scratch in dep.handle.get("scratch") or []:  # the engine's caches and temp files; its log stays
        shutil.rmtree(scratch, ignore_errors=True)


def kill_tree(p: Any, grace_s: float) -> None:
    import psutil

    try:
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    try:
        pgid = os.getpgid(p.pid)
    except ProcessLookupError:
        pgid = None
    _signal_all(procs, pgid, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        _signal_all(alive, pgid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)


def _signal_all(procs: list[Any], pgid: int | None, sig: int) -> None:
    import psutil

    if pgid is not None and pgid != os.getpgid(0):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _engines(match: Callable[[dict[str, str]], bool]) -> list[Any]:
    """This user's processes (not this one) whose environment ``match``es."""
    import psutil

    me = os.getuid()
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != me or p.pid == os.getpid():
                continue
            if match(p.environ()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def execution_engines(execution_id: str) -> list[Any]:
    """This user's processes started by ``deploy`` for ``execution_id``."""
    return _engines(lambda env: env.get(EXECUTION_ENV) == execution_id)


def kill_execution_engines(execution_id: str, grace_s: float = 10.0) -> int:
    """Kill every engine process tagged with ``execution_id``; returns how many."""
    procs = execution_engines(execution_id)
    for p in procs:
        kill_tree(p, grace_s)
    if procs:
        log.info("killed %d leftover engine process(es) of %s", len(procs), execution_id)
    return len(procs)


def _owner_alive(tag: str) -> bool:
    import psutil

    pid, _, created = tag.partition(":")
    try:
        return abs(psutil.Process(int(pid)).create_time() - float(created)) < 1.0
    except (psutil.NoSuchProcess, ValueError):
        return False


def orphaned_engines(results_root: str | Path) -> list[Any]:
    """Engines of ``results_root`` that had to die with their owner (``benchcamp run``), whose owner is gone.
    Engines deployed by Airflow tasks have no owner and are never taken for orphans."""
    root = str(Path(results_root).resolve())
    return [
        p
        for p in _engines(
            lambda env: env.get(RESULTS_ENV) == root and bool(env.get(OWNER_ENV)) and env.get(EXECUTION_ENV) is not None
        )
        if not _owner_alive(p.environ().get(OWNER_ENV, ""))
    ]


def reap_orphans(results_root: str | Path, grace_s: float = 10.0) -> list[str]:
    """Kill the orphaned engines of ``results_root``; returns their execution ids."""
    import psutil

    reaped = []
    for p in orphaned_engines(results_root):
        try:
            execution = p.environ().get(EXECUTION_ENV, "?")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        kill_tree(p, grace_s)
        reaped.append(execution)
    return reaped
