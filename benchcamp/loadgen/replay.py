"""Session scheduling: who starts when, and the replay of one session.

Pure planning (which worker runs which session, arrival times) is separate
from the asyncio replay so both can be tested on their own.

Times are seconds since the point's epoch. A request's *scheduled* time is
when the workload says it should go out (previous turn's end, joined
subagents, plus think time; or the session's arrival); the sender records the
actual send time next to it, so lateness is measured, never hidden
(coordinated omission).

Session ids: the n-th reuse of a workload session (closed or open loop that
outlasts the workload) gets the suffix ``~n`` on it and on its subagents, so
every replayed session id is distinct.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchcamp.loadgen.dependencies import DependencyIndex, TreeGate
from benchcamp.workload.model import Request, Session, Workload

# A request's body is built this long before its send (or at once, when the wait is shorter):
# early enough that building it never delays the send, late enough that sessions waiting out
# long think times hold no bodies (10,000 AgentX-like sessions x ~1 MB of token ids each).
PREPARE_LEAD_S = 0.05

# (global index j, start time): session j % T of the top-level list, cycle j // T.
Start = tuple[int, float]


def cycle_id(session_id: str, cycle: int) -> str:
    return session_id if cycle == 0 else f"{session_id}~{cycle}"


def closed_slots(level: int, workers: int) -> list[int]:
    """Concurrent sessions per worker, as even as possible, summing to ``level``."""
    base, extra = divmod(int(level), workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


def closed_sequence(worker: int, workers: int) -> Iterator[int]:
    """Global session indices worker ``worker`` takes, in order: worker, worker+W, ...
    (distinct across workers, so cycled ids never collide)."""
    j = worker
    while True:
        yield j
        j += workers


def open_arrivals(rate: float, horizon_s: float, arrival: str, gamma_shape: float, seed: int) -> np.ndarray:
    """Session arrival times in [0, horizon_s) at ``rate`` per second.

    poisson: exponential gaps; gamma: gaps ~ Gamma(shape, 1/(rate*shape)), same
    mean, burstier for shape < 1.
    """
    if rate <= 0:
        raise ValueError(f"load.levels: open-loop rate {rate} must be > 0 sessions/s")
    rng = np.random.default_rng([seed, 0x0BE2])
    n = int(rate * horizon_s * 1.5) + 16
    out: list[np.ndarray] = []
    t = 0.0
    while t < horizon_s:
        if arrival == "gamma":
            gaps = rng.gamma(gamma_shape, 1.0 / (rate * gamma_shape), size=n)
        elif arrival == "poisson":
            gaps = rng.exponential(1.0 / rate, size=n)
        else:
            raise ValueError(f"load.arrival={arrival!r}: use poisson or gamma")
        times = t + np.cumsum(gaps)
        out.append(times)
        t = float(times[-1])
    times = np.concatenate(out)
    return times[times < horizon_s]


def open_plan(
    n_top: int, rate: float, horizon_s: float, workers: int, arrival: str, gamma_shape: float, seed: int
) -> list[list[Start]]:
    """Arrival j goes to worker j % W; it replays top-level session j % n_top."""
    plan: list[list[Start]] = [[] for _ in range(workers)]
    for j, t in enumerate(open_arrivals(rate, horizon_s, arrival, gamma_shape, seed)):
        plan[j % workers].append((j, float(t)))
    return plan


def trace_plan(top: list[Session], scale: float, horizon_s: float, workers: int) -> list[list[Start]]:
    """Sessions at their arrival_s / scale (scale 2 = twice as fast); no cycling."""
    if scale <= 0:
        raise ValueError(f"load.levels: trace time scale {scale} must be > 0")
    order = sorted(range(len(top)), key=lambda i: top[i].arrival_s)
    plan: list[list[Start]] = [[] for _ in range(workers)]
    for k, i in enumerate(order):
        t = top[i].arrival_s / scale
        if t < horizon_s:
            plan[k % workers].append((i, float(t)))
    return plan


@dataclass
class Turn:
    """One request to send, as the replay hands it to the sender."""

    session_id: str
    parent: str | None
    request: Request
    scheduled_s: float
    root: str | None = None  # the session tree's top-level id (None: this session is the root)
    session: Session | None = None  # the workload's session (its recorded turns: AgentX's chat messages)


# prepare(turn) -> opaque payload built before the send (PREPARE_LEAD_S ahead, so building a
# 100K-token body never delays the send), or an awaitable of it (built off the event loop);
# send(turn, payload) -> end time of the request.
Prepare = Callable[[Turn], object]
Send = Callable[[Turn, object], Awaitable[float]]


class Replayer:
    """Replays sessions with think times and subagent fan-out/join (a child with ``joined``
    False runs in the background: its parent goes on, and the session's tree ends after it).

    ``agentx``: AgentX's replay rules (``benchcamp.loadgen.agentx.AgentxReplay``), closed loop
    only. ``busy``: how many requests are running (every client process), for its idle-gap cap."""

    def __init__(
        self,
        workload: Workload,
        prepare: Prepare,
        send: Send,
        now: Callable[[], float],
        stop_at: Callable[[], float],
        agentx: Any = None,
        busy: Callable[[], float] | None = None,
        opens_at: float = 0.0,
    ) -> None:
        self.top = workload.top_level()
        self.children = workload.children()
        self.prepare, self.send = prepare, send
        self.now, self.stop_at = now, stop_at
        self.agentx = agentx
        self.busy = busy
        self.opens_at = opens_at  # the window's start: load.agentx's lanes hold their first profiled turn until it
        self.offset = 0.0  # seconds the idle-gap guard has moved pending turns up, in all
        self._sleepers: dict[int, tuple[float, float]] = {}  # id -> (target, offset when it began)
        self._moved = asyncio.Event()
        self._n_sleep = 0
        # AgentX's cross-stream dependencies (Request.after): one gate per play of a tree (loadgen.dependencies)
        self.deps = DependencyIndex(workload)
        self._trees: dict[str, TreeGate] = {}

    def _target(self, t: float, off0: float) -> float:
        return t - (self.offset - off0)

    async def sleep_until(self, t: float) -> float:
        """Until ``t`` (earlier when the idle-gap guard moves pending turns up); returns the time it woke for."""
        if self.agentx is None or self.agentx.idle_cap is None:
            delay = t - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            # uvloop's timers have 1 ms granularity and may fire early: never send early
            while self.now() < t:
                await asyncio.sleep(0)
            return t
        self._n_sleep += 1
        key, off0 = self._n_sleep, self.offset
        self._sleepers[key] = (t, off0)
        try:
            # a turn past the stop waits too (the guard may move it up), but not past the stop itself
            while (delay := min(self._target(t, off0), max(self.stop_at(), self.now())) - self.now()) > 0:
                moved = self._moved
                try:
                    await asyncio.wait_for(moved.wait(), timeout=delay)
                except TimeoutError:
                    pass
            if self._target(t, off0) >= self.stop_at():
                return self._target(t, off0)
            while self.now() < self._target(t, off0):
                await asyncio.sleep(0)
            return self._target(t, off0)
        finally:
            self._sleepers.pop(key, None)

    async def idle_guard(self, period_s: float = 0.02) -> None:
        """AgentX's idle-gap cap: nothing running and the nearest pending turn more than the cap
        away -> every pending turn moves up by the same amount, so the nearest starts at the cap."""
        assert self.agentx is not None and self.agentx.idle_cap is not None
        cap = self.agentx.idle_cap
        while True:
            await asyncio.sleep(period_s)
            if not self._sleepers or (self.busy() if self.busy else 0) > 0:
                continue
            now = self.now()
            nearest = min(self._target(t, o) for t, o in self._sleepers.values())
            if nearest - now > cap:
                self.offset += nearest - now - cap
                self._moved.set()
                self._moved = asyncio.Event()

    async def session(
        self,
        s: Session,
        cycle: int,
        start_s: float,
        parent: str | None = None,
        first_turn: int = -1,
        root: str | None = None,
        lane: int = -1,
    ) -> float:
        """Run one session from ``start_s``; returns when its last turn (and subagents, background
        ones too) ended. Turns scheduled at or after the stop time are not sent. ``root``: the id of
        the session tree's top-level session (a subagent's routing key, ``benchcamp.router.affinity.session_key``)."""
        sid = cycle_id(s.id, cycle)
        own_tree = root is None and self.deps.active
        root = root or sid
        if own_tree:
            # its first request sent: the primer's turn (a lane's first play; without a warm-up, the next one)
            skip = first_turn >= 0 and self.agentx is not None and not self.agentx.warmup
            self._trees[root] = self.deps.tree(s, first_turn + skip)
        try:
            return await self._session(s, cycle, start_s, sid, parent, first_turn, root, lane)
        finally:
            if own_tree:
                self._trees.pop(root, None)

    async def _session(
        self,
        s: Session,
        cycle: int,
        start_s: float,
        sid: str,
        parent: str | None,
        first_turn: int,
        root: str,
        lane: int,
    ) -> float:
        ready = start_s
        gate = self._trees.get(root)
        background: list[asyncio.Future] = []
        later: dict[int, list[asyncio.Future]] = {}  # subagents joined at a later turn than the next (join_turn)
        requests = s.requests if self.agentx is None else self.agentx.requests(s, cycle, first_turn, root, lane)
        capped = self.agentx is not None and self.agentx.idle_cap is not None
        # load.agentx: the first profiled turn of a lane's first play waits for the barrier (the wall clock's
        # workers share none: the window's start stands for it)
        warm = self.agentx.warmups(s, first_turn) if self.agentx is not None else 0
        hold = warm if self.agentx is not None and self.agentx.hold else 0
        for i, req in enumerate(requests):
            if hold and i == hold:
                ready = max(ready, self.opens_at)
            if req.turn in later:  # this turn joins subagents spawned some turns before
                ready = max([ready, *await asyncio.gather(*later.pop(req.turn))])
            sched = ready + req.think_s
            if sched >= self.stop_at() and not capped:  # capped: the idle-gap guard may move it up
                break
            turn = Turn(sid, parent, req, sched, root, s)
            # a long wait: build the body near its send, not now (not under AgentX's idle-gap cap, whose
            # guard moves a waiting turn up: the turn waits for it in one sleep)
            if not capped and sched - self.now() > PREPARE_LEAD_S:
                await self.sleep_until(sched - PREPARE_LEAD_S)
                if sched >= self.stop_at():
                    break
            payload = self.prepare(turn)
            if inspect.isawaitable(payload):  # built off the event loop (Worker.prepare)
                payload = await payload
            turn.scheduled_s = sched = await self.sleep_until(sched)
            if sched >= self.stop_at():  # the stop moved earlier while we waited
                break
            if gate is not None and req.after and i >= warm:  # after its predecessors (the warm-ups: not gated)
                last = await gate.wait(req.after, self.stop_at() - self.now())
                if last is None or self.now() >= self.stop_at():
                    break
                if last > sched:  # it goes out when its last predecessor ended
                    turn.scheduled_s = sched = last
            ready = await self.send(turn, payload)
            if gate is not None:
                gate.mark((s.id, req.turn), ready)
            kids = self.children.get((s.id, req.turn))
            if kids and ready < self.stop_at():
                background += [
                    asyncio.ensure_future(self.session(k, cycle, ready, sid, root=root))
                    for k in kids
                    if k.joined is False
                ]
                for k in kids:
                    if k.joined is not False and k.joins_at() > req.turn + 1:
                        later.setdefault(k.joins_at(), []).append(
                            asyncio.ensure_future(self.session(k, cycle, ready, sid, root=root))
                        )
                joined = [k for k in kids if k.joined is not False and k.joins_at() <= req.turn + 1]
                if joined:
                    ends = await asyncio.gather(*(self.session(k, cycle, ready, sid, root=root) for k in joined))
                    ready = max([ready, *ends])
        if gate is not None:  # what this play will not send: nothing may wait for it
            gate.mark_unsent(s, self.now())
        background += [f for fs in later.values() for f in fs]  # joins of turns never sent
        if background:  # the tree ends when its background subagents have
            ready = max([ready, *await asyncio.gather(*background)])
        return ready

    def _top(self, j: int) -> tuple[Session, int]:
        return self.top[j % len(self.top)], j // len(self.top)

    async def closed(self, slots: int, sequence: Iterator[int]) -> None:
        """``slots`` concurrent sessions; a finished one is replaced by the next at once."""

        async def slot() -> None:
            empty = 0  # sessions in a row with no request at all
            while self.now() < self.stop_at():
                j = next(sequence)
                s, cycle, first = self.agentx.lane_play(j) if self.agentx is not None else (*self._top(j), -1)
                start = self.now()
                if not s.requests:
                    empty += 1
                    if empty >= len(self.top):
                        return  # nothing to send in the whole workload
                    continue
                empty = 0
                if start + (0.0 if first >= 0 else s.requests[0].think_s) >= self.stop_at():
                    # Its first turn falls at/after the stop, so session() would return
                    # without awaiting and this loop would spin, blocking the event loop
                    # (and every in-flight stream) until the stop. The stop only moves
                    # earlier, so the slot has nothing left to send: end it.
                    return
                await self.session(s, cycle, start, first_turn=first, lane=j)
                if self.agentx is not None and self.now() <= start:  # the play sent nothing (max_input_tokens)
                    empty += 1
                    if empty >= len(self.top):
                        return
                    await asyncio.sleep(0)

        guard = (
            asyncio.ensure_future(self.idle_guard())
            if self.agentx is not None and self.agentx.idle_cap is not None
            else None
        )
        try:
            await asyncio.gather(*(slot() for _ in range(slots)))
        finally:
            if guard is not None:
                guard.cancel()

    async def scheduled(self, starts: list[Start], cycling: bool = True) -> None:
        """Start each session at its time (open loop, trace replay), all concurrently."""
        tasks = []
        for j, t in starts:
            if t >= self.stop_at():
                break
            await self.sleep_until(t)
            if t >= self.stop_at():
                break
            s, cycle = self._top(j) if cycling else (self.top[j], 0)
            tasks.append(asyncio.ensure_future(self.session(s, cycle, t)))
        if tasks:
            await asyncio.gather(*tasks)
