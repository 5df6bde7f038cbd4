"""AgentX's replay rules (``load.agentx``), shared by the wall clock (``loadgen.replay``) and
the virtual clock (``simulation.simulate``): what each play of a session tree sends.

Every closed loop runs by these rules: without ``load.agentx`` they come from ``load.steady``
(``SteadyState.replay_rules``: start ratios, a 1-token primer, the salt of recycled plays, no
idle-gap cap, no truncation), so synthetic and imported workloads alike start each lane at a
sampled point of its session with the context primed, and a recycled play never finds an
earlier play's blocks in the cache. There (``lane_start: sampled``), besides:

- ``length_biased``: a lane's first play is a session drawn with probability proportional to its
  turns (seed: load.seed and j), in a cycle of its own (``-1 - j``, so its own salt): at a random
  moment a closed loop holds a session in proportion to how long it lasts, so the lanes start
  where the loop's steady state would have them (lane j taking session j, as AIPerf's lanes do,
  under-represents long sessions, whose many cached turns a window then sees only later);
- ``barrier``: the virtual clock's window opens once every lane's primer has been answered
  (AgentX's barrier), or at ``load.warmup_s`` if that is later, and lasts ``load.duration_s`` from
  then; the wall clock opens it at ``load.warmup_s`` (its workers share no barrier yet), so a
  warm-up shorter than the primers shows as an unsteady window (``metrics.steadiness``);
- recycled plays keep the prefix sessions share in the workload (``shared_prefix``: the leading
  blocks two sessions' first prompts have in common) where a session has no ``fixed_blocks``.

``lane_start: first_turn``: every lane starts its session at turn 0 at t = 0, without a primer.

The rules of ``load.agentx``, as the harness's scenarios run them (``benchcamp.workload.agentx.scenarios``
holds the table and names the sources in agentx-harness 1.0.12), and how benchcamp does each:

- closed loop of session trees: a level is N lanes; a lane holds its slot until the whole
  tree (root, subagents, background subagents, aux requests) has drained, then takes the
  next top-level session (closed-loop order, ``loadgen.replay``).
- start t*: the first play of lane j (global index j < N) samples ``u ~ U[start_min_ratio,
  start_max_ratio]`` (seed: load.seed and j) and t* = u of the root's recorded span; the stream
  resumes at its first turn at/after t* and is primed at the one before (the harness's
  ``_build_timestamped_trajectory``). benchcamp's recorded time is the cumulative end-to-start gaps
  (``think_s``; the workload keeps no request durations, so a turn's recorded start is early by the
  answers before it); a session without gaps falls back to a turn index ``floor(u * turns)`` clamped
  to leave a turn to profile, as the harness does without timestamps; no turn before t*: from turn 0
  without a primer. Recycled plays start at turn 0. Turns before the primer and their subagents are
  not sent (the harness also primes each subagent live at t*; benchcamp primes the root only).
- warm-up per lane: the primer is sent at t = 0 with its whole prefix at its recorded length
  (``primer_max_tokens`` 0); under ``agentx`` the next ``warmup_requests_per_lane`` turns follow at
  ``max_tokens=1`` with no delay (the harness counts a lane's subagent requests in that quota too;
  benchcamp's are the root's turns). In virtual time the window opens once every lane's last warm-up
  request is answered (the barrier; ``WARMUP_GRACE_S`` at most); the wall clock opens it at
  ``load.warmup_s``. The first profiled turn keeps its recorded delay after t* (mvp) or after the
  last warm-up (agentx). A failed request before the window aborts the point (``point_outcome``).
- cache bust: every play of a tree, first plays included, gets fresh block ids after each
  session's ``fixed_blocks`` (its tool + system prefix), one mask per tree play from a sha256 of the
  point's benchmark id (its salt), the play and the tree's root id (the harness's ``[rid:...]`` marker
  digest of benchmark id, recycle pass, lane and trace id; benchcamp changes the token ids instead
  of inserting ~8 marker tokens, so token counts stay exact). load.steady busts recycled plays only.
- idle caps: when no request is running and the next pending turn is more than ``idle_gap_cap_s``
  away, every pending turn moves up by the same amount (the harness's system idle guard; the wall
  clock applies it per client process when no request of any process is running); a gap above
  ``trace_idle_gap_cap_s`` inside a tree is cut to it (the harness caps a tree's idle time at run
  time: benchcamp caps each session's end-to-start gap, which is the tree's idle time unless a
  background subagent runs through it).
- streaming with ``ignore_eos`` (and ``min_tokens``): the request body (``loadgen.body``).
- chat as the harness sends it (``load.api: chat``): each turn's system / user / assistant messages with the
  recorded answers (``context: recorded``, the harness's ``DELTAS_WITH_RESPONSES``), or with this play's live
  answers (``context: live``, an override); token ids (``load.api: completions``) are benchcamp's own form and
  an override too: the harness sends chat (``benchcamp.loadgen.chat_context``).
- no input truncation: ``max_input_tokens`` (unset) would end a session at its first turn
  above it; setting it makes the submission invalid.
- cross-stream dependencies (``Request.after``): a request goes once its predecessors in its tree play
  have ended (``benchcamp.loadgen.dependencies``, both clocks, with or without ``load.agentx``); the
  requests before a lane's primer and their subagents count as ended, and the warm-ups are not gated.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np

from benchcamp.workload.agentx.scenarios import WARMUP_GRACE_S, WARMUP_MAX_TOKENS
from benchcamp.workload.model import Request, Session

_MASK63 = (1 << 63) - 1


def _bust_mask(cycle: int) -> int:
    d = hashlib.blake2b(f"benchcamp-agentx-bust/{cycle}".encode(), digest_size=8).digest()
    return (int.from_bytes(d, "big") & _MASK63) or 1


class AgentxReplay:
    """The rules of one point (``rules``: ``AgentxRules`` or its dict) over its top-level sessions."""

    def __init__(
        self, rules: Any, top: list[Session], level: int, seed: int, benchmark_id: object = "", block_size: int = 0
    ) -> None:
        r = rules if isinstance(rules, dict) else rules.model_dump()
        # load.agentx.context (benchcamp.loadgen.chat_context): live, each context carries this play's answers;
        # virtual time (``play``, with the workload's block size) counts them by their generated tokens
        self.context = str(r.get("context") or "recorded")
        self.block_size = int(block_size)
        self._convos: dict[str, Any] = {}  # session id -> its turns' messages (chat_context.conversation)
        self.min_ratio, self.max_ratio = float(r["start_min_ratio"]), float(r["start_max_ratio"])
        self.warmup, self.primer = bool(r["warmup_per_lane"]), int(r["primer_max_tokens"])
        self.bust = bool(r["cache_bust"])
        self.idle_cap: float | None = None if r["idle_gap_cap_s"] is None else float(r["idle_gap_cap_s"])
        self.max_input = r["max_input_tokens"]
        self.sampled = r.get("lane_start", "sampled") == "sampled"
        # load.agentx: the harness's barrier (profiling starts once every lane's warm-up has been answered),
        # waiting at most its warm-up grace period; load.steady: its window_opens
        agentx = "warmup_requests_per_lane" in r
        self.barrier = bool(r.get("barrier", agentx))
        self.turnover = float(r.get("turnover_sessions", 0.0))
        self.max_warmup_s = float(r.get("max_warmup_s", WARMUP_GRACE_S if agentx else 0.0))
        # load.steady: a lane's first play is a session drawn in proportion to its turns (the sessions a closed
        # loop holds at a random moment: a lane spends longer in a longer session), not lane j's session j
        self.length_biased = bool(r.get("length_biased", False)) and self.sampled
        self.top, self.level, self.seed = top, int(level), int(seed)
        # load.agentx only (load.steady's rules have none of these): the harness's extra warm-up requests,
        # its per-tree idle cap, t* on recorded time and the bust of every tree, first plays included
        self.extra_warmups = int(r.get("warmup_requests_per_lane") or 0) if self.warmup else 0
        cap = r.get("trace_idle_gap_cap_s")
        self.tree_idle_cap: float | None = None if cap is None else float(cap)
        self.recorded_time = "warmup_requests_per_lane" in r
        self.bust_first = self.recorded_time and self.bust
        # load.agentx: a lane's first profiled turn waits for the barrier (the harness holds profiling until
        # every lane's warm-up is answered); its recorded delay counts from the barrier, not before it
        self.hold = self.recorded_time and self.warmup
        self.benchmark_id = str(r.get("benchmark_id", benchmark_id))
        self._offsets: dict[int, float] = {}  # lane j -> its first profiled turn's delay after t*
        self._shared: frozenset[int] | None = None
        self._weights: np.ndarray | None = None

    def lane_play(self, j: int) -> tuple[Session, int, int]:
        """Play ``j`` of the closed loop: (session, cycle, start turn; -1 from turn 0 without a primer).
        Play j is session j % T in cycle j // T; with ``length_biased`` a lane's first play (j < level) is a
        session drawn by turns, in a cycle of its own (-1 - j: its own salt, as no other play shares it)."""
        if j < self.level and self.length_biased:
            if self._weights is None:
                n = np.array([len(s.requests) for s in self.top], dtype=float)
                n[n < 2] = 0.0  # a session of one turn has no point to start at
                self._weights = n / n.sum() if n.sum() > 0 else n
            if self._weights.sum() > 0:
                rng = np.random.default_rng([self.seed, 0x57EA, j])
                i = int(rng.choice(len(self.top), p=self._weights))
                return self.top[i], -1 - j, self._start(j, len(self.top[i].requests), self.top[i])
        return self.top[j % len(self.top)], j // len(self.top), self.start_turn(j)

    def primers(self) -> int:
        """How many lanes send a warm-up primer (the first plays that start at a sampled turn)."""
        if not self.warmup or not self.sampled:
            return 0
        return sum(1 for j in range(self.level) if self.lane_play(j)[2] >= 0)

    def shared_prefix(self, blocks: tuple[int, ...]) -> int:
        """How many leading blocks of ``blocks`` are blocks that two top-level sessions' first
        prompts share (the workload's common system + tool prefix): a recycled play keeps them."""
        if self._shared is None:
            seen: set[int] = set()
            both: set[int] = set()
            for s in self.top:
                if s.requests:
                    mine = set(s.requests[0].blocks)
                    both |= mine & seen
                    seen |= mine
            self._shared = frozenset(both)
        n = 0
        for b in blocks:
            if b not in self._shared:
                break
            n += 1
        return n

    def start_turn(self, j: int) -> int:
        """The turn index the play of global index ``j`` starts at with a warm-up (AIPerf's k_i);
        -1: from turn 0 without one (recycled plays, sessions of one turn)."""
        if j >= self.level or not self.sampled:
            return -1
        s = self.top[j % len(self.top)]
        return self._start(j, len(s.requests), s)

    def _start(self, j: int, n: int, s: Session | None = None) -> int:
        if n < 2:
            return -1
        u = np.random.default_rng([self.seed, 0xA6E7, j]).uniform(self.min_ratio, self.max_ratio)
        if self.recorded_time and s is not None:
            k = self._start_on_recorded_time(j, s, float(u))
            if k is not None:
                return k
        return int(min(int(u * n), n - 2))

    def _start_on_recorded_time(self, j: int, s: Session, u: float) -> int | None:
        """The harness's t* (trajectory_source.py ``_build_timestamped_trajectory``): uniform in [min, max]
        of the recorded span, the stream resuming at its first turn at/after t* and primed at the one before.
        benchcamp's recorded time is the root's end-to-start gaps (``think_s``; the workload keeps no request
        durations); None (no span: every gap 0) falls back to a turn index, as the harness does without
        timestamps. Returns the primer's turn index, -1 when no turn precedes t* (nothing to warm)."""
        t = np.cumsum([r.think_s for r in s.requests])
        span = float(t[-1] - t[0])
        if span <= 0:
            return None
        t_star = float(t[0]) + u * span
        nxt = int(np.searchsorted(t, t_star, side="left"))  # first turn at/after t*
        nxt = min(max(nxt, 0), len(t) - 1)
        if nxt == 0:
            return -1
        self._offsets[j] = float(t[nxt]) - t_star  # the recorded delay from t* to that turn, kept
        return nxt - 1

    def busts(self, cycle: int) -> bool:
        """Whether a play of ``cycle`` gets fresh blocks (load.agentx: every play; load.steady: recycles)."""
        return self.bust and (cycle != 0 or self.bust_first)

    def tree_mask(self, cycle: int, root: str) -> int:
        """The bust mask of one play of a tree (load.agentx): the harness's marker digest
        (cache_bust.py ``build_cache_bust_marker``: sha256 of benchmark id, recycle pass, lane and
        trace id) as benchcamp's block XOR; the point's benchmark id keeps a rerun against a warm
        server off the previous run's blocks, the root's id one tree off another's."""
        d = hashlib.sha256(f"{self.benchmark_id}:{cycle}:{root}".encode()).digest()
        return (int.from_bytes(d[:8], "big") & _MASK63) or 1

    def _blocks(self, s: Session, blocks: tuple[int, ...], cycle: int, root: str | None) -> tuple[int, ...]:
        if not self.busts(cycle):
            return blocks
        keep = int(s.fixed_blocks) if s.fixed_blocks is not None else self.shared_prefix(blocks)
        if self.bust_first:
            mask = self.tree_mask(cycle, root or s.id.split("::", 1)[0])
        else:
            mask = _bust_mask(cycle)
        return blocks[:keep] + tuple((int(b) ^ mask) & _MASK63 for b in blocks[keep:])

    def warmups(self, s: Session, start: int) -> int:
        """How many leading requests of a play from ``start`` are warm-ups (the primer, then
        ``warmup_requests_per_lane`` more): 0 for a play from turn 0."""
        if start < 0 or not self.warmup:
            return 0
        return 1 + min(self.extra_warmups, max(len(s.requests) - start - 1, 0))

    def requests(
        self, s: Session, cycle: int, start: int = -1, root: str | None = None, lane: int = -1
    ) -> list[Request]:
        """The requests one play of ``s`` sends, in order (``start`` >= 0: the root of a lane's
        first play, warmed up at that turn; ``root``: the id of the play's tree, for its bust mask;
        ``lane``: the play's global index, whose recorded delay after t* its first profiled turn keeps)."""
        out: list[Request] = []
        warm = start >= 0
        extra = self.extra_warmups if warm and self.warmup else 0
        cap = self.tree_idle_cap
        for i, r in enumerate(s.requests[max(start, 0) :]):
            if self.max_input is not None and r.prompt_len > int(self.max_input):
                break  # input truncation (forbidden by AgentX): the session ends here
            blocks = self._blocks(s, r.blocks, cycle, root)
            think = r.think_s if cap is None else min(r.think_s, cap)  # the harness's per-tree idle cap
            if warm and i == 0:
                if not self.warmup:
                    continue
                out_len = self.primer if self.primer > 0 else r.output_len
                out.append(replace(r, blocks=blocks, output_len=out_len, think_s=0.0))
            elif warm and i <= extra:  # the harness's extra warm-up: max_tokens=1, no idle delay
                out.append(replace(r, blocks=blocks, output_len=WARMUP_MAX_TOKENS, think_s=0.0))
            elif warm and i == 1 and not extra:
                # the first profiled turn: its recorded delay after t* (a turn-index start: at once)
                out.append(replace(r, blocks=blocks, think_s=min(self._offsets.get(lane, 0.0), think)))
            elif blocks is not r.blocks or think != r.think_s:
                out.append(replace(r, blocks=blocks, think_s=think))
            else:
                out.append(r)
        return out

    def play(self, s: Session, cycle: int, start: int = -1, root: str | None = None, lane: int = -1) -> Session:
        """``s`` as this play sends it (same id, parent and kind; its own requests). Under ``context: live``, with
        a block size (virtual time), each turn's context holds the answers generated before it in this play."""
        requests = self.requests(s, cycle, start, root, lane)
        if self.context == "live" and self.block_size:
            from benchcamp.loadgen.chat_context import conversation, live_requests

            convo = self._convos.get(s.id)
            if convo is None:  # a session's messages are the same in every play: built once
                convo = self._convos[s.id] = conversation(s, self.block_size)
            requests = live_requests(s, requests, self.block_size, convo)
        return replace(s, requests=requests)
