"""SemiAnalysis AgentX trace import (the Weka / kv-cache-tester agentic-coding format).

The format, as AIPerf reads it for its ``inferencex-agentx-mvp`` scenario
(``src/aiperf/dataset/loader/weka_trace_models.py`` in ai-dynamo/aiperf, commit
90f31d18c57a572640729b1070a01b1bf2c7c7e4; the scenario is
``src/aiperf/common/scenario/inferencex_agentx_mvp.py`` in SemiAnalysisAI/aiperf,
commit 211ad67f51ed99e2abc932b91208c5ae8bc8b04f; loader semantics from its
``weka_trace.py``, SemiAnalysisAI/aiperf commit 2141c6217b7f051379eca54263cee8eb62767304,
and ``docs/tutorials/weka-trace.md``, commit 063a53220a15473047936596c2502072eb237632).
One JSON object per trace (a file, a folder of ``*.json`` files, one trace each, or a Hugging Face copy of a
corpus repo, one row per trace: ``agentx_files``):

- ``id``, ``models``, ``block_size`` (64 in the AgentX corpora), ``hash_id_scope``
  (``"local"``: ids are per trace), ``tool_tokens``, ``system_tokens``, ``requests``,
  optional ``totals``;
- a request: ``t`` (start, s), ``type`` ``"n"`` or ``"s"``, ``model``, ``in``, ``out``,
  ``hash_ids`` (one id per ``block_size`` tokens of the context), optional
  ``input_types``, ``output_types``, ``stop``, ``api_time`` (s), ``think_time`` (s),
  ``ttft`` (``"s"`` only);
- a subagent: ``type: "subagent"``, ``t`` (spawn), ``agent_id``, ``subagent_type``,
  ``status``, ``models``, ``requests`` (its own ``n``/``s`` requests; their ``t`` is
  absolute, or relative to the spawn when it is before it), optional ``duration_ms``,
  ``total_tokens``, ``tool_use_count``, ``tool_tokens``, ``system_tokens``.

What the harness accepts and rejects, field by field, is ``agentx_schema``; the structure it builds
(preamble split, fan-out chains, subagent chains, tiered joins, cross-stream dependencies, model map)
is ``agentx_plan``; both follow SemiAnalysis' harness, agentx-harness 1.0.12 (an AIPerf fork), and
``tests/workload/test_agentx_conformance.py`` checks them against its own loader. This module maps
that structure onto sessions:

- blocks: the workload's block size is the traces' greatest common divisor (64 in the AgentX
  corpora; a trace of another size has each hash id split into ``block_size / gcd`` blocks); a
  request's blocks are its ``hash_ids``, each mapped to a 63-bit id unique to (trace, hash id), so
  equal ids in a trace are equal prefixes and two traces never alias (``hash_id_scope`` local).
  When ``in`` needs more blocks than ``hash_ids`` has, the rest are fresh blocks of that request
  alone; ids beyond ``ceil(in / block_size)`` are dropped. ``prompt_len = max(in, 1)``,
  ``output_len = max(out, 1)`` (the harness sends ``max_tokens`` 1 for an ``out`` below 1).
- sessions: the root (``kind: main``: the main chain with the preamble), then one child session per
  child conversation with requests (``kind: aux`` for the harness's ``aux`` sidecars, ``subagent``
  for subagents and fan-out agents), spawned after its spawn turn (``parent_turn``); ``joined``:
  some later main turn waits for it (the first one after it ended); ``join_turn``: that turn, when
  it is not the next one (a tiered join; the turns before it go on meanwhile).
- delays: end-to-start, as the harness replays them: a turn's ``think_s`` is
  ``t - (t_prev + api_time_prev)`` clamped at 0 (at a join: minus the latest end of the children
  it joins, as benchcamp counts think time); a child's first request waits its start minus the end
  of its spawn turn.
- ``fixed_blocks``: the tool + system prefix the session's turn 0 carries (the trace's for the root,
  the entry's for a subagent, none for a sidecar), in whole blocks: what a first-turn cache-bust
  marker leaves shared across plays.
- cross-stream dependencies: each request's ``after`` (the harness's ``replay_predecessors``, counted in
  ``meta["agentx"]["dependencies"]``); both clocks send a request only once every one of them has ended
  (``benchcamp.loadgen.dependencies``).
- models: each request's ``model`` is the one its trace recorded, ``meta["agentx_models"]`` each trace's models
  in the harness's order (main first); the replay maps them onto the served models with
  ``agentx_plan.model_map`` (``benchcamp.workload.agentx.models.served_models``).
"""

from __future__ import annotations

import hashlib
import math
from functools import reduce
from pathlib import Path

from benchcamp.errors import TraceError
from benchcamp.workload.agentx.files import trace_documents
from benchcamp.workload.agentx.plan import TracePlan, plan_trace
from benchcamp.workload.agentx.schema import WekaRequest, parse_trace
from benchcamp.workload.model import Request, Session, Workload

AGENTX_BLOCK_SIZE = 64
DEFAULT_VOCAB_SIZE = 32000
_COUNTS = (
    "traces",
    "main_requests",
    "subagents",
    "subagent_requests",
    "aux_requests",
    "fanout_chains",
    "background_children",
    "tiered_joins",
    "dependencies",
    "subagents_dropped_no_parent_turn",
    "subagents_without_requests",
    "traces_without_requests",
)


def _block_id(trace: str, hid: int, part: int = 0) -> int:
    key = f"{trace}\x00{hid}" if part == 0 else f"{trace}\x00{hid}\x00{part}"
    d = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(d, "big") >> 1


def _fresh_id(trace: str, where: str, k: int) -> int:
    d = hashlib.blake2b(f"{trace}\x00fill\x00{where}\x00{k}".encode(), digest_size=8).digest()
    return int.from_bytes(d, "big") >> 1


def _blocks(trace: str, r: WekaRequest, where: str, bs: int, unit: int) -> tuple[int, ...]:
    """A request's blocks of ``unit`` tokens (the workload's block size, which divides the trace's ``bs``):
    each hash id is ``bs // unit`` blocks, the tokens past the hash ids fresh blocks of this request."""
    n_in = max(r.input_length, 1)
    need = -(-n_in // unit)
    per = bs // unit
    out = [_block_id(trace, h, j) for h in r.hash_ids[: -(-need // per)] for j in range(per)][:need]
    out += [_fresh_id(trace, where, k) for k in range(len(out), need)]
    return tuple(out)


def _end(r: WekaRequest) -> float:
    return r.t + max(r.api_time if r.api_time is not None and math.isfinite(r.api_time) else 0.0, 0.0)


def _gap(t: float, after: float) -> float:
    d = t - after
    return d if d > 0 else 0.0  # (NaN: 0)


def _after(preds: list[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple((sid, int(k)) for sid, k in preds)


def plan_sessions(plan: TracePlan, unit: int, counts: dict[str, int]) -> list[Session]:
    """A trace's plan -> its sessions: the root first, then its children (empty ones left out)."""
    tid, bs = plan.id, plan.block_size
    root = plan.streams[0]
    children = [s for s in plan.streams[1:] if s.requests]
    # the children a main turn joins: benchcamp counts its think time from their end (benchcamp.workload.model)
    joined_end: dict[int, float] = {}
    for c in children:
        if c.join_turn is not None:
            joined_end[c.join_turn] = max(joined_end.get(c.join_turn, -math.inf), c.end_s)
    main: list[Request] = []
    for k, r in enumerate(root.requests):
        after = -math.inf if k == 0 else max(_end(root.requests[k - 1]), joined_end.get(k, -math.inf))
        think = 0.0 if k == 0 else _gap(r.t, after)
        main.append(
            Request(
                k,
                _blocks(tid, r, f"{tid}#{k}", bs, unit),
                max(r.input_length, 1),
                max(r.output_length, 1),
                think,
                after=_after(root.predecessors[k]),
                model=r.model,
            )
        )
    fixed = max(root.init_tokens, 0) // unit
    out = [Session(tid, main, 0.0, None, None, "main", None, min(fixed, len(main[0].blocks)) if main else 0)]
    spawn_end = {k: _end(r) for k, r in enumerate(root.requests)}
    for c in children:
        assert c.spawn_turn is not None
        reqs = []
        for j, q in enumerate(c.requests):
            after = spawn_end[c.spawn_turn] if j == 0 else _end(c.requests[j - 1])
            reqs.append(
                Request(
                    j,
                    _blocks(tid, q, f"{c.id}#{j}", bs, unit),
                    max(q.input_length, 1),
                    max(q.output_length, 1),
                    _gap(q.t, after),
                    after=_after(c.predecessors[j]),
                    model=q.model,
                )
            )
        kind = "aux" if c.kind == "aux" else "subagent"
        tiered = c.join_turn is not None and c.join_turn != c.spawn_turn + 1
        joined = c.join_turn is not None
        s = Session(
            c.id, reqs, 0.0, tid, c.spawn_turn, kind, joined, min(max(c.init_tokens, 0) // unit, len(reqs[0].blocks))
        )
        s.join_turn = c.join_turn if tiered else None
        out.append(s)
        counts["aux_requests" if kind == "aux" else "subagent_requests"] += len(reqs)
        counts["subagents"] += c.kind == "subagent"
        counts["fanout_chains"] += c.kind == "chain"
        counts["background_children"] += not joined
        counts["tiered_joins"] += tiered
    counts["subagents_without_requests"] += sum(1 for s in plan.streams[1:] if not s.requests and s.kind == "subagent")
    counts["subagents_dropped_no_parent_turn"] += plan.dropped_subagents
    counts["dependencies"] += sum(len(p) for s in plan.streams for p in s.predecessors)
    counts["main_requests"] += len(main)
    return out


def read_plans(path: str | Path) -> tuple[list[TracePlan], str]:
    """Every trace under ``path`` (``agentx_files``: a file, a folder, a dataset copy), planned; the files' sha256."""
    plans: list[TracePlan] = []
    seen: set[str] = set()
    docs, sha = trace_documents(Path(path))
    for where, d in docs:
        tr = parse_trace(d, where)
        if tr.id in seen:
            raise TraceError(f"{where}: trace id {tr.id!r} appears twice; give each trace its own id")
        seen.add(tr.id)
        plans.append(plan_trace(tr, where))
    return plans, sha


def read_agentx(path: str | Path, name: str | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Workload:
    """A trace file (one trace object, or a JSON list of them) or a folder of trace files -> Workload.
    Traces of different block sizes share one workload at their greatest common divisor."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace {p} not found")
    plans, sha = read_plans(p)
    unit = reduce(math.gcd, (pl.block_size for pl in plans), 0) or AGENTX_BLOCK_SIZE
    counts = dict.fromkeys(_COUNTS, 0)
    sessions: list[Session] = []
    for pl in plans:
        counts["traces"] += 1
        if not pl.streams[0].requests:
            counts["traces_without_requests"] += 1
            continue
        sessions.extend(plan_sessions(pl, unit, counts))
    if not sessions:
        raise TraceError(f"{p.name}: no top-level requests in any trace (nothing to replay)")
    models = {pl.id: pl.models for pl in plans if pl.streams[0].requests}
    meta = {"source": "agentx", "trace": p.name, "trace_sha256": sha, "agentx": counts, "agentx_models": models}
    return Workload(name or p.stem, unit, vocab_size, sessions, meta)
