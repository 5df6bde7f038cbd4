"""A small simulated setup for the capacity tests: Llama-3.1-8B on one H100, a tiny agentic workload."""

from __future__ import annotations

import pytest
from capacity_support import SMALL, SPEC

from benchcamp.config import load_config
from benchcamp.workload.generator import generate, parse_spec


@pytest.fixture(scope="session")
def tiny_workload():
    return generate(parse_spec(SPEC))


@pytest.fixture
def small_cfg():
    return lambda *extra: load_config(None, SMALL + list(extra))
