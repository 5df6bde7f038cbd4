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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import numpy as np

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


# prepare(turn) -> opaque payload built before the send (PREPARE_LEAD_S ahead, so building a
# 100K-token body never delays the send); send(turn, payload) -> end time of the request.
Prepare = Callable[[Turn], object]
Send = Callable[[Turn, object], Awaitable[float]]


class Replayer:
    """Replays sessions with think times and subagent fan-out/join."""

    def __init__(
        self, workload: Workload, prepare: Prepare, send: Send, now: Callable[[], float], stop_at: Callable[[], float]
    ) -> None:
        self.top = workload.top_level()
        self.children = workload.children()
        self.prepare, self.send = prepare, send
        self.now, self.stop_at = now, stop_at

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)
        # uvloop's timers have 1 ms granularity and may fire early: never send early
        while self.now() < t:
            await asyncio.sleep(0)

    async def session(
        self, s: Session, cycle: int, start_s: float, parent: str | None = None, root: str | None = None
    ) -> float:
        """Run one session from ``start_s``; returns when its last turn (and subagents) ended.
        Turns scheduled at or after the stop time are not sent. ``root``: the id of the session
        tree's top-level session (a subagent's routing key, ``benchcamp.routing.session_key``)."""
        sid = cycle_id(s.id, cycle)
        root = root or sid
        ready = start_s
        for req in s.requests:
            sched = ready + req.think_s
            if sched >= self.stop_at():
                break
            turn = Turn(sid, parent, req, sched, root)
            if sched - self.now() > PREPARE_LEAD_S:  # a long wait: build the body near its send, not now
                await self.sleep_until(sched - PREPARE_LEAD_S)
                if sched >= self.stop_at():
                    break
            payload = self.prepare(turn)
            await self.sleep_until(sched)
            if sched >= self.stop_at():  # the stop moved earlier while we waited
                break
            ready = await self.send(turn, payload)
            kids = self.children.get((s.id, req.turn))
            if kids and ready < self.stop_at():
                ends = await asyncio.gather(*(self.session(k, cycle, ready, sid, root) for k in kids))
                ready = max([ready, *ends])
        return ready

    def _top(self, j: int) -> tuple[Session, int]:
        return self.top[j % len(self.top)], j // len(self.top)

    async def closed(self, slots: int, sequence: Iterator[int]) -> None:
        """``slots`` concurrent sessions; a finished one is replaced by the next at once."""

        async def slot() -> None:
            empty = 0  # sessions in a row with no request at all
            while self.now() < self.stop_at():
                s, cycle = self._top(next(sequence))
                start = self.now()
                if not s.requests:
                    empty += 1
                    if empty >= len(self.top):
                        return  # nothing to send in the whole workload
                    continue
                empty = 0
                if start + s.requests[0].think_s >= self.stop_at():
                    # Its first turn falls at/after the stop, so session() would return
                    # without awaiting and this loop would spin, blocking the event loop
                    # (and every in-flight stream) until the stop. The stop only moves
                    # earlier, so the slot has nothing left to send: end it.
                    return
                await self.session(s, cycle, start)

        await asyncio.gather(*(slot() for _ in range(slots)))

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
