"""Fixtures of the command tests: the capacity tests' small simulated setup (tests/capacity/capacity_support.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capacity"))

from capacity_support import SPEC  # noqa: E402

from benchcamp.workload.generator import generate, parse_spec  # noqa: E402


@pytest.fixture(scope="session")
def tiny_workload():
    return generate(parse_spec(SPEC))
