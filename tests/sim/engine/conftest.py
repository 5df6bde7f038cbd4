"""Fixtures that run the simulated vLLM server as a real subprocess on loopback."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from benchcamp.sim import native

ROOT = Path(__file__).resolve().parents[3]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
API_KEY = "sk-test-secret-123"
_URL = re.compile(r"Uvicorn running on (http://\S+)")


def on_python_source(test):
    """Run ``test`` on the simulator's Python source: it spies on internals that the compiled modules let no test
    replace (benchcamp/sim/native.py). Where they are in use, the test reruns in a child pytest with them off."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        if native.state != "native":
            return test(*args, **kwargs)
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", node],
            env={**os.environ, native.ENV: "0"}, cwd=native.ROOT, capture_output=True, text=True, timeout=600,
        )
        assert out.returncode == 0 and " passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]

    return wrapper


class ServerProc:
    """`python -m benchcamp.cli engine serve ...` with its output collected."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self.url: str | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchcamp.cli", "engine", "serve", *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})})
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            m = _URL.search(line)
            if m:
                self.url = m.group(1).replace("0.0.0.0", "127.0.0.1")
                self._ready.set()
        self._ready.set()

    def wait_listening(self, timeout: float = 60) -> str:
        if not self._ready.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.lines))
        return self.url

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def base_args(*extra: str) -> list[str]:
    return ["--model", MODEL, "--host", "127.0.0.1", "--port", "0", "--gpu", "h200", *extra]


@pytest.fixture
def start_server():
    """start_server(*args, env=None) -> ServerProc listening on a free port; stopped after the test."""
    procs: list[ServerProc] = []

    def _start(*args: str, env: dict[str, str] | None = None, wait: bool = True) -> ServerProc:
        p = ServerProc(list(args), env)
        procs.append(p)
        if wait:
            p.wait_listening()
        return p

    yield _start
    for p in procs:
        p.stop()


def start_many(specs: dict[str, tuple[list[str], dict[str, str] | None]], wait: bool = True) -> dict[str, ServerProc]:
    """Launch several servers at once (start-up is mostly imports: overlap them), then wait for all."""
    procs = {name: ServerProc(args, env) for name, (args, env) in specs.items()}
    if wait:
        for p in procs.values():
            p.wait_listening()
    return procs


@pytest.fixture(scope="module")
def shared_servers():
    """Servers for test_server.py, started together: "main" (API key, prompt-token details,
    max-model-len 8192, two unknown vLLM flags) and "env" (positional model, key from VLLM_API_KEY)."""
    procs = start_many({
        "main": (base_args("--api-key", API_KEY, "--enable-prompt-tokens-details", "--max-model-len", "8192",
                           "--swap-space", "4", "--trust-remote-code"), None),
        "env": ([MODEL, "--host", "127.0.0.1", "--port", "0", "-tp", "1"], {"VLLM_API_KEY": "envkey"}),
    })
    yield procs
    for p in procs.values():
        p.stop()


@pytest.fixture(scope="module")
def shared_server(shared_servers):
    return shared_servers["main"]


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_until(pred, timeout: float = 10, every: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return pred()


@pytest.fixture(scope="session")
def eh():
    """Engine-test helpers (constants and functions), as a fixture so test files need no imports."""
    from types import SimpleNamespace

    return SimpleNamespace(MODEL=MODEL, API_KEY=API_KEY, base_args=base_args, http_get=http_get,
                           wait_until=wait_until, start_many=start_many)
