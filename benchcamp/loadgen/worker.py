"""One client process: replays its shard of sessions on its own event loop
(uvloop) and connection pool, writes its records incrementally, and reports
counters through shared memory.

Control comes from the parent through a shared array (see ``Ctrl``): the epoch
(CLOCK_MONOTONIC is system-wide on Linux, so one value serves every process),
the stop time (moved earlier when max_requests is reached or the point is
aborted), and a cancel code (interrupt/abort: fail what is in flight now).
Workers ignore SIGINT: Ctrl-C reaches the whole process group, and the parent
decides how to stop so that every worker still flushes its records. A worker
whose parent is gone (killed with ``kill -9``) stops as if interrupted and
closes its record file, which the next run of the point keeps (records.recover).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import math
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from benchcamp.loadgen.body import API_PATHS, BUILDERS, recorded_chat_body
from benchcamp.loadgen.health import HealthSampler
from benchcamp.loadgen.http_stream import Pool
from benchcamp.loadgen.replay import Replayer, Start, Turn, closed_sequence
from benchcamp.results import atomic
from benchcamp.results.records import RecordWriter, empty_record, to_table
from benchcamp.workload.model import Workload


class Ctrl:
    """Indices into the shared control array (doubles)."""

    EPOCH, STOP_AT, CANCEL, SENT, N = 0, 1, 2, 3, 4  # SENT: requests sent in the window (max_requests)
    CANCEL_REASONS = {1.0: "interrupted", 2.0: "aborted"}


# Prompts of at least this many tokens are built off the event loop (Worker.prepare): ~0.1 ms of building and
# more, while a thread hop costs some tens of microseconds (bench/loop_lag_body.py measures both).
OFF_LOOP_TOKENS = 2048

# A worker whose first this-many answers are all 4xx (no success yet) stops the point: the
# server refuses these requests, and measuring on would only record its refusals.
REFUSED_FIRST = 3
_LOAD_4XX = (408, 429)  # timeouts and rate limits: answers to load, not refusals of the request
# Sessions whose messages (and, under load.agentx.context live, whose answers: dropped at a play's last turn) a
# worker keeps, the least recently used going first: a lane holds one tree at a time, so this is far above the
# sessions a worker's lanes play at once
MAX_TRACKED_SESSIONS = 16384


class Stat:
    """Indices of one worker's counters in the shared stats array."""

    READY, DONE, IN_WINDOW, ERRORS, TOKENS, CHUNKS, INFLIGHT, CONN_ERRORS, FINISHED, N = range(10)


@dataclass
class WorkerPlan:
    index: int
    workers: int
    label: str
    endpoint: str
    api_key: str | None
    model: str
    api: str
    workload: Workload
    mode: str
    slots: int = 0  # closed loop
    starts: list[Start] = field(default_factory=list)  # open loop / trace
    warmup_s: float = 0.0
    drain_s: float = 30.0
    request_timeout_s: float = 300.0
    records_path: str = ""
    health_path: str = ""
    salt: int = 0  # prompt salt of the point (PointSpec.salt)
    # The request form the endpoint accepts (PointSpec.prompt / vllm_sampling / cached_tokens_reported)
    prompt: str = "ids"
    vllm_sampling: bool = True
    cached_tokens_reported: bool = True
    session_header: str = "X-Session-ID"  # the routing key's header (benchcamp.router.affinity); "" = none
    max_requests: int | None = None  # requests sent in the window, all workers together (PointSpec)
    agentx: dict | None = None  # AgentX's replay rules (PointSpec.agentx), closed loop
    replay: dict | None = None  # load.steady's lane rules (PointSpec.replay) when agentx is None
    level: int = 0  # closed loop: the point's sessions (lanes), all workers together
    seed: int = 0
    # One point from several hosts (benchcamp.loadgen.shards): this process's index among all the point's
    # client processes, every host's (-1: ``index``), and how many there are (0: ``workers``, this host's).
    global_index: int = -1
    global_workers: int = 0
    flush_every: int = 64  # small batches: converting one stalls the event loop (~0.3 ms for 64)
    flush_interval_s: float = 0.5


def worker_main(plan: WorkerPlan, ctrl: Any, stats: Any, parent: Any = None, lock: Any = None) -> None:
    """``parent``: the read end of a pipe whose only write end the parent holds (EOF = parent gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # plain asyncio still works, just slower
        pass
    try:
        asyncio.run(Worker(plan, ctrl, stats, parent, lock).run())
    except OSError as exc:  # disk full, folder read-only: one line; the parent names the folder and the fix
        print(failure_line(plan, exc), file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def failure_line(plan: WorkerPlan, exc: OSError) -> str:
    """A worker's last words on an OSError: the file it could not write, when it was a write."""
    what = str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):  # its only writes: records and health files
        what = f"cannot write {os.path.basename(exc.filename or plan.records_path)}: {exc.strerror}"
    return f"load generator worker {plan.index}: {what}"


class Worker:
    def __init__(self, plan: WorkerPlan, ctrl: Any, stats: Any, parent: Any = None, lock: Any = None) -> None:
        self.p = plan
        self.lock = lock  # guards Ctrl.SENT and the stop it moves (max_requests)
        self.ctrl = ctrl
        self.stats = stats
        self.base = plan.index * Stat.N
        self.pool = Pool(plan.endpoint, plan.api_key, plan.session_header)
        self.path = API_PATHS[plan.api]
        self.build = BUILDERS[plan.api]
        self.wl = plan.workload
        self.writer = RecordWriter(plan.records_path, flush_every=plan.flush_every)
        self.epoch = 0.0
        self.nrec = 0
        # The parent never writes to this pipe: readable means EOF, the parent died (kill -9) and
        # nobody will stop this load or merge these records. (The forkserver, our OS parent,
        # outlives it, so the parent pid says nothing.)
        self.parent = parent
        self.answered = False  # a request of this worker succeeded
        self.refused = 0  # 4xx answers before the first success
        self.refusal: str | None = None
        # load.agentx with load.api chat: each turn as the harness's messages (benchcamp.loadgen.chat_context);
        # context live: with this play's streamed answers, kept per played session id (a bounded LRU)
        ax = plan.agentx if plan.mode == "closed" else None
        self.chat_turns = ax is not None and plan.api == "chat"
        self.live = self.chat_turns and str((ax or {}).get("context") or "recorded") == "live"
        self._convos: OrderedDict[str, Any] = OrderedDict()  # workload session id -> its turns' messages
        self._plays: OrderedDict[str, Any] = OrderedDict()  # played session id -> (answers, LivePrompts)
        # those two are read and written by the loop (small bodies, answers) and the builder thread (large bodies)
        self._chat_lock = threading.Lock()
        self.gid = plan.index if plan.global_index < 0 else plan.global_index
        # Large bodies are built on this thread, off the event loop: the loop goes on reading streams and
        # sending on time while one is built (one thread: the body module's block cache is not shared).
        self.builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="benchcamp-body")

    # -- clock and control ---------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.epoch

    def stop_at(self) -> float:
        return self.ctrl[Ctrl.STOP_AT]

    def orphaned(self) -> bool:
        return self.parent is not None and self.parent.poll()

    def _busy(self) -> float:
        """Requests running in every worker of the point (the shared counters)."""
        return sum(self.stats[w * Stat.N + Stat.INFLIGHT] for w in range(self.p.workers))

    def _bump(self, i: int, v: float = 1.0) -> None:
        self.stats[self.base + i] += v

    # -- one request -----------------------------------------------------------
    async def prepare(self, turn: Turn) -> bytes:
        """The turn's body: a large one built on the builder thread (the loop keeps its timing), a small one
        here (a thread hop costs more than building it)."""
        if turn.request.prompt_len < OFF_LOOP_TOKENS:
            return self.build_body(turn)
        return await asyncio.get_running_loop().run_in_executor(self.builder, self.build_body, turn)

    def build_body(self, turn: Turn) -> bytes:
        r = turn.request
        if r.chat is not None and self.p.api == "chat":  # text replay of a recorded conversation
            return recorded_chat_body(self.p.model, r.chat, r.output_len, self.p.vllm_sampling)
        if self.chat_turns and turn.session is not None:
            return self._agentx_chat(turn)
        return self.build(
            self.p.model,
            r.blocks,
            r.prompt_len,
            r.output_len,
            self.wl.block_size,
            self.wl.vocab_size,
            self.p.salt,
            prompt=self.p.prompt,
            vllm_sampling=self.p.vllm_sampling,
        )

    def _agentx_chat(self, turn: Turn) -> bytes:
        """The turn as the harness's chat messages; under ``context: live`` with the answers this play streamed,
        and the record's expected prompt length counted with them (``LivePrompts``, as virtual time counts)."""
        from benchcamp.loadgen.chat_context import LivePrompts, chat_messages_body, conversation

        s, r, bs = turn.session, turn.request, self.wl.block_size
        assert s is not None
        texts = None
        with self._chat_lock:  # the messages and answers kept; the body is built outside
            convo = self._convos.get(s.id)
            if convo is None:
                convo = self._convos[s.id] = conversation(s, bs)
                if len(self._convos) > MAX_TRACKED_SESSIONS:
                    self._convos.popitem(last=False)
            segs = convo[int(r.turn)]
            if self.live:
                play = self._plays.get(turn.session_id)
                if play is None:
                    play = self._plays[turn.session_id] = ({}, {}, LivePrompts(bs))
                    if len(self._plays) > MAX_TRACKED_SESSIONS:
                        self._plays.popitem(last=False)
                self._plays.move_to_end(turn.session_id)
                texts, counts, prompts = play
                n = prompts.prompt(segs, r, counts)[1]
                if n != r.prompt_len:  # what the record expects: this play's answers in the context
                    turn.request = replace(r, prompt_len=n)
        return chat_messages_body(
            self.p.model, segs, r, bs, self.wl.vocab_size, self.p.salt, texts, vllm_sampling=self.p.vllm_sampling
        )

    def _keep_answer(self, turn: Turn, text: list[str] | None, usage: dict) -> None:
        """Context live: the streamed answer of this turn, for the play's later turns."""
        with self._chat_lock:
            play = self._plays.get(turn.session_id)
            if play is None or text is None:
                return
            s, k = turn.session, int(turn.request.turn)
            if s is not None and s.requests and k >= int(s.requests[-1].turn):
                del self._plays[turn.session_id]  # the play's last turn: nothing will read its answers
                return
            texts, counts, _ = play
            texts[k] = "".join(text)
            counts[k] = int(usage.get("completion_tokens") or len(text))

    def claim(self) -> float | None:
        """The send time of a request about to be sent, or None when ``max_requests`` requests
        were already sent in the window [warmup_s, stop_at) by all workers together. The count and
        the time are taken under one lock, and the last request allowed moves the stop to just
        after its send time, so the window holds exactly ``max_requests`` requests."""
        cap = self.p.max_requests
        if cap is None or self.lock is None:
            return self.now()
        with self.lock:
            t = self.now()
            if t < self.p.warmup_s or t >= self.ctrl[Ctrl.STOP_AT]:
                return t
            if self.ctrl[Ctrl.SENT] >= cap:
                return None
            self.ctrl[Ctrl.SENT] += 1
            if self.ctrl[Ctrl.SENT] >= cap:
                self.ctrl[Ctrl.STOP_AT] = min(self.ctrl[Ctrl.STOP_AT], math.nextafter(t, math.inf))
            return t

    async def send(self, turn: Turn, body: object) -> float:
        r = turn.request
        rid = f"{turn.session_id}:{r.turn}"
        sent_at = self.claim()
        if sent_at is None:  # the window is full: this turn is not sent (nor recorded)
            return self.now()
        sent = sent_at
        self._bump(Stat.INFLIGHT)
        key = turn.root or turn.session_id  # benchcamp.router.affinity.session_key: the session tree's id
        timeout, live = self.p.request_timeout_s, self.live
        out = await self.pool.request(self.path, rid, body, timeout, key, live)  # type: ignore[arg-type]
        self._bump(Stat.INFLIGHT, -1)
        assert out.t_end is not None  # Pool.request stamps the end of every outcome it returns
        e = self.epoch
        usage = out.usage or {}
        if self.live:
            self._keep_answer(turn, out.text, usage)
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        if cached is None:  # omitted: 0 from a server that reports them (vLLM omits zeros), else unknown
            cached = 0 if self.p.cached_tokens_reported else -1
        rec = empty_record(
            point=self.p.label,
            session_id=turn.session_id,
            turn=int(r.turn),
            parent=turn.parent,
            worker=self.gid,
            scheduled_s=turn.scheduled_s,
            sent_s=sent,
            first_token_s=out.first - e if out.first is not None else math.nan,
            last_token_s=out.last - e if out.last is not None else math.nan,
            done_s=out.t_end - e,
            chunks=out.chunks,
            itl_s=out.itl,
            prompt_tokens=int(usage.get("prompt_tokens", -1)),
            cached_tokens=int(cached),
            completion_tokens=int(usage.get("completion_tokens", -1)),
            expected_prompt_tokens=int(r.prompt_len),
            expected_output_tokens=int(r.output_len),
            status=out.status,
            error=out.error,
        )
        self.writer.write(rec)
        self.nrec += 1
        self._bump(Stat.DONE)
        if self.p.warmup_s <= sent < self.stop_at():
            self._bump(Stat.IN_WINDOW)
        if out.error:
            self._bump(Stat.ERRORS)
            self._note_refusal(out.status, out.error)
            if out.status == 0 and out.error.startswith(("connect error", "connection closed before")):
                self._bump(Stat.CONN_ERRORS)
        else:
            self.answered = True
            if usage.get("completion_tokens"):
                self._bump(Stat.TOKENS, usage["completion_tokens"])
        return out.t_end - e

    def _note_refusal(self, status: int, error: str) -> None:
        """Stop the point (all workers) when the server refuses this worker's first requests."""
        if self.answered or not 400 <= status < 500 or status in _LOAD_4XX or self.refusal:
            return
        self.refused += 1
        if self.refused >= REFUSED_FIRST:
            self.refusal = (
                f"the server refused the first {self.refused} requests of worker {self.p.index} "
                f"({error}); the point stopped: change what the server's message names"
            )
            self.ctrl[Ctrl.STOP_AT] = min(self.ctrl[Ctrl.STOP_AT], max(self.now(), self.p.warmup_s + 1e-3))
            self.ctrl[Ctrl.CANCEL] = 2.0

    # -- the whole point ---------------------------------------------------------
    async def run(self) -> None:
        # First use of the Arrow conversion costs ~0.1 s; pay it before t=0, not mid-window.
        to_table([empty_record()])
        first = next((r for s in self.wl.sessions for r in s.requests), None)
        if first is not None:
            self.builder.submit(self.build_body, Turn("warm-up", None, first, 0.0)).result()
        # Everything built so far (the workload, imported modules) lives to the end: freeze it
        # out of the collector, or a full collection walks it mid-window (tens of ms of stall).
        gc.collect()
        gc.freeze()
        self._bump(Stat.READY)
        while self.ctrl[Ctrl.EPOCH] == 0.0 and self.ctrl[Ctrl.CANCEL] == 0.0:
            if self.orphaned():
                self.writer.close()
                return
            await asyncio.sleep(0.002)
        self.epoch = self.ctrl[Ctrl.EPOCH]
        health = HealthSampler(self.now, window_start=self.p.warmup_s, stop_at=self.stop_at)
        health.start()
        flusher = asyncio.ensure_future(self._flush_loop())
        agentx = None
        rules = self.p.agentx if self.p.agentx is not None else self.p.replay
        if rules is not None and self.p.mode == "closed":
            from benchcamp.loadgen.agentx import AgentxReplay

            agentx = AgentxReplay(rules, self.wl.top_level(), self.p.level, self.p.seed)
        rep = Replayer(
            self.wl,
            self.prepare,
            self.send,
            self.now,
            self.stop_at,
            agentx=agentx,
            busy=self._busy,
            opens_at=self.p.warmup_s,
        )
        if self.p.mode == "closed":
            main = asyncio.ensure_future(
                rep.closed(self.p.slots, closed_sequence(self.gid, self.p.global_workers or self.p.workers))
            )
        else:
            main = asyncio.ensure_future(rep.scheduled(self.p.starts, cycling=self.p.mode == "open"))
        reason = await self._wait(main)
        if not main.done():
            # Requests still running past the drain deadline (or cancelled): fail and record them.
            self.pool.abort_all(reason)
            await asyncio.wait([main], timeout=0.2)  # let the aborted sends write their records
            main.cancel()
            try:
                await main
            except (asyncio.CancelledError, Exception):
                pass
        elif main.exception() is not None:
            health.error = f"{type(main.exception()).__name__}: {main.exception()}"
        health.error = health.error or self.refusal
        flusher.cancel()
        health.stop()
        self.pool.close()
        self.builder.shutdown(wait=False, cancel_futures=True)
        self.writer.close()
        rep_h = health.report()
        rep_h.update(
            worker=self.gid,
            pid=os.getpid(),
            records=self.nrec,
            connections_opened=self.pool.opened,
            reads=self.pool.reads,
            chunks=self.pool.chunks,
        )
        atomic.write_text(self.p.health_path, json.dumps(rep_h))
        self._bump(Stat.FINISHED)

    async def _wait(self, main: asyncio.Future) -> str:
        """Until the replay ends, the drain deadline passes, or the parent cancels."""
        while not main.done():
            cancel = self.ctrl[Ctrl.CANCEL]
            if cancel:
                return Ctrl.CANCEL_REASONS.get(cancel, "aborted")
            if self.orphaned():
                # Nobody else will stop the point now: do for every worker what the parent
                # does on Ctrl-C (no new turns, in-flight requests recorded as interrupted).
                self.ctrl[Ctrl.STOP_AT] = min(self.ctrl[Ctrl.STOP_AT], self.now())
                self.ctrl[Ctrl.CANCEL] = 1.0
                continue
            if self.now() > self.stop_at() + self.p.drain_s:
                return "drain-timeout"
            await asyncio.wait([main], timeout=0.02)
        return ""

    async def _flush_loop(self) -> None:
        # Bound what a crash can lose to flush_interval_s of records.
        while True:
            await asyncio.sleep(self.p.flush_interval_s)
            self.stats[self.base + Stat.CHUNKS] = self.pool.chunks
            try:
                self.writer.flush()
            except OSError:  # disk full: the final write raises it again, and ends this worker
                return
