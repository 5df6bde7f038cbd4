"""AgentX's replay rules (``load.agentx``), shared by the wall clock (``loadgen.replay``) and
the virtual clock (``simulation.simulate``): what each play of a session tree sends.

The rules, as AIPerf's ``inferencex-agentx-mvp`` scenario runs them (``AgentxRules`` in
``benchcamp.config`` names the sources), and how benchcamp does each:

- closed loop of session trees: a level is N lanes; a lane holds its slot until the whole
  tree (root, subagents, background subagents, aux requests) has drained, then takes the
  next top-level session (closed-loop order, ``loadgen.replay``).
- start point: the first play of lane j (global index j < N) starts at a seeded turn
  ``k = floor(u * turns)``, ``u ~ U[start_min_ratio, start_max_ratio]`` (seed: load.seed and
  j), clamped so at least one turn is left to profile (AIPerf's ``k_i``); a session of one
  turn starts at 0 without warm-up. Recycled plays start at turn 0. Turns before k and
  their subagents are not sent (AIPerf also resumes subagents live at t*; benchcamp does not).
- warm-up per lane: turn k is sent once at t = 0 with its whole prefix, before the window
  (``load.warmup_s``) opens, so its record is a warm-up record; its output is capped at
  ``primer_max_tokens`` (1: a prefill-only primer; 0: the recorded length). Turn k + 1
  follows it at once (AIPerf dispatches the first measured continuation immediately).
- cache bust: play c >= 1 of a session (a recycle, or a lane that wraps the workload) gets
  fresh block ids after the session's ``fixed_blocks`` (its tool + system prefix), the same
  ones for every session of the tree, so the play shares that prefix with other plays and
  its own context within the tree, and nothing else (AIPerf's ``[rid:...]`` marker at the
  first user turn; benchcamp changes the token ids instead of inserting ~8 marker tokens,
  so token counts stay exact).
- idle-gap cap: when no request is running and the next pending turn is more than
  ``idle_gap_cap_s`` away, every pending turn moves up by the same amount so the next one
  starts then (AIPerf's system idle-gap guard). The wall clock applies it per client
  process when no request of any process is running.
- streaming with ``ignore_eos`` (and ``min_tokens``): the request body (``loadgen.body``).
- no input truncation: ``max_input_tokens`` (unset) would end a session at its first turn
  above it; setting it makes the submission invalid.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np

from benchcamp.workload.model import Request, Session

_MASK63 = (1 << 63) - 1


def _bust_mask(cycle: int) -> int:
    d = hashlib.blake2b(f"benchcamp-agentx-bust/{cycle}".encode(), digest_size=8).digest()
    return (int.from_bytes(d, "big") & _MASK63) or 1


class AgentxReplay:
    """The rules of one point (``rules``: ``AgentxRules`` or its dict) over its top-level sessions."""

    def __init__(self, rules: Any, top: list[Session], level: int, seed: int) -> None:
        r = rules if isinstance(rules, dict) else rules.model_dump()
        self.min_ratio, self.max_ratio = float(r["start_min_ratio"]), float(r["start_max_ratio"])
        self.warmup, self.primer = bool(r["warmup_per_lane"]), int(r["primer_max_tokens"])
        self.bust = bool(r["cache_bust"])
        self.idle_cap: float | None = None if r["idle_gap_cap_s"] is None else float(r["idle_gap_cap_s"])
        self.max_input = r["max_input_tokens"]
        self.top, self.level, self.seed = top, int(level), int(seed)

    def start_turn(self, j: int) -> int:
        """The turn index the play of global index ``j`` starts at with a warm-up (AIPerf's k_i);
        -1: from turn 0 without one (recycled plays, sessions of one turn)."""
        if j >= self.level:
            return -1
        n = len(self.top[j % len(self.top)].requests)
        if n < 2:
            return -1
        u = np.random.default_rng([self.seed, 0xA6E7, j]).uniform(self.min_ratio, self.max_ratio)
        return int(min(int(u * n), n - 2))

    def _blocks(self, s: Session, blocks: tuple[int, ...], cycle: int) -> tuple[int, ...]:
        if not self.bust or cycle == 0:
            return blocks
        keep = int(s.fixed_blocks or 0)
        mask = _bust_mask(cycle)
        return blocks[:keep] + tuple((int(b) ^ mask) & _MASK63 for b in blocks[keep:])

    def requests(self, s: Session, cycle: int, start: int = -1) -> list[Request]:
        """The requests one play of ``s`` sends, in order (``start`` >= 0: the root of a lane's
        first play, warmed up at that turn)."""
        out: list[Request] = []
        warm = start >= 0
        for i, r in enumerate(s.requests[max(start, 0) :]):
            if self.max_input is not None and r.prompt_len > int(self.max_input):
                break  # input truncation (forbidden by AgentX): the session ends here
            blocks = self._blocks(s, r.blocks, cycle)
            if warm and i == 0:
                if not self.warmup:
                    continue
                out_len = self.primer if self.primer > 0 else r.output_len
                out.append(replace(r, blocks=blocks, output_len=out_len, think_s=0.0))
            elif warm and i == 1:
                out.append(replace(r, blocks=blocks, think_s=0.0))
            else:
                out.append(replace(r, blocks=blocks) if blocks is not r.blocks else r)
        return out

    def play(self, s: Session, cycle: int, start: int = -1) -> Session:
        """``s`` as this play sends it (same id, parent and kind; its own requests)."""
        return replace(s, requests=self.requests(s, cycle, start))
