"""AgentX's cross-stream dependencies (``Request.after``, the harness's ``replay_predecessors``) gated on both
clocks: in the records, no request is sent before every one of its predecessors in its tree play has ended.

The traces are the conformance tests' seeded generator's (tests/workload/agentx_conformance.py), imported by
``read_agentx``; test_agentx_conformance.py checks that their edges are the harness's own. Each check first
shows it can fail: the same workload with its edges dropped breaks some of them."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workload"))

from agentx_conformance import broken_edges, by_play, random_trace, without_edges  # noqa: E402

from benchcamp.config import AgentxRules  # noqa: E402
from benchcamp.errors import TraceError  # noqa: E402
from benchcamp.loadgen.agentx import AgentxReplay  # noqa: E402
from benchcamp.loadgen.replay import Replayer, Turn  # noqa: E402
from benchcamp.sim.clock.simulate import SimLoad, simulate  # noqa: E402
from benchcamp.sim.engine.settings import EngineSettings  # noqa: E402
from benchcamp.workload.agentx.traces import read_agentx  # noqa: E402
from benchcamp.workload.model import Workload, from_table, to_table  # noqa: E402

SETTINGS = EngineSettings(
    model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64, max_num_batched_tokens=2048
)
SEEDS = 40


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Workload:
    """The generator's traces that the importer accepts (the others test rejection elsewhere), one workload."""
    d = tmp_path_factory.mktemp("traces")
    for i in range(SEEDS):
        f = d / f"gen_{i:04d}.json"
        f.write_text(json.dumps(random_trace(i)))
        try:
            read_agentx(f)
        except TraceError:
            f.unlink()
    return read_agentx(d)


def _virtual(w: Workload, agentx: dict | None = None) -> dict[tuple[str, int, str], tuple[float, float]]:
    """Closed loop, a lane per trace (``agentx``: load.agentx's rules; the window's requests, not the warm-ups,
    which the harness does not gate either)."""
    df = simulate(
        w,
        SETTINGS,
        SimLoad(level=len(w.top_level()), warmup_s=0.0, duration_s=40.0, drain_s=30.0, seed=0, agentx=agentx),
    )
    return by_play(df[df["sent_s"] >= df.attrs["window"][0]])


def _wall(
    w: Workload, stop_s: float = 1.0, rules: dict | None = None
) -> dict[tuple[str, int, str], tuple[float, float]]:
    """The Replayer's own clock logic (asyncio, no HTTP): think times at 1/50, a fake server answers in
    2-12 ms by output length (``rules``: load.agentx's, the lanes' warm-up requests left out)."""
    fast = replace(
        w,
        sessions=[replace(s, requests=[replace(r, think_s=r.think_s / 50) for r in s.requests]) for s in w.sessions],
    )
    level = len(fast.top_level())
    ax = AgentxReplay(rules, fast.top_level(), level, 0) if rules is not None else None
    warmups = set()
    for j in range(level if ax is not None else 0):
        s, cycle, first = ax.lane_play(j)
        warmups |= {(s.id, r.turn, str(cycle or "")) for r in s.requests[max(first, 0) :][: ax.warmups(s, first)]}
    out: dict[tuple[str, int, str], tuple[float, float]] = {}

    async def go() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        now = lambda: loop.time() - t0  # noqa: E731

        async def send(turn: Turn, payload) -> float:
            start = now()
            await asyncio.sleep(0.002 + 0.01 * min(turn.request.output_len, 300) / 300)
            sid, _, play = turn.session_id.partition("~")
            if (sid, int(turn.request.turn), play) not in warmups:
                out[(sid, int(turn.request.turn), play)] = (start, now())
            return now()

        rep = Replayer(fast, lambda t: None, send, now, lambda: stop_s, agentx=ax)
        await rep.closed(level, iter(range(10**6)))

    asyncio.run(go())
    return out


def test_the_workload_file_keeps_the_edges_and_models(workload):
    edges = sum(len(r.after) for _, r in workload.requests())
    assert edges == workload.meta["agentx"]["dependencies"] > 100
    back = from_table(to_table(workload))
    assert back.digest == workload.digest
    assert [r.after for _, r in back.requests()] == [r.after for _, r in workload.requests()]
    models = [r.model for _, r in back.requests()]
    assert models == [r.model for _, r in workload.requests()] and None not in models


def test_virtual_clock_sends_no_request_before_its_predecessors_ended(workload):
    seen, broken = broken_edges(workload, _virtual(without_edges(workload)))
    assert seen > 100 and broken > 0  # ungated, the replay breaks them: the check below can fail
    seen, broken = broken_edges(workload, _virtual(workload))
    assert seen > 100 and broken == 0


def test_virtual_clock_gates_under_load_agentx(workload):
    """The harness's scenario: lanes resume at t* (what comes before counts as ended), warm-ups, cache bust."""
    rules = AgentxRules(scenario="agentx").model_dump()
    seen, broken = broken_edges(workload, _virtual(without_edges(workload), rules))
    assert seen > 50 and broken > 0
    seen, broken = broken_edges(workload, _virtual(workload, rules))
    assert seen > 50 and broken == 0


def test_wall_clock_sends_no_request_before_its_predecessors_ended(workload):
    seen, broken = broken_edges(workload, _wall(without_edges(workload)))
    assert seen > 100 and broken > 0
    seen, broken = broken_edges(workload, _wall(workload))
    assert seen > 100 and broken == 0


def test_wall_clock_gates_under_load_agentx(workload):
    rules = AgentxRules(scenario="agentx").model_dump()
    seen, broken = broken_edges(workload, _wall(without_edges(workload), rules=rules))
    assert seen > 50 and broken > 0
    seen, broken = broken_edges(workload, _wall(workload, rules=rules))
    assert seen > 50 and broken == 0
