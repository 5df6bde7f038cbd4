"""Helpers shared by the load generator tests (a uniquely named module: ``from conftest
import ...`` breaks when pytest collects another test folder's conftest.py first)."""

from __future__ import annotations

from benchcamp.workload.model import Request, Session, Workload

MODEL = "test-model"


def make_workload(n_sessions: int = 4, turns: int = 3, prompt_len: int = 40, output_len: int = 5,
                  think_s: float = 0.0, subagents: dict[int, int] | None = None) -> Workload:
    """``subagents``: {session index: how many subagents after its turn 0}."""
    sessions = []
    for i in range(n_sessions):
        blocks = tuple(range(1000 * i, 1000 * i + 8))
        reqs = [Request(t, blocks, prompt_len + 16 * t, output_len, think_s if t else 0.0) for t in range(turns)]
        sessions.append(Session(f"s{i}", reqs))
        for k in range((subagents or {}).get(i, 0)):
            kid = [Request(0, blocks, prompt_len, output_len, 0.0), Request(1, blocks, prompt_len + 16, output_len, 0.0)]
            sessions.append(Session(f"s{i}.a{k}", kid, parent=f"s{i}", parent_turn=0))
    return Workload("test", 16, 32000, sessions)
