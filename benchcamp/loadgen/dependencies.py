"""Cross-stream dependencies within a session tree (AgentX's ``replay_predecessors``), for both clocks.

A request's ``after`` (``benchcamp.workload.model.Request``) names the requests of its tree that had ended
by its recorded start on the other streams of its scope (``agentx_plan._dependencies``, the harness's
``infer_cross_stream_predecessors``). The replay gates on them as agentx-harness 1.0.12 does
(``aiperf/timing/replay_dependencies.py``, ``ReplayBarrierCoordinator``): a request's own timer runs as
usual (its think time after its session's previous turn, or after its spawn), and when it fires the request
is sent at once if every predecessor has ended, else at the moment the last of them ends; no recorded delay
is added after that (the harness's ``complete`` issues the retained dispatch immediately). Any outcome ends
a request (an error too, as the harness's "any terminal request outcome"). Gating is per play of a tree
(the harness's per-root state).

What the harness seeds as completed at a lane's resume point (``seed_completed_prefixes``), benchcamp
marks ended when the play starts: the root's turns before its first one sent and every subagent they
spawned (benchcamp sends none of them). A session that stops before its last turn (``max_input_tokens``; a
refused prompt does not stop it) marks the rest of its turns and their subagents ended, so nothing waits
on a request that will never be sent. The lane's warm-up requests are not gated (the harness activates its
barriers after the warm-up), but they count as ended once answered.

``DependencyIndex`` (one per workload) knows the edges and the session trees; ``TreeGate`` (one per play of
a tree) holds what has ended and who waits. The wall clock (``loadgen.replay``) awaits ``TreeGate.wait``;
the virtual clock (``simulation.simulate``) registers a callback with ``TreeGate.when_ready``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from benchcamp.workload.model import Key, Session, Workload


class DependencyIndex:
    """The workload's sessions by id and their subagents, for marking unsent parts of a tree ended."""

    def __init__(self, workload: Workload) -> None:
        self.sessions = {s.id: s for s in workload.sessions}
        self.children = workload.children()
        self.active = any(r.after for _, r in workload.requests())

    def unsent(self, s: Session, first: int) -> list[Key]:
        """The requests of ``s`` from position ``first`` on, and of every subagent they spawn (recursively)."""
        out: list[Key] = []
        todo = [(s, first)]
        while todo:
            sess, pos = todo.pop()
            for r in sess.requests[max(pos, 0) :]:
                out.append((sess.id, int(r.turn)))
                todo.extend((k, 0) for k in self.children.get((sess.id, int(r.turn)), ()))
        return out

    def before(self, s: Session, start: int) -> list[Key]:
        """The requests of ``s`` before position ``start`` and every subagent they spawn (a lane's resume point)."""
        out: list[Key] = []
        for r in s.requests[: max(start, 0)]:
            out.append((s.id, int(r.turn)))
            for k in self.children.get((s.id, int(r.turn)), ()):
                out.extend(self.unsent(k, 0))
        return out

    def tree(self, root: Session, start: int) -> TreeGate:
        """A new play of the tree of ``root``, whose first request sent is at position ``start`` (<= 0: turn 0)."""
        gate = TreeGate(self)
        for key in self.before(root, start):
            gate.mark(key, -math.inf)
        return gate


class TreeGate:
    """One play of a session tree: the requests that have ended (and when) and the sends waiting on them."""

    def __init__(self, index: DependencyIndex) -> None:
        self.index = index
        self.ended: dict[Key, float] = {}
        self._waiting: dict[Key, list[tuple[tuple[Key, ...], Callable[[float], Any]]]] = {}

    def missing(self, after: tuple[Key, ...]) -> list[Key]:
        return [k for k in after if k not in self.ended]

    def last_end(self, after: tuple[Key, ...]) -> float:
        """When the last of ``after`` ended (-inf for none, or for requests this play never sends)."""
        return max((self.ended[k] for k in after), default=-math.inf)

    def mark(self, key: Key, t: float) -> None:
        """``key`` ended at ``t``: the sends waiting only on it and on ended ones go (``fn(t)``, in order)."""
        if key in self.ended:
            return
        self.ended[key] = t
        for after, fn in self._waiting.pop(key, ()):
            rest = self.missing(after)
            if rest:
                self._waiting.setdefault(rest[0], []).append((after, fn))
            else:
                fn(self.last_end(after))

    def mark_unsent(self, s: Session, t: float) -> None:
        """``s`` sends nothing more: its requests not ended and the subagents they would spawn count as ended."""
        for r in self.index.sessions.get(s.id, s).requests:  # the workload's (a play may send fewer)
            key = (s.id, int(r.turn))
            if key not in self.ended:
                self.mark(key, t)
                for k in self.index.children.get(key, ()):
                    for sub in self.index.unsent(k, 0):
                        self.mark(sub, t)

    def when_ready(self, after: tuple[Key, ...], fn: Callable[[float], Any]) -> bool:
        """True when every one of ``after`` has ended; else ``fn(t)`` runs when the last one ends at ``t``."""
        rest = self.missing(after)
        if not rest:
            return True
        self._waiting.setdefault(rest[0], []).append((after, fn))
        return False

    async def wait(self, after: tuple[Key, ...], timeout: float) -> float | None:
        """Until every one of ``after`` has ended (-> when the last did), or ``timeout`` seconds (-> None)."""
        if not self.missing(after):
            return self.last_end(after)
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        def release(t: float) -> None:
            if not fut.done():  # (a wait that timed out is cancelled)
                fut.set_result(t)

        self.when_ready(after, release)
        try:
            return await asyncio.wait_for(fut, timeout=max(timeout, 0.0))
        except TimeoutError:
            return None
