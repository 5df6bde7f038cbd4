"""Small traces in the AgentX (Weka / kv-cache-tester) format, as AIPerf's loader reads it
(ai-dynamo/aiperf src/aiperf/dataset/loader/weka_trace_models.py, commit 90f31d18): every field
name, type and nesting is the real format's; only the sizes are small.

``workloads/agentx-sample.json`` is ``sample_traces()`` written by ``write_sample``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

BS = 64


def _req(t: float, model: str, n_in: int, n_out: int, ids: list[int], api: float, think: float, **kw: Any) -> dict:
    d = {
        "t": round(t, 3),
        "type": kw.pop("type", "n"),
        "model": model,
        "in": n_in,
        "out": n_out,
        "hash_ids": ids,
        "input_types": kw.pop("input_types", ["tool_result"]),
        "output_types": ["text"],
        "stop": kw.pop("stop", "tool_use"),
        "api_time": round(api, 3),
        "think_time": round(think, 3),
    }
    d.update(kw)
    return d


def make_trace(
    tid: str, seed: int, turns: int = 6, base_tokens: int = 4160, step_tokens: int = 700, subagents: bool = True
) -> dict:
    """A main agent of ``turns`` growing turns; after turn 1 a joined Explore subagent, after turn 3
    a background one (it outlives the main agent's next turn start) and an aux Haiku one-off."""
    rng = random.Random(seed)
    opus, haiku = "claude-opus-4-5-20251101", "claude-haiku-4-5-20251001"
    nid = [seed * 100_000]

    def fresh(n: int) -> list[int]:
        out = list(range(nid[0], nid[0] + n))
        nid[0] += n
        return out

    ctx = fresh(-(-base_tokens // BS))
    n_in = base_tokens
    t = 0.0
    reqs: list[dict] = []
    for k in range(turns):
        out = rng.randint(40, 400)
        api = round(0.5 + out / 60.0, 3)
        reqs.append(
            _req(t, opus, n_in, out, list(ctx), api, 0.0 if k == 0 else 1.5, type="s" if k % 2 else "n", ttft=0.4)
            if k % 2
            else _req(t, opus, n_in, out, list(ctx), api, 0.0 if k == 0 else 1.5)
        )
        end = t + api
        if subagents and k == 1:
            sa_t = end + 0.2
            sa_in = 2304 + 900
            ids = fresh(-(-sa_in // BS))
            inner = [
                _req(sa_t, haiku, sa_in, 120, ids, 1.0, 0.0, input_types=["text"]),
                _req(sa_t + 1.6, haiku, sa_in + 300, 90, ids + fresh(5), 0.8, 0.6),
            ]
            dur = (inner[-1]["t"] + inner[-1]["api_time"] - sa_t) * 1000
            reqs.append(
                {
                    "t": round(sa_t, 3),
                    "type": "subagent",
                    "agent_id": f"agent_{seed:03d}a",
                    "subagent_type": "Explore",
                    "duration_ms": int(dur),
                    "total_tokens": sum(q["in"] + q["out"] for q in inner),
                    "tool_use_count": 2,
                    "status": "completed",
                    "requests": inner,
                    "models": [haiku],
                    "tool_tokens": 1856,
                    "system_tokens": 448,
                }
            )
            end = sa_t + dur / 1000 + 0.1
        if subagents and k == 3:
            # an aux one-off: a different model on a fresh small context
            reqs.append(_req(end + 0.1, haiku, 1500, 60, fresh(-(-1500 // BS)), 0.6, 0.0, input_types=["text"]))
            # a background subagent: relative inner t (older captures), never waited for
            bg_t = end + 0.3
            ids = fresh(-(-2600 // BS))
            inner = [_req(0.0, haiku, 2600, 200, ids, 30.0, 0.0, input_types=["text"])]
            reqs.append(
                {
                    "t": round(bg_t, 3),
                    "type": "subagent",
                    "agent_id": f"agent_{seed:03d}b",
                    "subagent_type": "general-purpose",
                    "duration_ms": None,
                    "total_tokens": None,
                    "tool_use_count": None,
                    "status": "async_launched",
                    "requests": inner,
                    "models": [haiku],
                }
            )
        grow = step_tokens + rng.randint(0, 300)
        n_in += out + grow
        ctx = ctx + fresh(-(-n_in // BS) - len(ctx))
        t = end + 1.5
    return {
        "id": tid,
        "models": [opus, haiku],
        "block_size": BS,
        "hash_id_scope": "local",
        "tool_tokens": 1856,
        "system_tokens": 2304,
        "requests": reqs,
        "totals": {"requests": len(reqs)},
    }


def sample_traces() -> list[dict]:
    return [
        make_trace("trace_a1b2c3", 1, turns=8),
        make_trace("trace_d4e5f6", 2, turns=6),
        make_trace("trace_0789ab", 3, turns=5, subagents=False),
        make_trace("trace_cdef01", 4, turns=7),
    ]


def write_sample(path: str | Path) -> None:
    Path(path).write_text(json.dumps(sample_traces(), indent=1) + "\n")
