"""Fixtures of the interop tests; helpers in interop_support.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capacity"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from capacity_support import SPEC  # noqa: E402

from benchcamp.workload.generator import generate, parse_spec  # noqa: E402

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def tiny_workload():
    return generate(parse_spec(SPEC))
