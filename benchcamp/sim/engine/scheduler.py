"""Continuous-batching scheduler of one engine core (one DP rank), after vLLM V1.

Each step spends the ``max_num_batched_tokens`` budget as vLLM V1's ``Scheduler.schedule`` does
(vllm/v1/core/sched/scheduler.py of the CPU build's vLLM 0.32.0, read 2026-12-02; the pinned 0.33.0's source is not
readable here): (1) running decode sequences that cross a block boundary get a new
KV block, preempting the most recently admitted running request when none is
left (preemption by recompute: its blocks are freed, it goes back to the front
of the waiting queue and later recomputes prompt + generated tokens, with
prefix-cache hits on its own prompt blocks); (2) running requests first: every decode takes
``num_tokens_with_spec - num_computed_tokens`` tokens of the budget, 1, or 1 + K with K speculative tokens
(the draft tokens are verified in the step); (3) running prefills take chunks of what is left (chunked
prefill), each at most ``long_prefill_token_threshold`` tokens (0: no cap) while more than one request runs or
waits (vLLM lifts the cap for a request alone: "there is nobody to starve"); (4) waiting requests are admitted
FCFS while budget, ``max_num_seqs`` and KV blocks allow, with the same cap; the head of the queue blocks the rest;
none is admitted in a step that preempted (vLLM: "if not preempted_reqs"), and with
``scheduler_reserve_full_isl`` (vLLM's default) only if the whole sequence's blocks fit, not just its first chunk's
(``allocate_slots(full_sequence_must_fit=True)``). Not modelled: ``max_num_partial_prefills`` /
``max_long_partial_prefills`` (V0 options; vLLM 0.32.0's SchedulerConfig has neither, so benchcamp takes no such
flag), ``long_prefill_token_threshold_adaptive``, the KV watermark (0 by default), a decode left out when the budget
runs out before it (every decode runs: with ``max_num_batched_tokens >= max_num_seqs x (1 + K)`` vLLM does the same).
Speculative decoding (K drafts, A tokens accepted per step on average): the simulator emits one token per decode
per step, so a step that decodes stands for 1/A of vLLM's (``PerfModel.cost`` costs vLLM's step and divides by A);
its prefills get 1/A of the budget vLLM's step leaves them (and 1/A of the cap), so A simulated steps advance
prefills as far as one of vLLM's does while every decode emits A tokens. DP ranks in lockstep share a step, so a
rank scales its budget when any rank decodes (``others_decode``, set by ``Router.step``).
An admitted request's prefix hit is the GPU tier's match continued in the CPU tier
(when there is one): those blocks are loaded back without using the token budget,
and ``loaded_tokens`` tells the caller how many tokens the step moves from host memory.
A KV connector's hit continues both tiers the same way, one mechanism for every connector as
in vLLM: ``Req.ext_tokens`` is the prefix (tokens from the prompt's start) the connector holds, so
what it reports to the scheduler (``get_num_new_matched_tokens(request, num_computed_tokens)``) is
that minus the local hit; the scheduler leaves at least one token to compute, allocates the rest,
and caches the full prompt blocks it received like computed ones (they enter the prefix tree at
admission, so a later prompt with the same prefix finds them). Two users: the HTTP server's
ExampleConnector (benchcamp.sim.engine.kv_connector: whole blocks, loaded inside the admitting step,
``transferred_tokens`` / ``transfers`` say what the step pulls over the link) and the topology
simulation's NIXL-like decode (benchcamp.sim.clock.fleet: the whole prompt, pulled over the
Deployment's link before the request arrives, ``Req.ext_prepaid``: no charge in the step).
Running order equals admission order, and prefills are at its tail, so
"decodes first, then prefills, then admissions" is vLLM's order (with ``long_prefill_token_threshold`` a short
request admitted after a long one can decode while the long one still prefills, ahead of it in vLLM's loop; the
order of the two then matters only when the budget runs out before the decodes, which the cap prevents).
Multi-step scheduling (vLLM 0.6's ``--num-scheduler-steps N``): the V0 engine
calls its scheduler only when the cached batch has no remaining steps
(``LLMEngine._has_remaining_steps``, vllm/engine/llm_engine.py v0.6), so waiting
requests are admitted only every N steps, or at once when nothing runs.

Speed: a decoding sequence is not touched in steps where nothing happens to it.
Its token count is implicit (``output`` at ``base_step`` plus the steps since),
its finish is an entry in a heap keyed by step, and the batch's total decode
context is a running sum. A decoding sequence needs a new KV block every
``block_size`` steps, always at the same step modulo ``block_size`` (its
*phase*), so decoders are grouped by phase and a step takes
``len(group[step % block_size])`` blocks in one call; only when the cache cannot
supply them are the group's members visited one by one, in admission order,
preempting from the tail as vLLM does. A decoder's block count is implicit too:
ceil(computed / block_size). A step therefore costs O(sequences that start,
finish or prefill), not O(batch).
Generated tokens' emission steps are kept as ranges (``segments``), from which
per-token times are recovered at the end. For the same reason a run of steps in which
the scheduler only decodes and nothing finishes (``quiet``) needs no per-step work at all:
``fast_forward`` moves the clock and takes the run's blocks (``block_total``) in one call.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Final

import numpy as np

from benchcamp.sim.engine.kvcache import KVCache, Node
from benchcamp.sim.engine.perfmodel import BatchSummary, prefill_pairs

# request states (Final: the compiled scheduler inlines them, benchcamp/sim/native.py)
WAITING: Final = 0
PREFILL: Final = 1
DECODE: Final = 2
DONE: Final = 3


class Req:
    __slots__ = (
        "id",
        "hashes",
        "prompt_len",
        "max_tokens",
        "arrival",
        "seq",
        "state",
        "computed",
        "output",
        "cached_tokens",
        "cpu_cached_tokens",
        "ext_tokens",
        "looked_up",
        "node",
        "held",
        "private",
        "no_register",
        "base_step",
        "chunk",
        "segments",
        "seg_start",
        "first_step",
        "preemptions",
        "ver",
        "phase",
        "alloc_step",
        "ext_prepaid",
    )

    def __init__(self, req_id: str, hashes: list[int], prompt_len: int, max_tokens: int, arrival: float):
        self.id, self.hashes, self.prompt_len, self.max_tokens = req_id, hashes, prompt_len, max_tokens
        self.arrival = arrival
        self.seq = -1
        self.state = WAITING
        self.computed = 0  # tokens with KV computed (at base_step while decoding)
        self.output = 0  # generated tokens (at base_step while decoding)
        self.cached_tokens = 0  # prefix-cache hit at first scheduling, both tiers (usage.cached_tokens)
        self.cpu_cached_tokens = 0  # the part of it loaded from the CPU tier
        # the prefix of its prompt a KV connector holds, in tokens from the start (0: none): whole blocks for the
        # ExampleConnector (benchcamp.sim.engine.kv_connector), the whole prompt for a NIXL decode (benchcamp.sim.clock.fleet)
        self.ext_tokens = 0
        # the connector's transfer was paid before the request reached this engine (the Deployment's link: NIXL
        # pulls asynchronously, between steps), so the admitting step is not charged for it; and it is one-shot:
        # NixlConnectorScheduler.update_state_after_alloc clears do_remote_prefill after the first allocation
        # ("Only trigger 1 KV transfer per request", vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py
        # @ 002a1057e9ae674d7bdc9c4be95bc29d65d2e808), so a preempted request recomputes what it no longer caches
        self.ext_prepaid = False
        self.looked_up = False
        self.node: Node | None = None  # KV tree node ending the cached prefix it references (set once scheduled)
        self.held = 0  # blocks in that prefix
        self.private = 0  # other blocks it holds
        self.no_register = False
        self.base_step = 0
        self.chunk = 0
        self.segments: list[tuple[int, int]] = []  # closed ranges of steps that emitted a token
        self.seg_start = -1
        self.first_step = -1
        self.preemptions = 0
        self.ver = 0
        self.phase = -1  # decoding: step % block_size at which it needs a new block
        self.alloc_step = 0  # decoding: last step whose block it took one by one (slow path)


class Scheduler:
    def __init__(
        self,
        kv: KVCache,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        num_scheduler_steps: int = 1,
        spec_tokens: int = 0,
        acceptance_length: float = 1.0,
        long_prefill_token_threshold: int = 0,
        reserve_full_isl: bool = True,
    ):
        self.kv = kv
        # speculative decoding: a decode takes 1 + K tokens of vLLM's budget; a simulated step is 1/A of vLLM's
        self.spec_tokens = spec_tokens
        self.accept = acceptance_length if spec_tokens and acceptance_length >= 1.0 else 1.0
        self.long_prefill_token_threshold = long_prefill_token_threshold  # --long-prefill-token-threshold (0: off)
        self.reserve_full_isl = reserve_full_isl  # --scheduler-reserve-full-isl (vLLM's default: on)
        self.admitted: list[str] = []  # requests the scheduled step admits for the first time (queue time)
        # DP ranks in lockstep (Router.step): another rank decodes, so this step too is 1/A of vLLM's
        self.others_decode = False
        self.num_scheduler_steps = num_scheduler_steps
        self._batch_left = 0  # steps left in the current multi-step batch
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.requests: dict[str, Req] = {}
        self.waiting: deque[Req] = deque()
        self.running: dict[str, Req] = {}  # admission order
        self.prefilling: dict[str, Req] = {}
        self.decoding: dict[str, Req] = {}
        self.steps = 0
        self._times = np.zeros(1024)  # end time of step i at index i - 1
        self._finish_heap: list = []  # (step, seq, ver, req)
        self._phases: list[dict[str, Req]] = [{} for _ in range(kv.block_size)]
        self._phase_sizes = [0] * kv.block_size  # len() of each, for quiet runs' block counts
        self._alloc_done = 0  # last step whose decode blocks are all allocated
        self._dec_ctx_base = 0  # sum(computed - base_step) over decoding
        self._dec_base_steps = 0  # sum(base_step) over decoding
        self._seq = 0
        self._sched: list[Req] = []
        self.loaded_tokens = 0  # tokens the scheduled step loads from the CPU tier
        self.transferred_tokens = 0  # tokens the scheduled step pulls through the KV connector
        self.transfers = 0  # requests whose KV the scheduled step pulls through it
        self.connector = False  # a KV connector is configured: every lookup is an external query too
        self.external_queries = 0  # vllm:external_prefix_cache_queries (connector part)
        self.external_hits = 0  # vllm:external_prefix_cache_hits (connector part)
        # counters (vLLM /metrics names in comments)
        self.preemptions = 0  # vllm:num_preemptions_total
        self.prompt_tokens = 0  # vllm:prompt_tokens_total
        self.finished_requests = 0  # vllm:request_success_total
        self._gen_closed = 0  # generated tokens not implicit in `decoding`

    # -- state ---------------------------------------------------------------
    @property
    def generation_tokens(self) -> int:  # vllm:generation_tokens_total
        return self._gen_closed + len(self.decoding) * self.steps - self._dec_base_steps

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, r: Req) -> None:
        if r.id in self.requests:
            raise ValueError(f"request id {r.id!r} is already in the engine")
        self.requests[r.id] = r
        self.waiting.append(r)

    def abort(self, req_id: str) -> bool:
        r = self.requests.get(req_id)
        if r is None:
            return False
        if r.state == WAITING:
            self.waiting.remove(r)
        else:
            self._leave_running(r)
            assert r.node is not None  # running requests hold a path
            self.kv.release(r.node, r.private)
        r.state = DONE
        r.ver += 1
        del self.requests[req_id]
        return True

    def _leave_running(self, r: Req) -> None:
        """Materialise a running request's implicit counts and take it out of the running sets."""
        if r.state == DECODE:
            n = self.steps - r.base_step
            self._dec_ctx_base -= r.computed - r.base_step
            self._dec_base_steps -= r.base_step
            r.computed += n
            r.output += n
            self._gen_closed += n
            r.base_step = self.steps
            del self.decoding[r.id]
            del self._phases[r.phase][r.id]
            self._phase_sizes[r.phase] -= 1
            # blocks it holds: enough for `computed`, plus the block of the step being scheduled
            # when that step's allocation already covered it
            bs = self.kv.block_size
            j = self.steps + 1
            ahead = 1 if (self._alloc_done == j or r.alloc_step == j) else 0
            r.private = -(-(r.computed + ahead) // bs) - r.held
        else:
            self.prefilling.pop(r.id, None)
        del self.running[r.id]
        if r.seg_start >= 0:
            if r.seg_start <= self.steps:
                r.segments.append((r.seg_start, self.steps))
            r.seg_start = -1
        r.ver += 1

    def _preempt_tail(self) -> Req:
        victim = self.running[next(reversed(self.running))]
        self._leave_running(victim)
        assert victim.node is not None  # running requests hold a path
        self.kv.release(victim.node, victim.private)
        victim.node, victim.held, victim.private, victim.computed, victim.no_register = None, 0, 0, 0, False
        if victim.ext_prepaid:  # a one-shot transfer (NIXL): what it sent is gone with the blocks, as in vLLM
            victim.ext_tokens = 0
        victim.state = WAITING
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        self.preemptions += 1
        return victim

    # -- quiet runs (several decode steps at once) ------------------------------
    def quiet(self) -> bool:
        """Only decoding sequences (none waiting or prefilling, one scheduler step per batch): every batch is
        known ahead until a sequence finishes or the cache runs out of blocks."""
        return bool(self.decoding) and not self.waiting and not self.prefilling and self.num_scheduler_steps == 1

    def steps_before_finish(self) -> int:
        """Steps from the next one in which no sequence finishes (the finish heap's first entry, stale or not)."""
        heap = self._finish_heap
        return heap[0][0] - self.steps - 1 if heap else 1 << 30

    def decode_ctx(self) -> int:
        """The next step's decode context (``BatchSummary.decode_ctx``); it grows by ``len(decoding)`` a step."""
        return self._dec_ctx_base + len(self.decoding) * (self.steps + 1)

    def block_needs(self, steps: int) -> list[int]:
        """Decode blocks each of the next ``steps`` steps takes (the phase groups, as ``schedule`` allocates)."""
        sizes, bs, j = self._phase_sizes, self.kv.block_size, self.steps + 1
        return [sizes[(j + i) % bs] for i in range(steps)]

    def block_total(self, steps: int) -> int:
        """``sum(block_needs(steps))``: every decoder takes one block per ``block_size`` steps."""
        sizes, bs = self._phase_sizes, self.kv.block_size
        cycles, rest = divmod(steps, bs)
        a = (self.steps + 1) % bs
        total = cycles * len(self.decoding) + sum(sizes[a : a + rest])
        return total + sum(sizes[: a + rest - bs]) if a + rest > bs else total

    def quiet_need(self) -> int:
        """The blocks the next step takes when it is quiet, finishes nothing and finds them free; else -1."""
        if not self.quiet():
            return -1
        heap, j = self._finish_heap, self.steps + 1
        if heap and heap[0][0] <= j:
            return -1
        need = len(self._phases[j % self.kv.block_size])
        return need if need <= self.kv.free else -1

    def quiet_summary(self) -> BatchSummary:
        """The next step's batch when it is quiet (what ``schedule`` returns for it)."""
        return BatchSummary(decode_seqs=len(self.decoding), decode_ctx=self.decode_ctx())

    def step_quiet(self, end: float, need: int) -> None:
        """``schedule()`` + ``commit()`` of a step ``quiet_need`` allowed (``need`` of its free blocks)."""
        if need:
            self.kv.allocate(need)
        j = self.steps + 1
        self._room_for_times(j)
        self._times[j - 1] = end
        self.steps = self._alloc_done = j
        self._batch_left = 0
        self.loaded_tokens = self.transferred_tokens = self.transfers = 0

    def fast_forward(self, ends: np.ndarray, total: int) -> None:
        """Run ``len(ends)`` quiet steps ending at ``ends``, in which nothing finishes and the cache supplies the
        ``total`` blocks they take (``block_total``, which the caller checked fit): what ``schedule()`` +
        ``commit()`` do for each, in one call. Decoders' counts are implicit in ``steps``, so only the clock, the
        step times and the allocations move."""
        kv = self.kv
        if total <= kv.free:  # empty blocks only: one allocation takes them as the steps' would
            kv.allocate(total)
        else:  # evictions: step by step, in the order the steps would evict
            for n in self.block_needs(len(ends)):
                if n and not kv.allocate(n):
                    raise AssertionError("fast_forward: the caller checked the blocks fit")
        j0, j1 = self.steps + 1, self.steps + len(ends)
        self._room_for_times(j1)
        self._times[j0 - 1 : j1] = ends
        self.steps = self._alloc_done = j1
        self._batch_left = 0
        self.loaded_tokens = self.transferred_tokens = self.transfers = 0

    # -- one step ------------------------------------------------------------
    def schedule(self) -> BatchSummary:
        """Decide the next step's batch and reserve its KV blocks."""
        kv, bs = self.kv, self.kv.block_size
        j = self.steps + 1
        preempted_before = self.preemptions
        group = self._phases[j % bs]
        if group and not kv.allocate(len(group)):
            for r in sorted(group.values(), key=lambda q: q.seq):  # admission order
                if r.state != DECODE:
                    continue  # preempted meanwhile
                while not kv.allocate(1):
                    if self._preempt_tail() is r:
                        break
                else:
                    r.alloc_step = j
        self._alloc_done = j

        # The token budget as vLLM's V1 scheduler spends it (module docstring): every decode 1 + K tokens, then
        # prefill chunks capped at long_prefill_token_threshold while another request runs or waits.
        n_dec = len(self.decoding)
        budget = self.max_num_batched_tokens - n_dec * (1 + self.spec_tokens)
        cap = self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
        if self.spec_tokens and (n_dec or self.others_decode):
            # a simulated step emits one token per decode and lasts 1/A of vLLM's step (PerfModel.cost): a prefill
            # gets 1/A of the budget vLLM's step leaves it, so A simulated steps advance it as one of vLLM's does
            budget = int(budget / self.accept)
            cap = max(1, int(cap / self.accept)) if cap else 0
        if cap <= 0:
            cap = budget
        sched: list[Req] = []
        blocked = False
        for r in list(self.prefilling.values()):
            if budget <= 0:
                break
            if r.state != PREFILL:
                continue
            n = min(r.prompt_len + r.output - r.computed, budget, cap)
            need = -(-(r.computed + n) // bs) - r.held - r.private
            while not kv.allocate(need):
                if self._preempt_tail() is r:
                    blocked = True
                    break
            if blocked:
                break
            r.private += max(need, 0)
            r.chunk = n
            sched.append(r)
            budget -= n

        waiting, running = self.waiting, self.running
        loaded = transferred = transfers = 0
        admit = self._batch_left <= 0 or not running
        self._batch_left = (self.num_scheduler_steps if admit else self._batch_left) - 1
        # vLLM schedules no waiting request in a step that preempted one ("if not preempted_reqs")
        admit = admit and self.preemptions == preempted_before
        admitted: list[str] = []
        while admit and waiting and not blocked and budget > 0 and len(running) < self.max_num_seqs:
            r = waiting[0]
            total = r.prompt_len + r.output
            limit = (total - 1) // bs
            node, k, hit_blocks = kv.match(r.hashes, limit)
            # the CPU tier continues the GPU prefix; its blocks need GPU blocks too
            cpu = kv.match_cpu(r.hashes, hit_blocks, limit) if kv.cpu_blocks else 0
            local = (hit_blocks + cpu) * bs
            # A KV connector continues both tiers: it reports what it holds beyond the local hit
            # (get_num_new_matched_tokens(request, num_computed_tokens); NIXL: len(prompt) - num_computed_tokens,
            # nixl_connector.py @ 002a1057e9ae674d7bdc9c4be95bc29d65d2e808), and at least one token is left to
            # compute: Scheduler._update_waiting_for_remote_kv takes one off when the received blocks cover every
            # token (vllm/v1/core/sched/scheduler.py @ 00024d314514900f361ad072af6931e403b7f589).
            ext = max(0, min(r.ext_tokens, total - 1) - local) if r.ext_tokens else 0
            hit = local + ext
            # the received full prompt blocks are cached like computed ones (KVCacheManager.cache_blocks(request,
            # num_computed_tokens) in _update_waiting_for_remote_kv, and in allocate_slots for a synchronous load);
            # a partial last block stays private until the request completes it
            ext_blocks = max(0, min(hit, r.prompt_len, len(r.hashes) * bs) // bs - hit_blocks - cpu) if ext else 0
            n = min(total - hit, budget, cap)
            need = -(-(hit + n) // bs) - hit_blocks
            # scheduler_reserve_full_isl: admitted only if the whole sequence's blocks fit, not just this chunk's
            gate = -(-total // bs) - hit_blocks if self.reserve_full_isl else need
            node = kv.acquire(node, k)
            if gate > kv.available:
                kv.release(node, 0)
                break
            if cpu:  # out of the CPU tier before evictions from the GPU can push them out of it
                kv.take_cpu(r.hashes[hit_blocks : hit_blocks + cpu])
            kv.allocate(need)
            waiting.popleft()
            if not r.looked_up:
                r.looked_up = True
                admitted.append(r.id)
                r.cached_tokens = hit
                r.cpu_cached_tokens = cpu * bs
                kv.record_lookup(r.prompt_len, hit_blocks * bs, cpu * bs)
                if self.connector:
                    self.external_queries += r.prompt_len
                    self.external_hits += ext
            r.node, r.held, r.private, r.computed, r.chunk = node, hit_blocks, need, hit, n
            if cpu or ext_blocks:  # loaded and received blocks are cached (again), held by this request
                r.node, got = kv.extend(node, r.hashes[hit_blocks : hit_blocks + cpu + ext_blocks])
                r.held += got
                r.private -= got
                r.no_register = got < cpu + ext_blocks
            loaded += cpu * bs
            if ext and not r.ext_prepaid:  # pulled inside this step (ExampleConnector)
                transferred += ext
                transfers += 1
            r.state = PREFILL
            r.seq = self._seq
            self._seq += 1
            r.ver += 1
            running[r.id] = r
            self.prefilling[r.id] = r
            sched.append(r)
            budget -= n

        self._sched = sched
        self.admitted = admitted
        self.loaded_tokens = loaded
        self.transferred_tokens, self.transfers = transferred, transfers
        n_dec = len(self.decoding)
        summary = BatchSummary(decode_seqs=n_dec, decode_ctx=self._dec_ctx_base + n_dec * j)
        for r in sched:
            summary.prefill_seqs += 1
            summary.prefill_tokens += r.chunk
            summary.prefill_pairs += prefill_pairs(r.chunk, r.computed)
            summary.prefill_ctx += r.computed + r.chunk
        return summary

    def commit(self, end_time: float, emit: bool = True, timelines: bool = False):
        """The scheduled step has run until ``end_time``: advance every scheduled sequence.

        Returns (emitted, first, finished, timelines) as in ``StepResult``.
        """
        j = self.steps = self.steps + 1
        self._room_for_times(j)
        self._times[j - 1] = end_time
        emitted = [(rid, 1) for rid in self.decoding] if emit else []
        first: list[tuple[str, int]] = []
        finished: list[tuple[str, int, int, int, int | None]] = []
        lines: list[tuple[str, np.ndarray]] = []
        heap = self._finish_heap
        while heap and heap[0][0] <= j:
            _, _, ver, r = heapq.heappop(heap)
            if r.ver == ver:
                self._finish(r, finished, lines if timelines else None)
        kv, bs = self.kv, self.kv.block_size
        for r in self._sched:
            if r.state != PREFILL:
                continue
            r.computed += r.chunk
            full = min(r.computed, r.prompt_len) // bs
            if full > r.held and not r.no_register:
                assert r.node is not None  # scheduled requests hold a path
                r.node, got = kv.extend(r.node, r.hashes[r.held : full])
                r.held += got
                r.private -= got
                r.no_register = got < full - (r.held - got)
            if r.computed < r.prompt_len + r.output:
                continue
            # prefill done: the step samples a token
            r.output += 1
            self._gen_closed += 1
            if emit:
                emitted.append((r.id, 1))
            if r.first_step < 0:
                r.first_step = j
                first.append((r.id, r.cached_tokens))
                self.prompt_tokens += r.prompt_len
            r.seg_start = j
            if r.output >= r.max_tokens:
                self._finish(r, finished, lines if timelines else None)
                continue
            del self.prefilling[r.id]
            r.state = DECODE
            r.base_step = j
            self.decoding[r.id] = r
            self._dec_ctx_base += r.computed - j
            self._dec_base_steps += j
            r.ver += 1
            heapq.heappush(heap, (j + r.max_tokens - r.output, r.seq, r.ver, r))
            r.phase = (1 + j - r.computed) % bs
            self._phases[r.phase][r.id] = r
            self._phase_sizes[r.phase] += 1
        self._sched = []
        return emitted, first, finished, lines

    def _finish(self, r: Req, finished: list, lines: list | None) -> None:
        self._leave_running(r)
        assert r.node is not None  # running requests hold a path
        self.kv.release(r.node, r.private)
        r.state = DONE
        del self.requests[r.id]
        self.finished_requests += 1
        finished.append(
            (r.id, r.prompt_len, r.cached_tokens, r.output, r.cpu_cached_tokens if self.kv.cpu_blocks else None)
        )
        if lines is not None:
            lines.append((r.id, self.emission_times(r)))

    def _room_for_times(self, j: int) -> None:
        """Grow the step-time array (doubling) until it has a slot for step ``j``."""
        while j > len(self._times):
            self._times = np.concatenate([self._times, np.zeros(len(self._times))])

    def emission_times(self, r: Req) -> np.ndarray:
        """End times of the steps that emitted ``r``'s tokens (closed segments only)."""
        if not r.segments:
            return np.zeros(0)
        if len(r.segments) == 1:  # never preempted
            a, b = r.segments[0]
            return self._times[a - 1 : b].copy()
        idx = np.concatenate([np.arange(a - 1, b) for a, b in r.segments])
        return self._times[idx]
