"""Shared fixtures for the workload tests: a small agentic spec."""

from __future__ import annotations

import copy

import pytest

SMALL_SPEC = {
    "name": "tiny-agentic",
    "seed": 11,
    "block_size": 16,
    "vocab_size": 32000,
    "sessions": 6,
    "shared_prefix": {"system_prompt_tokens": 100, "tool_schema_tokens": 60},
    "session": {
        "task_tokens": {"kind": "lognormal", "median": 80, "sigma": 0.5, "min": 5, "max": 400},
        "turns": {"kind": "uniform", "low": 3, "high": 6},
        "output_tokens": {"kind": "lognormal", "median": 30, "sigma": 0.5, "min": 1, "max": 200},
        "tool_result_tokens": {"kind": "lognormal", "median": 50, "sigma": 0.7, "min": 1, "max": 400},
        "think_s": {"kind": "lognormal", "median": 1.0, "sigma": 0.5, "min": 0.1, "max": 10},
        "max_context_tokens": 5000,
    },
    "subagents": {
        "spawn_probability": 0.5,
        "count": {"kind": "uniform", "low": 1, "high": 2},
        "agent": {
            "task_tokens": 40,
            "turns": 2,
            "output_tokens": 20,
            "tool_result_tokens": 30,
            "think_s": 0.5,
            "max_context_tokens": 5000,
        },
    },
}


@pytest.fixture
def small_spec() -> dict:
    return copy.deepcopy(SMALL_SPEC)
