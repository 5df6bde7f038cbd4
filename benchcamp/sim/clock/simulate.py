"""Virtual time: replay a workload through the engine core as a discrete-event simulation.

Same session semantics as the benchmark client (``benchcamp.loadgen.replay``):
- closed: ``level`` concurrent top-level sessions; a finished session is
  replaced at once by the next one (cycling through the workload; the n-th
  reuse gets the id suffix ``~n``, also on its subagents);
- open: session starts at ``level``/s (Poisson or gamma gaps, the client's own
  arrival generator and seed); trace: sessions at ``arrival_s / level``;
- a turn is scheduled at the end of the previous turn (and of the subagents it
  joined) plus its think time; turns scheduled at or after the stop time
  (``warmup_s + duration_s``) are not sent; subagents start when their parent
  turn ends (if before the stop), run concurrently, and the parent's next turn
  waits for all of them;
- requests still running at ``stop + drain_s`` are recorded as failed
  (status 0, ``drain-timeout``), as the client does;
- a request the server would refuse (longer than the context, bad lengths) is
  checked by the server's own function (``openai_format.validate_lengths``) and
  recorded as failed at its send time with the status and the error text the
  client records for that response (``HTTP 400: {body}``); its session goes on
  with the next turn, as the client's does.

The engine core is the one behind the HTTP server, stepped on a virtual
clock, with the serving front end in front of it (``benchcamp.sim.engine.frontend``:
one FIFO server, seeded per request id): a request sent at t reaches the engine
when the front end has tokenized it and joins the first step that starts then
or later; a step's tokens (one chunk per token, as vLLM streams) reach the
client when the front end has streamed them, after the work queued before them. The scheduled and sent times are equal (no client lag).
The engine steps until the next event that may reach it (``_horizon``: every event but the front end's
streaming of a step that finished nothing) in one call where its ranks only decode (``core.Router`` quiet runs;
a deployment bounds each instance by its own rule, ``fleet.Fleet._horizon``).
Records follow ``benchcamp.results.records.SCHEMA``; the engine's counters (prefix cache
queries/hits, preemptions, ...) and run statistics are in ``df.attrs``.
Deterministic: the same inputs give identical records. The command line (``benchcamp engine simulate``) is
``benchcamp.sim.clock.cli``: this module is compiled (``benchcamp.sim.native``), and what reads pandas' results
stays out of it (pandas' stubs type numpy scalars as int, which compiled code checks).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from benchcamp.router.affinity import PER_ENGINE_COUNTERS, engine_key, header_value
from benchcamp.sim.engine.frontend import FrontEnd
from benchcamp.workload.model import Request, Session, Workload  # at run time: compiled dataclasses' field types

if TYPE_CHECKING:
    import pandas as pd

    from benchcamp.sim.engine.settings import EngineSettings

DRAIN_ERROR = "drain-timeout"


@dataclass
class _Run:
    """One replayed session (top-level or subagent) in flight."""

    session: Session
    cycle: int
    sid: str
    parent: str | None
    ready: float
    on_done: Callable[[_Run], None]  # called with the run once it has nothing more to send
    idx: int = 0
    pending: int = 0
    base: tuple | None = None  # (blocks, prompt_len, hashes) of its last prompt: the next one extends it
    start: float = 0.0
    stalls: int = 0  # closed loop: sessions in a row before it in its slot that took no time
    root: str = ""  # the session tree's top-level id: its routing key (benchcamp.router.affinity.session_key)
    bg: int = 0  # background subagents still running
    own_done: bool = False  # nothing more to send of its own (it ends when bg is 0 too)
    primer: bool = False  # its first request is its lane's warm-up primer (a barrier waits for it)
    warm: int = 0  # leading requests that are its lane's warm-up (the primer, then load.agentx's extra ones)
    # subagents joined at a later turn than the next (Session.join_turn): per join turn, how many still
    # run and the latest end of those that ended; ``waiting``: the turn held back for them (-1: none)
    later: dict[int, int] = field(default_factory=dict)
    later_ready: dict[int, float] = field(default_factory=dict)
    waiting: int = -1
    gate: Any = None  # its tree play's TreeGate (AgentX's cross-stream dependencies: loadgen.dependencies)


@dataclass
class _Inflight:
    run: _Run
    req: Request
    scheduled: float


@dataclass
class SimStats:
    requests_sent: int = 0
    steps: int = 0
    calls: int = 0  # engine calls that timed them (a quiet run times many steps in one)
    simulated_s: float = 0.0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SimLoad:
    """What a point replays: its load (the ``load`` section's meaning, as the benchmark client reads it).

    ``mode``/``level``: closed (concurrent sessions), open (session starts per second, ``arrival`` gaps with
    ``gamma_shape``) or trace (a time scale); ``warmup_s`` + ``duration_s``: the window, ``drain_s``: how long
    requests may still run after it; ``max_requests``: a cap on the window's requests; ``point``: the label the
    records carry. ``agentx``: the closed loop's lane rules (``benchcamp.loadgen.agentx``). ``session_affinity``:
    requests carry their session tree's routing key (``load.session_header`` set), and the DP router honors it;
    False: routed by load and cached prefix. ``prompt``: what the client sends
    (``benchcamp.sim.engine.frontend.PROMPT_KINDS``: token ids, text, chat), which sets the front end's per-token
    costs."""

    mode: str = "closed"
    level: float = 8
    warmup_s: float = 10.0
    duration_s: float = 40.0
    drain_s: float = 30.0
    seed: int = 0
    point: str = ""
    max_requests: int | None = None
    arrival: str = "poisson"
    gamma_shape: float = 1.0
    agentx: Any = None
    session_affinity: bool = True
    prompt: str = "ids"


@dataclass(frozen=True)
class SimRun:
    """How a point is run: on the one engine of its settings, or (``topology`` + ``role_settings``, from
    ``benchcamp.sim.clock.fleet.simulation_plan``) on every engine of a deployment (prefill + decode, several
    instances) behind its router; ``exact_hashes``: hash synthesised token ids (slow) instead of the equivalent
    block-id keys."""

    topology: Any = None
    role_settings: dict[str, EngineSettings] | None = None
    exact_hashes: bool = False


class Simulation:
    def __init__(self, workload: Workload, settings: EngineSettings, load: SimLoad, run: SimRun):
        from benchcamp.sim.engine.core import Router
        from benchcamp.sim.engine.hashing import WorkloadHasher

        mode, level, warmup_s, duration_s = load.mode, load.level, load.warmup_s, load.duration_s
        seed, max_requests, topology = load.seed, load.max_requests, run.topology
        if mode not in ("closed", "open", "trace"):
            raise ValueError(f"mode={mode!r}: use closed, open or trace")
        if level <= 0:
            raise ValueError(f"level={level}: must be > 0 (closed: sessions, open: sessions/s, trace: time scale)")
        if mode == "closed" and level != int(level):
            raise ValueError(f"level={level}: closed-loop levels are session counts; use a whole number")
        self.wl, self.settings, self.mode, self.level = workload, settings, mode, level
        self.warmup_s, self.drain_s, self.point = warmup_s, load.drain_s, load.point
        self.stop_at = warmup_s + duration_s
        self.duration_s, self.warmup_s0 = duration_s, warmup_s
        self._latest = math.inf
        self.late_window = False  # the gate had not opened by warmup_s + max_warmup_s
        self.seed, self.max_requests, self.arrival, self.gamma_shape = (
            seed,
            max_requests,
            load.arrival,
            load.gamma_shape,
        )
        self.engine: Any
        self.topology_run = topology is not None
        if topology is not None:  # several engines (benchcamp.sim.clock.fleet): one clock each, a router in front
            from benchcamp.sim.clock.fleet import Fleet

            self.engine = Fleet(topology, run.role_settings or {}, self._at, seed)
        else:
            self.engine = Router(settings)
        # vLLM runs one API server per DP rank unless --api-server-count says otherwise ("Defaulting api_server_count
        # to data_parallel_size": vllm/entrypoints/cli/serve.py, 0.32); a topology counts its roles' (Fleet.api_servers)
        servers = self.engine.api_servers() if topology is not None else settings.data_parallel_size
        self.front = FrontEnd(settings.engine_spec(), seed, servers, load.prompt)
        # load.session_header set: each request carries its session tree's routing key, which the
        # DP router honors (as the HTTP server does with the header; benchcamp.router.affinity)
        self.session_affinity = load.session_affinity
        self._ends = np.zeros(1024)  # end time of each step, in order ...
        self._shown = np.zeros(1024)  # ... and when the front end delivered its tokens
        self._delivered = 0
        self.engine.keep_timelines = True
        self.top = workload.top_level()
        if not self.top:
            raise ValueError(f"workload {workload.name!r} has no top-level sessions")
        self.children = workload.children()
        from benchcamp.loadgen.dependencies import DependencyIndex

        self.deps = DependencyIndex(workload)  # Request.after: a request waits for its predecessors' ends
        self.agentx = None
        if load.agentx is not None and mode == "closed":
            from benchcamp.loadgen.agentx import AgentxReplay

            self.agentx = AgentxReplay(load.agentx, self.top, int(level), seed, block_size=workload.block_size)
        # load.steady.window_opens (benchcamp.loadgen.agentx): after_primers, the window opens once every lane's
        # primer has been answered (the barrier); after_turnover, once the loop has then also finished
        # turnover_sessions x level plays (each lane, on average, started afresh that often); at warmup_s at the
        # earliest and warmup_s + max_warmup_s at the latest; it lasts duration_s from then
        gate = self.agentx is not None and self.agentx.barrier and mode == "closed" and max_requests is None
        self.gated = gate
        self.primers_left = self.agentx.primers() if gate and self.agentx is not None else 0
        self.turnover_left = math.ceil(self.agentx.turnover * level) if gate and self.agentx is not None else 0
        self.barrier_s: float | None = None
        self.window_open = not gate
        if gate and self.agentx is not None:
            latest = warmup_s + self.agentx.max_warmup_s
            self.warmup_s, self.stop_at = latest, latest + duration_s  # until the gate opens it earlier
            self._latest = latest
        # load.agentx: first plays hold their first profiled turn until the window opens (the harness's barrier)
        self.hold = gate and self.agentx is not None and bool(self.agentx.hold)
        self._held: list[_Run] = []
        self._gates: dict[str, Any] = {}  # a tree play's root sid -> its TreeGate, while the tree runs
        self.idle_shifts = 0
        self.idle_skipped_s = 0.0
        self.hasher = WorkloadHasher(workload.block_size, settings.block_size, workload.vocab_size, run.exact_hashes)
        self._hashes: dict[tuple[str, int], list[int]] = {}
        self._events: list[tuple[float, int, Callable[..., object], tuple]] = []
        self._hot: list[float] = []  # times of the events that may reach the engine (``_horizon``)
        self._eseq = 0
        self._next_top = 0
        self.inflight: dict[str, _Inflight] = {}
        self.records: list[dict[str, Any]] = []
        self.stats = SimStats()
        self.window_sent = 0  # requests sent in the window (load.max_requests caps it)
        self.now = 0.0

    # -- events ----------------------------------------------------------------
    def _at(self, t: float, fn: Callable[..., object], *args: Any) -> None:  # fn's result is unused
        heapq.heappush(self._events, (t, self._eseq, fn, args))
        self._eseq += 1
        if fn != self._stream:
            heapq.heappush(self._hot, t)

    def _horizon(self, now: float) -> float:
        """The next event that may reach the engine (all but ``_stream``'s): a quiet run stops before it."""
        hot = self._hot
        while hot and hot[0] <= now:  # the loop has run every event up to now
            heapq.heappop(hot)
        return hot[0] if hot else math.inf

    def _delivery(self, res: Any, tokens: int) -> None:
        """Schedule the front end's streaming of a step result's tokens: a quiet run's steps one by one."""
        if res.ends is not None:
            ends = res.ends.tolist()
            for end in ends[:-1]:
                self._at(end, self._stream, end, res.step_tokens)
            if res.finished:  # its last step's
                self._at(ends[-1], self._deliver, ends[-1], res.step_tokens, res.finished, res.timelines)
            else:
                self._at(ends[-1], self._stream, ends[-1], res.step_tokens)
        elif res.finished:
            self._at(res.end_s, self._deliver, res.end_s, tokens, res.finished, res.timelines)
        else:
            self._at(res.end_s, self._stream, res.end_s, tokens)

    # -- sessions ---------------------------------------------------------------
    def _start_session(
        self,
        s: Session,
        cycle: int,
        start: float,
        parent: str | None,
        on_done: Callable[[_Run], None],
        base: tuple | None = None,
        stalls: int = 0,
        first_turn: int = -1,
        root: str | None = None,
        lane: int = -1,
    ) -> _Run:
        sid = s.id if cycle == 0 else f"{s.id}~{cycle}"
        warm = 0
        if self.agentx is not None:
            warm = self.agentx.warmups(s, first_turn)
            s = self.agentx.play(s, cycle, first_turn, root or sid, lane)
        gate = None
        if self.deps.active:
            if parent is None:  # a tree play's root: its gate (its first request sent: the primer's turn, or the next)
                skip = first_turn >= 0 and self.agentx is not None and not self.agentx.warmup
                gate = self._gates[sid] = self.deps.tree(self.deps.sessions[s.id], first_turn + skip)
                on_done = self._tree_done(on_done)
            else:
                gate = self._gates.get(root or sid)
        run = _Run(s, cycle, sid, parent, start, on_done, base=base, start=start, stalls=stalls, root=root or sid)
        run.gate = gate
        run.primer = first_turn >= 0 and self.agentx is not None and self.agentx.warmup and self.primers_left > 0
        run.warm = min(warm, len(s.requests))  # the lane's warm-up requests: its primer and the extra ones
        self._issue_next(run)
        return run

    def _tree_done(self, on_done: Callable[[_Run], None]) -> Callable[[_Run], None]:
        def done(run: _Run) -> None:
            self._gates.pop(run.sid, None)
            on_done(run)

        return done

    def _finish(self, run: _Run) -> None:
        """The run has nothing more to send; it ends once its background subagents have."""
        run.own_done = True
        if run.gate is not None:  # what it will not send: nothing may wait for it
            run.gate.mark_unsent(run.session, self.now)
        if run.bg == 0:
            run.on_done(run)

    def _issue_next(self, run: _Run) -> None:
        reqs = run.session.requests
        if run.idx >= len(reqs):
            self._finish(run)
            return
        if run.primer and run.idx == run.warm and not self.window_open and self.hold:
            self._held.append(run)  # load.agentx: its first profiled turn waits for the barrier
            return
        turn = reqs[run.idx].turn
        if run.later.get(turn, 0) > 0:  # a subagent this turn joins still runs: it issues the turn when it ends
            run.waiting = turn
            return
        if turn in run.later_ready:
            run.ready = max(run.ready, run.later_ready.pop(turn))
        sched = run.ready + reqs[run.idx].think_s
        if sched >= self.stop_at and (self.agentx is None or self.agentx.idle_cap is None):
            self._finish(run)  # (under AgentX's idle-gap cap it waits: the cap may move it up)
            return
        after = reqs[run.idx].after
        if run.gate is not None and after and run.idx >= run.warm:  # (the lane's warm-ups are not gated)
            self._at(sched, self._gated, run, sched)
            return
        self._at(sched, self._send, run, sched)

    def _gated(self, run: _Run, sched: float) -> None:
        """The turn's own time has come: it goes now if its predecessors have ended, else when the last one does
        (the harness's ReplayBarrierCoordinator: no recorded delay after that)."""
        after = run.session.requests[run.idx].after
        if run.gate.when_ready(after, lambda t, run=run: self._released(run, t)):
            last = run.gate.last_end(after)  # a response ends when the front end has streamed it: maybe later
            if last > sched:
                self._at(last, self._send, run, last)
            else:
                self._send(run, sched)

    def _released(self, run: _Run, t: float) -> None:
        self._at(max(t, self.now), self._send, run, max(t, self.now))

    def _send(self, run: _Run, sched: float) -> None:
        from benchcamp.errors import http_error_text
        from benchcamp.sim.engine.openai_format import OpenAIError

        if sched >= self.stop_at:  # the stop moved earlier (max_requests)
            self._finish(run)
            return
        if not self.window_open and sched >= self._latest:  # checked at each send: no event of its own
            self._open_latest()
        if self.max_requests is not None and self.warmup_s <= sched < self.stop_at:
            # load.max_requests counts the requests sent in the window [warmup_s, stop_at): the
            # last one allowed closes the window just after its send time, and none follows it
            if self.window_sent >= self.max_requests:
                run.on_done(run)
                return
            self.window_sent += 1
            if self.window_sent == self.max_requests:
                self.stop_at = min(self.stop_at, float(np.nextafter(sched, np.inf)))
        req = run.session.requests[run.idx]
        rid = f"{run.sid}:{req.turn}"
        self.stats.requests_sent += 1
        fl = _Inflight(run, req, sched)
        try:  # the client sends max_tokens = min_tokens = the output length
            self.engine.check(req.prompt_len, req.output_len, req.output_len)
        except OpenAIError as e:
            # what the client records for this response (loadgen.http_stream: "HTTP {status}: {body}")
            error = http_error_text(e.status, e.body().decode())
            self._record(fl, -1, 0, -1, (), sched, e.status, error, None)
            self._turn_ended(fl, sched)
            return
        key = (run.session.id, req.turn)
        busted = self.agentx is not None and self.agentx.busts(run.cycle)
        cached = None if busted and run.cycle else self._hashes.get(key)
        if cached is not None:  # computed once per workload request, reused when sessions cycle
            hashes = cached
        else:
            hashes = self.hasher.hashes(req.blocks, req.prompt_len, run.base)
            if not (busted and run.cycle):  # a recycled busted play's blocks are its own (cycle 0's: per session)
                self._hashes[key] = hashes
        run.base = (req.blocks, req.prompt_len, hashes)
        # The engine sees the request once the front end has taken it in (benchcamp.sim.engine.frontend).
        arrive = self.front.admit(sched, req.prompt_len, rid)
        # what the HTTP client would send (a topology deployment routes by its own rules: no key)
        route_key = header_value(run.root) if self.session_affinity and not self.topology_run else None
        self._at(arrive, self._add, rid, hashes, req.prompt_len, req.output_len, arrive, route_key)
        self.inflight[rid] = fl

    def _add(self, rid: str, hashes: list[int], prompt_len: int, out_len: int, t: float, key: str | None) -> None:
        if key is None:
            self.engine.add_request(rid, hashes, prompt_len, out_len, t)
        else:  # only a DP router takes a key (a topology's deployment routes by its own rules)
            self.engine.add_request(rid, hashes, prompt_len, out_len, t, key=key)

    def _stream(self, end: float, tokens: int) -> None:
        """A step that finished nothing: the front end streams its tokens (nothing reaches the engine)."""
        self._deliver(end, tokens, (), ())

    def _deliver(self, end: float, tokens: int, finished: Any, timelines: Any) -> None:
        """The front end streams a step's tokens (an event at the step's end, in order with the sends)."""
        i = self._delivered
        if i == len(self._ends):
            self._ends = np.concatenate([self._ends, np.zeros(i)])
            self._shown = np.concatenate([self._shown, np.zeros(i)])
        self._ends[i] = end
        self._shown[i] = self.front.deliver(end, tokens)
        self._delivered = i + 1
        now = self.now
        for (rid, prompt, cached, completion, cpu_cached), (_, times) in zip(finished, timelines):
            shown = self._shown_times(times)
            self.now = float(shown[-1])  # the client sees the last token then: a closed-loop slot refills then
            self._request_done(rid, prompt, cached, completion, cpu_cached, shown)
        self.now = now

    def _shown_times(self, times: Any) -> Any:
        """Step end times -> when the client saw those steps' tokens (delivered steps only)."""
        if not len(times):
            return times
        n = self._delivered
        if not n:
            return times
        # (array methods: numpy's functions dispatch, once a request); the search starts at its first token's step
        lo = int(self._ends[:n].searchsorted(times[0]))
        idx = self._ends[lo:n].searchsorted(times) + lo
        if idx.max() < n:
            return self._shown[idx]
        ok = idx < n
        return np.where(ok, self._shown[np.minimum(idx, n - 1)], times)

    def _request_done(
        self, rid: str, prompt: int, cached: int, completion: int, cpu_cached: int | None, times: Any
    ) -> None:
        fl = self.inflight.pop(rid)
        end = float(times[-1])
        self._record(fl, prompt, cached, completion, times, end, 200, None, cpu_cached)
        self._turn_ended(fl, end)

    def _turn_ended(self, fl: _Inflight, end: float) -> None:
        """The turn's response is over at ``end``: its subagents start, or the session goes on."""
        run = fl.run
        run.ready = end
        if run.gate is not None:  # the sends waiting for it go (at the end, in event order)
            run.gate.mark((run.session.id, fl.req.turn), end)
        if run.primer and run.idx == max(run.warm, 1) - 1:  # the lane's last warm-up request: the barrier
            self._primer_answered(end)
        run.idx += 1
        kids = self.children.get((run.session.id, fl.req.turn))
        if kids and end < self.stop_at:
            nxt = int(fl.req.turn) + 1
            joined = [k for k in kids if k.joined is not False and k.joins_at() <= nxt]
            later = [k for k in kids if k.joined is not False and k.joins_at() > nxt]
            background = [k for k in kids if k.joined is False]
            run.pending = len(joined)
            run.bg += len(background) + len(later)  # (the tree also waits for them if the turn is never sent)

            def kid_done(kid: _Run, run: _Run = run) -> None:
                run.ready = max(run.ready, kid.ready)
                run.pending -= 1
                if run.pending == 0:
                    self._issue_next(run)

            def bg_done(kid: _Run, run: _Run = run) -> None:
                run.bg -= 1
                if run.own_done and run.bg == 0:
                    run.ready = max(run.ready, kid.ready)  # the tree ends with its last subagent
                    run.on_done(run)

            def later_done(kid: _Run, run: _Run = run) -> None:
                j = kid.session.joins_at()
                run.later[j] -= 1
                run.later_ready[j] = max(run.later_ready.get(j, kid.ready), kid.ready)
                run.bg -= 1
                if run.own_done:
                    if run.bg == 0:
                        run.ready = max(run.ready, kid.ready)
                        run.on_done(run)
                elif run.waiting == j and run.later[j] == 0:
                    run.waiting = -1
                    self._issue_next(run)

            for k in later:
                run.later[k.joins_at()] = run.later.get(k.joins_at(), 0) + 1
            for k in background:
                self._start_session(k, run.cycle, end, run.sid, bg_done, run.base, root=run.root)
            for k in later:
                self._start_session(k, run.cycle, end, run.sid, later_done, run.base, root=run.root)
            for k in joined:
                self._start_session(k, run.cycle, end, run.sid, kid_done, run.base, root=run.root)
            if not joined:
                self._issue_next(run)
        else:
            self._issue_next(run)

    def _record(
        self,
        fl: _Inflight,
        prompt: int,
        cached: int,
        completion: int,
        times: Any,
        done: float,
        status: int,
        error: str | None,
        cpu_cached: int | None,
    ) -> None:
        n = len(times)
        self.records.append(
            {
                "point": self.point,
                "session_id": fl.run.sid,
                "turn": int(fl.req.turn),
                "parent": fl.run.parent,
                "worker": 0,
                "scheduled_s": fl.scheduled,
                "sent_s": fl.scheduled,
                "first_token_s": float(times[0]) if n else math.nan,
                "last_token_s": float(times[-1]) if n else math.nan,
                "done_s": done,
                "chunks": n,
                "itl_s": (times[1:] - times[:-1]).tolist() if n > 1 else [],
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "cpu_cached_tokens": cpu_cached,
                "completion_tokens": completion,
                "expected_prompt_tokens": int(fl.req.prompt_len),
                "expected_output_tokens": int(fl.req.output_len),
                "status": status,
                "error": error,
            }
        )

    def _primer_answered(self, end: float) -> None:
        """One lane's primer is answered; after the last one (the barrier) the loop's turnover is counted."""
        self.primers_left -= 1
        if self.primers_left == 0:
            self.barrier_s = end
            self._gate(end)

    def _gate(self, t: float) -> None:
        """Open the window at ``t`` (at ``load.warmup_s`` at the earliest) once the barrier and the turnover
        are behind; past ``warmup_s + max_warmup_s`` it stays where it opened then."""
        if self.window_open or self.primers_left > 0 or self.turnover_left > 0:
            return
        self.window_open = True
        start = max(self.warmup_s0, t)
        if start < self._latest:
            self.warmup_s, self.stop_at = start, start + self.duration_s
        self._release_held()

    def _open_latest(self) -> None:
        """The window opened at warmup_s + max_warmup_s, where it was put, before the gate's condition held."""
        self.window_open = True
        self.late_window = True
        self._release_held()

    def _release_held(self) -> None:
        """The barrier is behind: the held lanes go on, each turn's recorded delay counted from the window's start."""
        held, self._held = self._held, []
        for run in held:
            run.ready = max(run.ready, self.warmup_s)
            self._issue_next(run)

    # -- load shapes ------------------------------------------------------------
    def _top(self, j: int) -> tuple[Session, int]:
        return self.top[j % len(self.top)], j // len(self.top)

    def _slot_done(self, run: _Run) -> None:
        if not self.window_open and self.primers_left == 0 and self.turnover_left > 0:
            self.turnover_left -= 1  # a play finished after the barrier
            if self.turnover_left == 0:
                self._gate(self.now)
        # A closed-loop slot takes the next session at once, while before the stop. A session
        # that could send nothing (its first turn falls after the stop) ends the slot: the
        # next one could not send either, and virtual time would not advance. Nor would it
        # if every session of the workload in a row ended at the time it started (all its
        # turns refused at once: a refusal takes no virtual time), so that ends the slot too.
        stalls = run.stalls + 1 if self.now <= run.start else 0
        if self.now < self.stop_at and (run.idx > 0 or self.agentx is not None) and stalls < len(self.top):
            self._start_top(self.now, stalls)

    def _start_top(self, start: float, stalls: int = 0) -> None:
        j = self._next_top
        self._next_top += 1
        s, cycle, first = self.agentx.lane_play(j) if self.agentx is not None else (*self._top(j), -1)
        self._start_session(s, cycle, start, None, self._slot_done, stalls=stalls, first_turn=first, lane=j)

    def _schedule_starts(self) -> None:
        from benchcamp.loadgen.replay import open_arrivals

        if self.mode == "closed":
            for _ in range(int(self.level)):
                self._start_top(0.0)
        elif self.mode == "open":
            times = open_arrivals(self.level, self.stop_at, self.arrival, self.gamma_shape, self.seed)
            for j, t in enumerate(times):
                s, cycle = self._top(j)
                self._at(float(t), self._start_session, s, cycle, float(t), None, _ignore)
        else:
            order = sorted(range(len(self.top)), key=lambda i: self.top[i].arrival_s)
            for i in order:
                t = self.top[i].arrival_s / self.level
                if t < self.stop_at:
                    self._at(t, self._start_session, self.top[i], 0, t, None, _ignore)

    def _shift_events(self, delta: float) -> None:
        """AgentX's idle-gap cap: nothing runs, so every pending turn moves up by ``delta``."""
        moved = []
        for te, seq, fn, args in self._events:
            if fn == self._send or fn == self._gated:  # its scheduled time moves with it
                args = (args[0], args[1] - delta)
            moved.append((te - delta, seq, fn, args))
        heapq.heapify(moved)
        self._events = moved
        self._hot = [te for te, _, fn, _ in moved if fn != self._stream]
        heapq.heapify(self._hot)
        self.idle_shifts += 1
        self.idle_skipped_s += delta

    # -- main loop -------------------------------------------------------------
    def run(self) -> pd.DataFrame:
        # The loop allocates many small objects but creates no garbage cycles worth
        # collecting mid-run; the cyclic collector's passes over the large KV index
        # dicts would cost more than the simulation itself.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if was_enabled:
                gc.enable()

    def _run(self) -> pd.DataFrame:
        import pandas as pd

        from benchcamp.results.records import COLUMNS

        wall0 = time.perf_counter()
        cpu0 = time.process_time()
        eng, events = self.engine, self._events
        self._schedule_starts()
        if self.gated:
            if self.primers_left == 0:  # no lane primes (lane_start: first_turn): the turnover counts from t=0
                self._gate(0.0)
        t = 0.0
        # a Fleet (instances on their own clocks), or one engine of independent DP ranks (a dense model's)
        many = bool(eng.many_clocks)
        while True:
            while events and events[0][0] <= t:
                te, _, fn, args = heapq.heappop(events)
                self.now = te
                fn(*args)
            self.now = t
            if eng.has_work():
                if t >= self.stop_at + self.drain_s:
                    break
                # quiet runs stop before the next event that may reach the engine, and before the drain deadline
                hot, deadline = self._horizon(t), self.stop_at + self.drain_s
                if many:
                    for res, tokens in eng.start_steps(t, hot, deadline):
                        self.stats.steps += res.steps
                        self.stats.calls += 1
                        self._delivery(res, tokens)
                    # the next time an instance frees or an event may reach one; streaming events before it run
                    # then, in order (the loop stops at one only where it would break: past the deadline, or last)
                    nxt = min(eng.next_free(t), self._horizon(t))
                    if events and (nxt >= deadline or nxt == math.inf):
                        nxt = min(nxt, events[0][0])
                    t = nxt
                    if t == math.inf:
                        break
                    continue
                res = eng.step(t, emit=False, until=min(hot, deadline))
                self.stats.steps += res.steps
                self.stats.calls += 1
                self._delivery(res, res.tokens)
                t = res.end_s
                self.now = t
            elif events:
                cap = self.agentx.idle_cap if self.agentx is not None else None
                if cap is not None and not self.inflight and events[0][0] - t > cap:
                    self._shift_events(events[0][0] - t - cap)
                    events = self._events
                t = events[0][0]
            else:
                break
        # Past the drain deadline: fail what is still running, as the client does.
        for rid, fl in sorted(self.inflight.items()):
            times = self._shown_times(self.engine_partial_times(rid))
            eng.abort(rid)
            self._record(fl, -1, 0, -1, times, t, 0, DRAIN_ERROR, None)
        self.inflight.clear()
        self.stats.simulated_s = t
        self.stats.wall_s = time.perf_counter() - wall0
        self.stats.cpu_s = time.process_time() - cpu0
        self.stats.counters = eng.counters()
        df = pd.DataFrame(self.records, columns=COLUMNS)
        df = df.sort_values(["sent_s", "session_id", "turn"], kind="stable").reset_index(drop=True)
        counters = self.stats.counters
        # Same shape as the client's /metrics delta over a point (vLLM names, no _total), so
        # benchcamp.metrics.summarize(server_delta=...) reads either.
        delta = {f"vllm:{k.removesuffix('_total')}": float(v) for k, v in counters.items() if k.endswith("_total")}
        if (
            len(getattr(eng, "replicas", ())) > 1
        ):  # per DP engine, as the server's /metrics labels them (engine="0" ...)
            for rep in eng.replicas:
                c = rep.counters()
                for name in PER_ENGINE_COUNTERS:
                    delta[engine_key(name, rep.rank)] = float(c[f"{name[5:]}_total"])
        df.attrs.update(
            server_counters=dict(counters),
            server_delta=delta,
            simulated_s=t,
            steps=self.stats.steps,
            engine_calls=self.stats.calls,
            wall_s=self.stats.wall_s,
            cpu_s=self.stats.cpu_s,
            window=(self.warmup_s, self.stop_at),
            barrier_s=self.barrier_s,
            late_window=self.late_window,
            sessions_distinct=len(self.top),
            idle_shifts=self.idle_shifts,
            idle_skipped_s=self.idle_skipped_s,
        )
        if self.topology_run:
            df.attrs["deployment"] = eng.summary(t)
        return df

    def engine_partial_times(self, rid: str):
        import numpy as np

        rep = self.engine.where.get(rid)
        if rep is None:
            return np.zeros(0)
        sched = rep.sched
        r = sched.requests.get(rid)
        if r is None:
            return np.zeros(0)
        segs = list(r.segments)
        if r.seg_start >= 0 and r.seg_start <= sched.steps:
            segs.append((r.seg_start, sched.steps))
        if not segs:
            return np.zeros(0)
        idx = np.concatenate([np.arange(a - 1, b) for a, b in segs])
        return sched._times[idx]


def _ignore(_run: _Run) -> None:
    return None


def simulate(
    workload: Workload, settings: EngineSettings, load: SimLoad = SimLoad(), run: SimRun = SimRun()
) -> pd.DataFrame:
    """Run one load point in virtual time -> records DataFrame (``benchcamp.results.records`` schema).

    ``df.attrs``: ``server_counters`` (the engine's counters, vLLM names without
    ``vllm:``), ``server_delta`` (the same over the run as ``benchcamp.metrics``
    reads a point's /metrics delta: ``vllm:prefix_cache_hits`` ...), ``simulated_s``, ``steps``, ``wall_s``, ``cpu_s`` (this process's CPU time), ``window``.
    A deployment's run (``SimRun.topology``) puts its per-role figures in ``df.attrs["deployment"]``
    (``Fleet.summary``).
    """
    return Simulation(workload, settings, load, run).run()
