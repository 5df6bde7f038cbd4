"""The simulated engine as `benchcamp engine serve` runs it (a real subprocess) on a free
loopback port, for tests that need the real HTTP surface."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def simulated_engine(model: str = "m", *flags: str) -> Iterator[str]:
    """Yields the engine's base URL; stops it on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchcamp.cli", "engine", "serve", "--model", model, "--model-profile",
         "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "1", "--host", "127.0.0.1", "--port", "0",
         "--enable-prompt-tokens-details", *flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found: list[str] = []
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            m = re.search(r"Uvicorn running on (http://\S+)", line)
            if m:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(60) or not found:
            raise RuntimeError("simulated engine did not start:\n" + "".join(lines))
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
