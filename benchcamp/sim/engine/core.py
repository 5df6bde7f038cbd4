"""The simulated vLLM engine core, clock-agnostic.

``EngineCore`` = one DP rank: a paged KV cache with prefix caching
(``kvcache``), a continuous-batching scheduler (``scheduler``) and the roofline
step-time model (``perfmodel``). ``Router`` puts ``data_parallel_size`` cores
behind one interface and is what callers use (it is a plain wrapper when dp = 1).

The caller owns the clock: ``step(now)`` schedules a batch at ``now`` and
returns how long it takes; its tokens exist at ``now + duration_s``. The HTTP
server sleeps until then on the wall clock; the simulator jumps there on a
virtual one. Requests added while a step runs join the next step.

Routing (``Router.route``): a request with a routing key (the client's session header, e.g.
``X-Session-ID``) goes to the rank its key is pinned to; a key's first request is placed as an
unkeyed one and pins the key there (session affinity as SGLang's model gateway does it with
``--routing-key-override``: the configured policy places a new key, then it sticks; a pure hash
of the key, ``benchcamp.router.affinity.replica_index``, ignores load, and with one-request sessions
unbalances the ranks). Without a key: among the ranks whose load score (vLLM's
4 x waiting + running) is within a small slack of the lowest, the one whose KV
cache holds the longest prefix of the request's block hashes, then the least
loaded, then the lowest rank (a cache-aware router in front of DP ranks).

How the ranks advance is vLLM's (``topology.model.dp_layout``, sources there): a MoE model's ranks in lockstep
(``step``: a step's duration is the slowest rank's, the experts' collectives join every rank; an idle rank's
dummy batch is never the slowest and is not modelled apart), a dense model's independently: vLLM runs each as
its own engine core ("Non-MoE DP ranks are completely independent"), so on the virtual clock each rank steps on
its own clock (``start_steps``: ``many_clocks``), as independent replicas behind a router would. ``step`` (the
HTTP server's wall clock) still advances a dense engine's ranks together.

Capacity: KV blocks per rank = (GPU memory x gpu_memory_utilization - weights
per GPU - activation headroom) / KV bytes per token per GPU / block_size.
max_model_len defaults to min(the model's, what the KV cache of one rank holds).

CPU tier (``kv_offloading_size`` GiB, vLLM's ``--kv-offloading-size``): per
engine (DP rank), summed over its TP ranks as vLLM counts it, so each GPU's
share holds size / tp bytes of its own KV shard. Loading a CPU hit back costs
its bytes per GPU over the GPU's host link (``host_link_gbps``, one way), added
to the step that admits the request: the transfer is serialised with the step,
a pessimistic reading of vLLM's asynchronous loads. In lockstep DP the step
waits for the rank that loads the most.

Quiet runs (virtual clock only, ``step(until=...)``): while every busy rank only decodes, each step's batch is
known ahead, so ``_quiet_run`` times all the steps that start before the simulation's horizon (nothing can
reach the engine before it) up to the first one that finishes a sequence, in one call
(``PerfModel.decode_run``, bit-identical to ``cost``), and advances the ranks to the state stepping would
leave (``Scheduler.fast_forward``). Records and counters are identical with and without
(``tests/sim/clock/test_quiet_runs.py``); a 72-GPU rack needs several times fewer calls.

Requests are checked by ``openai_format.validate_lengths``, the function the HTTP
server runs on each request, so a request either clock refuses fails with the
same 400 and message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from benchcamp.sim.engine.kvcache import KVCache
from benchcamp.sim.engine.openai_format import validate_lengths
from benchcamp.sim.engine.perfmodel import GIB, PerfModel, StepCost, perf_model_for
from benchcamp.sim.engine.scheduler import Req, Scheduler
from benchcamp.sim.engine.settings import EngineSettings


@dataclass
class StepResult:
    duration_s: float
    emitted: list[tuple[str, int]] = field(default_factory=list)  # (req_id, n_tokens)
    first: list[tuple[str, int]] = field(default_factory=list)  # (req_id, cached_tokens)
    # (req_id, prompt, cached, completion, of cached from the CPU tier: None without one)
    finished: list[tuple[str, int, int, int, int | None]] = field(default_factory=list)
    end_s: float = 0.0  # now + duration_s
    timelines: list[tuple[str, np.ndarray]] = field(default_factory=list)  # finished: token times (keep_timelines)
    cost: StepCost | None = None
    tokens: int = -1  # tokens the step generated over its ranks (-1: not counted; Router.step counts them)
    # A quiet run (``Router.step(until=...)``): ``steps`` decode steps at once, each ending at ``ends[i]`` after
    # ``durations[i]`` and generating ``step_tokens``; nothing finishes in them. One step: steps 1, ends None.
    steps: int = 1
    ends: np.ndarray | None = None
    durations: np.ndarray | None = None
    step_tokens: int = 0
    admitted: list[str] = field(default_factory=list)  # requests the step scheduled for the first time


class EngineCore:
    """One DP rank. Use ``Router`` unless you drive a single rank yourself."""

    def __init__(self, settings: EngineSettings, perf: PerfModel | None = None, rank: int = 0):
        settings.validate()
        self.settings = settings
        self.rank = rank
        self.perf = perf or perf_model_for(settings)
        if settings.num_gpu_blocks_override is not None:
            # vLLM: "Overriding num_gpu_blocks=N with num_gpu_blocks_override=M"; block 0 of them is its
            # null block, so M - 1 hold KV (with 64 blocks of 32 the CPU build's longest context is 2016)
            self.num_blocks = settings.num_gpu_blocks_override
            usable = self.num_blocks - 1
        else:
            capacity = self.perf.kv_capacity_tokens(settings.gpu_memory_utilization)
            self.num_blocks = usable = capacity // settings.block_size
        model_len = settings.model_spec().max_model_len
        if settings.max_model_len is not None:
            if settings.max_model_len > usable * settings.block_size:
                raise ValueError(
                    f"--max-model-len {settings.max_model_len} exceeds the KV cache of one rank "
                    f"({usable * settings.block_size} tokens); lower it, raise "
                    "--gpu-memory-utilization, --tensor-parallel-size or --num-gpu-blocks-override"
                )
            model_len = settings.max_model_len
        self.max_model_len = min(model_len, usable * settings.block_size)
        per_gpu = self.perf.kv_bytes_per_token_gpu
        cpu_tokens = settings.kv_offloading_size * GIB / settings.tensor_parallel_size / per_gpu
        self.cpu_blocks = int(cpu_tokens) // settings.block_size
        self.load_s_per_token = per_gpu / (self.perf.gpu.host_link_gbps * 1e9)
        self.kv = KVCache(usable, settings.block_size, settings.enable_prefix_caching, self.cpu_blocks)
        self.sched = Scheduler(
            self.kv,
            settings.max_num_seqs,
            settings.max_num_batched_tokens,
            settings.num_scheduler_steps,
            settings.speculative_tokens,
            settings.acceptance_length or 1.0,
            settings.long_prefill_token_threshold,
            settings.scheduler_reserve_full_isl,
        )
        self.keep_timelines = False
        # KV connector (a disaggregated instance): its hits are pulled over the link in the admitting step
        self.sched.connector = bool(settings.kv_connector)
        self.transfer_s_per_token = per_gpu / (settings.kv_link_gbps * 1e9)
        self.transfer_latency_s = settings.kv_link_latency_us * 1e-6

    # -- driving -------------------------------------------------------------
    def check(self, prompt_len: int, max_tokens: int, min_tokens: int = 0) -> int:
        """-> the output length (max_tokens cut to what the context leaves, as vLLM does); raises
        ``openai_format.OpenAIError`` (the server's 400) for a request the engine refuses."""
        return validate_lengths(prompt_len, max_tokens, min_tokens, self.max_model_len)

    def add_request(
        self,
        req_id: str,
        block_hashes: list[int],
        prompt_len: int,
        max_tokens: int,
        now: float,
        external_tokens: int = 0,
        transfer_paid: bool = False,
    ) -> None:
        """``external_tokens``: the prefix of the prompt a KV connector holds (``Req.ext_tokens``); what the local
        prefix cache lacks of it is admitted as computed and its full blocks are cached. ``transfer_paid``: the
        connector moved it before the request got here (``Req.ext_prepaid``, the topology simulation's link), else
        the admitting step pulls it (``load_s``)."""
        out = self.check(prompt_len, max_tokens)
        r = Req(req_id, list(block_hashes), prompt_len, out, now)
        r.ext_tokens = external_tokens
        r.ext_prepaid = transfer_paid
        self.sched.add(r)

    def load_s(self) -> float:
        """Time to load the scheduled step's CPU-tier hits into the GPU, and to pull its KV
        connector hits over the link (the transfers of one step run at once: one latency); a
        transfer paid before arrival (``transfer_paid``) is not in ``transferred_tokens``."""
        s = self.sched
        t = s.loaded_tokens * self.load_s_per_token
        if s.transfers:
            t += self.transfer_latency_s + s.transferred_tokens * self.transfer_s_per_token
        return t

    def step(self, now: float, emit: bool = True) -> StepResult:
        summary = self.sched.schedule()
        cost = _with_load(self.perf.cost([summary]), self.load_s())
        end = now + cost.duration_s
        admitted = self.sched.admitted
        emitted, first, finished, lines = self.sched.commit(end, emit, self.keep_timelines)
        res = StepResult(cost.duration_s, emitted, first, finished, end, lines, cost)
        res.admitted = admitted
        return res

    def abort(self, req_id: str) -> bool:
        return self.sched.abort(req_id)

    def has_work(self) -> bool:
        return self.sched.has_work()

    # -- observability -------------------------------------------------------
    @property
    def load(self) -> int:
        return len(self.sched.running) + len(self.sched.waiting)

    def counters(self) -> dict[str, float]:
        s, kv = self.sched, self.kv
        return {
            "num_requests_running": len(s.running),
            "num_requests_waiting": len(s.waiting),
            "kv_cache_usage_perc": kv.usage,
            "prompt_tokens_total": s.prompt_tokens,
            "generation_tokens_total": s.generation_tokens,
            "prefix_cache_queries_total": kv.queries,
            "prefix_cache_hits_total": kv.hits,
            # vLLM counts the CPU tier (an offloading connector) and a KV connector's hits as external
            "external_prefix_cache_queries_total": kv.cpu_queries + s.external_queries,
            "external_prefix_cache_hits_total": kv.cpu_hits + s.external_hits,
            "external_kv_transfer_tokens_total": s.external_hits,
            "num_preemptions_total": s.preemptions,
            "request_success_total": s.finished_requests,
        }


class Router:
    """``data_parallel_size`` engine cores behind the EngineCore interface."""

    def __init__(self, settings: EngineSettings):
        settings.validate()
        self.settings = settings
        self.perf = perf_model_for(settings)
        self.replicas = [EngineCore(settings, self.perf, rank) for rank in range(settings.data_parallel_size)]
        self.where: dict[str, EngineCore] = {}
        self.max_model_len = self.replicas[0].max_model_len
        self.num_blocks = self.replicas[0].num_blocks
        self._keep = False
        self.pins: dict[str, int] = {}  # routing key -> its rank (session affinity)
        # A dense model's DP ranks are independent engines (vLLM): each steps on its own clock (start_steps).
        self.many_clocks = not self.perf.model.is_moe and len(self.replicas) > 1
        self.free_at = [0.0] * len(self.replicas)  # when each rank's current step ends (many_clocks)

    @property
    def keep_timelines(self) -> bool:
        return self._keep

    @keep_timelines.setter
    def keep_timelines(self, value: bool) -> None:
        self._keep = value
        for r in self.replicas:
            r.keep_timelines = value

    # A rank may carry this much more load score than the least loaded one and still
    # win on its cached prefix: one waiting request (or four running) of slack.
    AFFINITY_SLACK: ClassVar[int] = 4
    MAX_PINS: ClassVar[int] = 1_000_000  # routing keys remembered (a dict entry each; the oldest are forgotten first)

    def route(self, block_hashes: list[int], key: str | None = None) -> EngineCore:
        """Session affinity when ``key`` is given, else load balancing with cache affinity.

        ``key``: the request's routing key: the rank it is pinned to, or (its first request) the rank
        chosen as below, which it is then pinned to (``pins``, at most ``MAX_PINS`` keys, oldest
        dropped first).

        Load score = 4 x waiting + running (vLLM's DP load balancer). Among the
        ranks within ``AFFINITY_SLACK`` of the lowest score, the one holding the
        longest cached prefix wins, then the lower score, then the lower rank.
        Pure load balancing (vLLM's internal balancer alone) sends an agent's next
        turn to any rank and re-prefills its context there; pure prefix routing
        sends every session that shares a system prompt to one rank. Serving
        stacks for agents put a cache-aware router in front (llm-d, SGLang's
        router); this models one.
        """
        if len(self.replicas) == 1:
            return self.replicas[0]
        if key:
            rank = self.pins.get(key)
            if rank is None:
                rank = self.route(block_hashes).rank
                if len(self.pins) >= self.MAX_PINS:
                    del self.pins[next(iter(self.pins))]
                self.pins[key] = rank
            return self.replicas[rank]
        scores = [4 * len(r.sched.waiting) + len(r.sched.running) for r in self.replicas]
        low = min(scores)
        # the longest cached prefix, then the lower score, then the lower rank (the first of equals)
        best: EngineCore | None = None
        best_rank: tuple[int, int] = (-1, 0)
        for r, sc in zip(self.replicas, scores):
            if sc > low + self.AFFINITY_SLACK:
                continue
            ranking = (r.kv.match_prefix(block_hashes), -sc)
            if ranking > best_rank:
                best, best_rank = r, ranking
        assert best is not None  # the least loaded rank is near
        return best

    def add_request(
        self,
        req_id: str,
        block_hashes: list[int],
        prompt_len: int,
        max_tokens: int,
        now: float,
        external_tokens: int = 0,
        key: str | None = None,
    ) -> None:
        """``key``: the request's routing key (session affinity, ``route``); None: by load and cache."""
        if req_id in self.where:
            raise ValueError(f"request id {req_id!r} is already in the engine")
        rep = self.route(block_hashes, key)
        rep.add_request(req_id, block_hashes, prompt_len, max_tokens, now, external_tokens)
        self.where[req_id] = rep

    def busy(self) -> list[EngineCore]:
        """The ranks with work (waiting or running requests)."""
        return [r for r in self.replicas if r.sched.requests]

    def quiet(self, busy: list[EngineCore] | None = None) -> bool:
        """Every rank with work only decodes (``Scheduler.quiet``): the next steps can run as one quiet run."""
        busy = self.busy() if busy is None else busy
        return bool(busy) and all(r.sched.quiet() for r in busy)

    MAX_RUN: ClassVar[int] = 4096  # steps of one quiet run (its arrays' length)

    def step(self, now: float, emit: bool = True, until: float | None = None) -> StepResult:
        """One step at ``now``; or, given ``until`` (the virtual clock's horizon: nothing can reach the engine
        before it) and nothing to emit, a quiet run of every step that starts before ``until`` (``_quiet_run``)."""
        active = self.busy()
        if until is not None and not emit and self.quiet(active):
            run = self._quiet_run(active, now, until)
            if run is not None:
                return run
        if len(self.replicas) == 1:
            sched = self.replicas[0].sched
            made = sched.generation_tokens
            res = self.replicas[0].step(now, emit)
            res.tokens = sched.generation_tokens - made
            for rid, *_ in res.finished:
                del self.where[rid]
            return res
        # In the virtual clock a rank whose step only decodes, finishes nothing and takes free blocks skips
        # schedule() + commit() (Scheduler.quiet_need / step_quiet: the same state, fewer operations).
        needs = [r.sched.quiet_need() if not emit else -1 for r in active]
        full = [r for r, need in zip(active, needs) if need < 0]
        made = sum(r.sched.generation_tokens for r in full)  # idle ranks generate nothing this step
        quiet_tokens = 0
        summaries = []
        if self.perf.spec_k:  # ranks in lockstep share one step: 1/A of vLLM's when any of them decodes
            others = any(r.sched.decoding for r in active)
            for r in active:
                r.sched.others_decode = others
        for r, need in zip(active, needs):
            if need < 0:
                summaries.append(r.sched.schedule())
            else:
                summaries.append(r.sched.quiet_summary())
                quiet_tokens += len(r.sched.decoding)
        cost = _with_load(self.perf.cost(summaries), max((r.load_s() for r in full), default=0.0))
        end = now + cost.duration_s
        res = StepResult(cost.duration_s, end_s=end, cost=cost)
        for rep, need in zip(active, needs):
            if need >= 0:
                rep.sched.step_quiet(end, need)
                continue
            res.admitted += rep.sched.admitted
            emitted, first, finished, lines = rep.sched.commit(end, emit, self._keep)
            res.emitted += emitted
            res.first += first
            res.finished += finished
            res.timelines += lines
        for rid, *_ in res.finished:
            del self.where[rid]
        res.tokens = sum(r.sched.generation_tokens for r in full) - made + quiet_tokens
        return res

    def step_rank(self, rank: int, now: float, emit: bool = False, until: float | None = None) -> StepResult:
        """One step of rank ``rank`` alone (an independent rank, ``many_clocks``), or with ``until`` a quiet run of
        its steps that start before ``until`` (``_quiet_run`` over that rank)."""
        rep = self.replicas[rank]
        if until is not None and not emit and rep.sched.requests and rep.sched.quiet():
            run = self._quiet_run([rep], now, until)
            if run is not None:
                return run
        sched = rep.sched
        made = sched.generation_tokens
        res = rep.step(now, emit)
        res.tokens = sched.generation_tokens - made
        for rid, *_ in res.finished:
            del self.where[rid]
        return res

    def start_steps(
        self, now: float, hot: float | None = math.inf, deadline: float = math.inf
    ) -> list[tuple[StepResult, int]]:
        """Independent ranks (``many_clocks``): start a step on every idle rank with work at ``now`` -> (result,
        tokens) each. ``hot``: the next event that may reach the engine (None: unknown, step once); a rank that
        starts alone and only decodes runs its quiet steps before ``hot``, ``deadline`` and the other ranks' step
        ends (a finished turn there may bring it the session's next request)."""
        ready = [r.rank for r in self.replicas if self.free_at[r.rank] <= now and r.sched.requests]
        out: list[tuple[StepResult, int]] = []
        for rank in ready:
            until: float | None = None
            if hot is not None and len(ready) == 1:
                until = min(hot, deadline)
                for other, end in enumerate(self.free_at):
                    if other != rank and end > now and end < until:
                        until = end
            res = self.step_rank(rank, now, False, until)
            self.free_at[rank] = res.end_s
            out.append((res, res.tokens))
        return out

    def next_free(self, now: float) -> float:
        """When the next busy rank ends its step (inf when none is busy; ``many_clocks``)."""
        ends = [e for e in self.free_at if e > now]
        return min(ends) if ends else math.inf

    def idle_rank(self, now: float) -> bool:
        """A rank that could start a step at ``now`` (``many_clocks``)."""
        return any(e <= now for e in self.free_at)

    def _quiet_run(self, busy: list[EngineCore], now: float, until: float) -> StepResult | None:
        """Quiet steps (``quiet(busy)``: only decodes, on every busy rank) that start before ``until``, as one
        result; None when not even the next one can run so. A run ends with the first step that finishes a
        sequence (committed as stepping does: its finishes are the result's), or before the first whose blocks the
        KV cache cannot supply without preempting: that one runs alone, as does every step with anything else to
        do. The durations are ``PerfModel.decode_run``'s (bit-identical to ``cost``'s) and the schedulers' state
        after the run is what stepping would leave, so a run changes no result, only how many calls it takes."""
        scheds = [r.sched for r in busy]
        before = [s.steps_before_finish() for s in scheds]
        n = min(min(before) + 1, self.MAX_RUN)  # the last step may finish sequences
        if n < 1:
            return None
        seqs = [len(s.decoding) for s in scheds]
        durations = self.perf.decode_run(seqs, [s.decode_ctx() for s in scheds], n)
        sums = np.empty(len(durations) + 1)  # (array methods, not numpy's dispatching functions: a call each run)
        sums[0] = now
        sums[1:] = durations
        ends = sums.cumsum()[1:]  # sequential sums: now + d0, then + d1, ...
        n = 1 + int(ends[: n - 1].searchsorted(until))  # the first step starts now, step i at ends[i - 1]
        planned = n
        totals = [s.block_total(n) for s in scheds]  # blocks each rank's run takes (again only if n shrinks)
        for r, s, total in zip(busy, scheds, totals):
            room = r.kv.free + r.kv.evictable_blocks
            if (total if n == planned else s.block_total(n)) > room:  # stop before the step that would preempt
                taken = 0
                for i, b in enumerate(s.block_needs(n)):
                    taken += b
                    if taken > room:
                        n = i
                        break
        if n < 1:
            return None
        ends, durations = ends[:n], durations[:n]
        end = float(ends[-1])
        tokens = sum(seqs)
        res = StepResult(
            end - now, end_s=end, tokens=tokens * n, steps=n, ends=ends, durations=durations, step_tokens=tokens
        )
        for s, left, total in zip(scheds, before, totals):
            if left > n - 1:
                s.fast_forward(ends, total if n == planned else s.block_total(n))
                continue
            # its last step finishes sequences: the steps before it at once, then that one as stepping runs it
            # (a quiet batch whose blocks fit, so schedule() neither preempts nor admits)
            if n > 1:
                s.fast_forward(ends[:-1], s.block_total(n - 1))
            s.schedule()
            _, _, finished, lines = s.commit(end, False, self._keep)
            res.finished += finished
            res.timelines += lines
        for rid, *_ in res.finished:
            del self.where[rid]
        return res

    def abort(self, req_id: str) -> bool:
        rep = self.where.pop(req_id, None)
        return rep.abort(req_id) if rep is not None else False

    def has_work(self) -> bool:
        return any(r.sched.has_work() for r in self.replicas)

    def generation_tokens(self) -> int:
        """Tokens generated so far over all ranks (the front end streams each one)."""
        return sum(r.sched.generation_tokens for r in self.replicas)

    def check(self, prompt_len: int, max_tokens: int, min_tokens: int = 0) -> int:
        return self.replicas[0].check(prompt_len, max_tokens, min_tokens)

    def counters(self) -> dict[str, float]:
        """Summed over ranks; kv_cache_usage_perc is the mean over ranks."""
        per = [r.counters() for r in self.replicas]
        out = {k: sum(c[k] for c in per) for k in per[0]}
        out["kv_cache_usage_perc"] = out["kv_cache_usage_perc"] / len(per)
        return out


def _with_load(cost: StepCost, load_s: float) -> StepCost:
    return replace(cost, duration_s=cost.duration_s + load_s) if load_s else cost
