"""Shared fixtures: the deterministic-timing server (workload helpers: loadgen_support.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))

from loadgen_support import MODEL  # noqa: E402
from timed_server import TimedServer  # noqa: E402


@pytest.fixture
def server():
    # The fake server is a thread of this process: with Python's default 5 ms GIL switch
    # interval its timers wake up to ~5 ms late whenever the test's own thread is busy.
    # A short interval keeps it on schedule, as a server process of its own would be.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    srv = TimedServer(ttft_s=0.04, tpot_s=0.01, model=MODEL).start()
    try:
        yield srv
    finally:
        srv.stop()
        sys.setswitchinterval(interval)
