"""AgentX's cross-stream dependencies on generated traces: how many the replay's own order already implies,
and how many requests the replay sends before a predecessor ended, with the gate and without it.

    uv run python bench/agentx_dependencies.py [--traces 300] [--out PATH]

The traces: the first ``--traces`` that the importer accepts of the conformance tests' seeded generator
(``tests/workload/agentx_conformance.random_trace``, seeds 0, 1, ...). Their edges are each request's ``after``
(the harness's ``replay_predecessors``; tests/workload/test_agentx_conformance.py checks they are the harness's
own). An edge is *implied* when the replay's order without the gate already puts its predecessor's end before
its request: the same session's earlier turn, a spawn (a child starts after its spawn turn ended) or a join
(the join turn waits for its children), transitively; the others need the gate (``benchcamp.loadgen.dependencies``).
Then every trace replays in virtual time (a closed loop, a lane per trace, 120 s, Llama-3.1-8B on an H100
profile) with the gate and with the edges dropped, and the records say how many edges were broken: a request
sent before a predecessor of the same tree play ended.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common.paths import command, output
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.errors import TraceError
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.workload.agentx.traces import read_agentx
from benchcamp.workload.model import Key, Workload
from tests.workload.agentx_conformance import broken_edges, by_play, random_trace, without_edges

SETTINGS = EngineSettings(
    model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64, max_num_batched_tokens=2048
)


def traces(n: int, folder: Path) -> int:
    """The first ``n`` generated traces the importer accepts, one file each in ``folder``; -> seeds tried."""
    seed = kept = 0
    while kept < n:
        f = folder / f"gen_{seed:04d}.json"
        f.write_text(json.dumps(random_trace(seed)))
        try:
            read_agentx(f)
            kept += 1
        except TraceError:
            f.unlink()
        seed += 1
    return seed


def implied(w: Workload) -> tuple[int, int]:
    """(edges, edges the replay's order without the gate implies: session order, spawn, join)."""
    succ: dict[Key, list[Key]] = {}
    for s in w.sessions:
        for a, b in zip(s.requests, s.requests[1:]):
            succ.setdefault((s.id, a.turn), []).append((s.id, b.turn))
        if s.parent is not None and s.requests:
            succ.setdefault((s.parent, int(s.parent_turn or 0)), []).append((s.id, s.requests[0].turn))
            if s.joined is not False:
                succ.setdefault((s.id, s.requests[-1].turn), []).append((s.parent, s.joins_at()))

    def reaches(a: Key, b: Key) -> bool:
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            if x == b:
                return True
            if x not in seen:
                seen.add(x)
                todo.extend(succ.get(x, ()))
        return False

    edges = [(p, (s.id, r.turn)) for s in w.sessions for r in s.requests for p in r.after]
    return len(edges), sum(reaches(p, q) for p, q in edges)


def broken(w: Workload, gated: Workload, duration_s: float) -> dict:
    t0 = time.perf_counter()
    df = simulate(gated, SETTINGS, SimLoad(level=len(w.top_level()), warmup_s=0.0, duration_s=duration_s, drain_s=60.0))
    wall = time.perf_counter() - t0
    seen, bad = broken_edges(w, by_play(df))
    return {"requests": len(df), "edges_in_records": seen, "broken": bad, "sim_wall_s": round(wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=output("agentx_dependencies"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        seeds = traces(a.traces, Path(d))
        w = read_agentx(Path(d))
    total, by_order = implied(w)
    ungated = without_edges(w)
    doc = {
        "command": command(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "traces": a.traces,
        "seeds_tried": seeds,
        "edges": total,
        "implied_by_order_spawn_join": by_order,
        "needing_the_gate": total - by_order,
        "gated": simulate_note(broken(w, w, a.duration_s)),
        "ungated": simulate_note(broken(w, ungated, a.duration_s)),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


def simulate_note(d: dict) -> dict:
    return dict(d, note="virtual clock, closed loop of one lane per trace; broken: sent before a predecessor ended")


if __name__ == "__main__":
    main()
