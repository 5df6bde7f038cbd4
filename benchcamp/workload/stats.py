"""Workload statistics, including the theoretical prefix-cache hit rate.

Theoretical hit rate (unlimited cache, in tokens), defined exactly:

* Replay order: requests sorted by (session ``arrival_s``, session position in
  the workload, turn). This serialises concurrent sessions: with all sessions
  at t=0 (closed loop) session 2 runs after session 1 has finished. A real
  replay interleaves them, which only moves *which* of two concurrent requests
  misses on a prefix first; subagents are counted after their parent's later
  turns for the same reason.
* Cache unit: blocks of ``b`` tokens (default: the workload's block size; any
  ``b`` dividing it, e.g. the engine's 16). Sub-block j of workload block i is
  identified by the chain of block ids 0..i and j, like vLLM's chained block
  hashes; only *full* units are cached or hit (a partial tail never hits).
* A unit of a request is a hit when the same unit (same chain, same j) was full
  in an earlier request's prompt. Hits are leading: counting stops at the first
  miss. As in vLLM, at least the last token is always computed, so hits are
  capped at ``(prompt_len - 1) // b * b``.
* Rate = hit tokens / prompt tokens over all requests. Outputs are not cached:
  a replay's generated tokens differ from the workload's next-turn content.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from benchcamp.workload.model import Request, Session, Workload


def replay_order(w: Workload) -> Iterator[tuple[Session, Request]]:
    order = sorted(range(len(w.sessions)), key=lambda i: (w.sessions[i].arrival_s, i))
    for i in order:
        s = w.sessions[i]
        for r in sorted(s.requests, key=lambda r: r.turn):
            yield s, r


def cache_hits(w: Workload, block_size: int | None = None) -> list[int]:
    """Cached prompt tokens per request, in replay order (see module doc)."""
    b = block_size or w.block_size
    if w.block_size % b:
        raise ValueError(f"block_size={b} must divide the workload block size {w.block_size}")
    subs = w.block_size // b
    chains: dict[tuple[int, int], int] = {}  # (parent chain id, block id) -> chain id
    seen: dict[int, int] = {}  # chain id -> most full sub-blocks seen in one earlier prompt
    out: list[int] = []
    for _, r in replay_order(w):
        full_units = r.prompt_len // b
        hit = 0
        missed = False
        parent = -1
        pending: list[tuple[int, int]] = []
        for i, block in enumerate(r.blocks):
            key = (parent, int(block))
            chain = chains.get(key)
            if chain is None:
                chain = chains[key] = len(chains)
            parent = chain
            here = min(subs, max(0, full_units - i * subs))
            if here == 0:
                break
            if not missed:
                h = min(here, seen.get(chain, 0))
                hit += h
                missed = h < subs
            pending.append((chain, here))
        for chain, here in pending:
            if here > seen.get(chain, 0):
                seen[chain] = here
        out.append(min(hit * b, (r.prompt_len - 1) // b * b) if r.prompt_len else 0)
    return out


def theoretical_hit_rate(w: Workload, block_size: int | None = None) -> float:
    hits = cache_hits(w, block_size)
    total = sum(r.prompt_len for _, r in replay_order(w))
    return sum(hits) / total if total else 0.0


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def workload_stats(w: Workload, block_size: int | None = None) -> dict[str, Any]:
    """Flat summary; see the module doc for the hit-rate definition."""
    reqs = [r for _, r in w.requests()]
    prompts = [r.prompt_len for r in reqs]
    outputs = [r.output_len for r in reqs]
    # think time = the pause before a turn that follows another turn (tool latency)
    thinks = [r.think_s for r in reqs if r.turn > 0]
    top = w.top_level()
    subs = [s for s in w.sessions if s.parent is not None]
    joins = w.children()
    hits = cache_hits(w, block_size)
    input_tokens, output_tokens = sum(prompts), sum(outputs)
    arrivals = [s.arrival_s for s in top]
    out = {
        "name": w.name,
        "block_size": w.block_size,
        "hit_rate_block_size": block_size or w.block_size,
        "sessions": len(top),
        "requests": len(reqs),
        "turns_per_session_mean": round(sum(len(s.requests) for s in top) / len(top), 3) if top else 0.0,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "prompt_output_ratio": round(input_tokens / output_tokens, 3) if output_tokens else 0.0,
        "context_mean": round(float(np.mean(prompts)), 1) if prompts else 0.0,
        "context_p50": round(_pct(prompts, 50), 1),
        "context_p90": round(_pct(prompts, 90), 1),
        "context_max": max(prompts, default=0),
        "output_mean": round(float(np.mean(outputs)), 1) if outputs else 0.0,
        "think_s_mean": round(float(np.mean(thinks)), 3) if thinks else 0.0,
        "think_s_p50": round(_pct(thinks, 50), 3),
        "think_s_p90": round(_pct(thinks, 90), 3),
        "subagent_sessions": len(subs),
        "subagent_requests": sum(len(s.requests) for s in subs),
        "subagent_joins": len(joins),
        "subagent_fanout_max": max((len(v) for v in joins.values()), default=0),
        "arrival_span_s": round(max(arrivals) - min(arrivals), 3) if arrivals else 0.0,
        "cached_tokens_theoretical": sum(hits),
        "theoretical_hit_rate": round(sum(hits) / input_tokens, 6) if input_tokens else 0.0,
    }
    if w.uses_optional():  # imported traces that say what each session is (older workloads: unchanged stats)
        kinds = [s.kind or "" for s in w.sessions]
        out.update(
            subagent_sessions=kinds.count("subagent"),
            subagent_requests=sum(len(s.requests) for s in w.sessions if s.kind == "subagent"),
            aux_requests=sum(len(s.requests) for s in w.sessions if s.kind == "aux"),
            background_children=sum(1 for s in subs if s.joined is False),
        )
    return out


def format_stats(stats: dict[str, Any]) -> str:
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in stats.items()) + "\n"
