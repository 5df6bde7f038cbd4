"""Shared fixtures: the deterministic-timing server (workload helpers: loadgen_support.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))

from timed_server import TimedServer  # noqa: E402

from loadgen_support import MODEL  # noqa: E402


@pytest.fixture
def server():
    srv = TimedServer(ttft_s=0.04, tpot_s=0.01, model=MODEL).start()
    yield srv
    srv.stop()
