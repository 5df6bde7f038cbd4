"""Long-running children of the soak (bench/common/soak.py) and of the Airflow tests that start servers
(tests/airflow/): each in its own process group and logged to ``<logs>/<name>.log``; waits that give up as
soon as one of them has died; a stop that ends every group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any


def poll(what: str, fn: Callable[[], Any], timeout: float, every: float = 1.0,
         check: Callable[[], None] = lambda: None, detail: Callable[[], str] = lambda: "") -> Any:
    """``fn()`` every ``every`` s until it returns something true, which it returns; ``check()`` before each
    try (it raises when what ``fn`` waits for cannot come any more). A probe that cannot connect yet counts as
    not yet. RuntimeError after ``timeout`` s, with ``detail()`` (the logs) in its message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        try:
            out = fn()
            if out:
                return out
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(every)
    logs = detail()
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}" + (f":\n{logs}" if logs else ""))


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Processes:
    """Long-running children, each in its own process group and logged to ``<logs>/<name>.log``; ``env`` is
    added to each child's environment and ``cwd`` is where a child runs unless ``start`` names a folder."""

    def __init__(self, logs: Path, cwd: Path | None = None, env: dict[str, str] | None = None):
        self.logs, self.cwd, self.env = logs, cwd, env or {}
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.specs: dict[str, tuple[list[str], dict[str, str], Path | None]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen:
        env = {**env, **self.env}
        self.specs[name] = (argv, env, cwd or self.cwd)
        with open(self.log_path(name), "ab") as out:
            proc = subprocess.Popen(argv, env=env, cwd=cwd or self.cwd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = proc
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        argv, env, cwd = self.specs[name]
        return self.start(name, argv, env, cwd)

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def tail(self, name: str, chars: int = 3000) -> str:
        return f"--- {name} ---\n" + (self.log(name)[-chars:] or "(no log)")

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")

    def wait(self, what: str, fn: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
        """``fn()`` until it is true (see :func:`poll`), while every child stays alive."""
        return poll(what, fn, timeout, every, self.check_alive, lambda: "\n".join(self.tail(n, 1500) for n in self.procs))

    def stop(self, name: str, sig: int = signal.SIGTERM, wait_s: float = 20) -> None:
        """``sig`` to ``name``'s process group; SIGKILL after ``wait_s`` s, and to what its leader left behind."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        signal_group(proc.pid, sig)
        self._reap(proc, time.monotonic() + wait_s)

    def stop_all(self, wait_s: float = 15) -> None:
        """SIGTERM to every child's group at once; SIGKILL to each group after ``wait_s`` s in all."""
        procs = list(self.procs.values())
        self.procs.clear()
        for proc in procs:
            signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for proc in procs:
            self._reap(proc, deadline)

    @staticmethod
    def _reap(proc: subprocess.Popen, deadline: float) -> None:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        signal_group(proc.pid, signal.SIGKILL)  # what the group's leader left behind (a host going down)
