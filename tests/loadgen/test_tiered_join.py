"""A subagent joined at a later turn than its parent's next (``Session.join_turn``, AgentX's tiered
join): the parent goes on meanwhile and the join turn waits for it, on both clocks."""

from __future__ import annotations

import asyncio

from benchcamp.loadgen.replay import Replayer, Turn
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

SETTINGS = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                          max_num_batched_tokens=2048)


def tiered(join_turn: int | None) -> Workload:
    """s0: 4 turns 0.2 s apart; after turn 0 a subagent that waits 1 s, joined at ``join_turn``."""
    reqs = [Request(t, tuple(range(100, 104 + 2 * t)), 64 + 32 * t, 8, 0.2 if t else 0.0) for t in range(4)]
    sub = Session("s0::sa:a", [Request(0, (100, 101, 7, 8), 64, 8, 1.0)], parent="s0", parent_turn=0,
                  kind="subagent", joined=True, fixed_blocks=2, join_turn=join_turn)
    return Workload("tiered", 16, 32000, [Session("s0", reqs, kind="main", fixed_blocks=2), sub])


def _check(sent: dict[tuple[str, int], tuple[float, float]], join_turn: int | None) -> None:
    sub_done = sent[("s0::sa:a", 0)][1]
    wait = 1 if join_turn is None else join_turn
    at = {t: sent[("s0", t)][0] for t in range(wait + 1)}
    assert all(at[t] < sub_done for t in range(1, wait))  # the turns before the join go on meanwhile
    assert at[wait] >= sub_done  # the join turn waits for the subagent


def test_virtual_clock_joins_at_the_join_turn():
    for join_turn in (None, 2, 3):
        df = simulate(tiered(join_turn), SETTINGS, SimLoad(level=1, warmup_s=0.0, duration_s=6.0, drain_s=5.0, seed=0))
        df = df[~df["session_id"].str.contains("~")]  # the first play
        sent = {(r.session_id, int(r.turn)): (float(r.sent_s), float(r.done_s)) for r in df.itertuples()}
        _check(sent, join_turn)


def test_wall_clock_joins_at_the_join_turn():
    """The Replayer's own clock logic (asyncio, no HTTP; a fake sender answers in 50 ms)."""
    for join_turn in (None, 2):
        sent: dict[tuple[str, int], tuple[float, float]] = {}

        async def go(w: Workload, sent: dict = sent) -> None:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            now = lambda: loop.time() - t0  # noqa: E731

            async def send(turn: Turn, payload) -> float:
                start = now()
                await asyncio.sleep(0.05)
                sent.setdefault((turn.session_id, turn.request.turn), (start, now()))
                return now()

            rep = Replayer(w, lambda t: None, send, now, lambda: 1.4)
            await rep.closed(1, iter(range(100)))

        asyncio.run(go(tiered(join_turn)))
        _check(sent, join_turn)
