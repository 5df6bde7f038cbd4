"""An AgentX trace's structure, as SemiAnalysis' harness (agentx-harness 1.0.12) builds it.

``aiperf/dataset/loader/weka_trace.py`` there turns one trace into a root conversation and child
conversations; this module makes the same ones, rule by rule (the conformance tests compare the two
on every trace of their corpus):

- **preamble split** (``_split_off_preamble``): the earliest top-level request is set aside before
  chain detection when its hash ids share no leading block with any other top-level request and it
  is small (``out`` <= 64: Claude Code's title generation) or none of its blocks recurs; it stays
  the main agent's first turn but does not found the main chain.
- **fan-out chains** (``detect_agent_chains``, vendored in ``agentx_chains``): the remaining
  top-level requests split into per-agent chains by hash-id LCP; the chain of the first one is the
  main agent, every other chain a child: ``::aux:NNN`` (a one-shot sidecar: one request on another
  model or a small fresh context, or a large-in/short-out reduction), ``::wg:GGG_MMM`` (a member of
  a parallel group of >= 3 workers forked from one request), else ``::fa:NNN``.
- **subagents**: each ``subagent`` entry's requests (``t`` made absolute) split the same way into
  ``::sa:<agent_id>`` and its ``:aux:`` / ``:fa:`` / ``:wg:`` siblings; an entry with no earlier
  main turn is dropped; a duplicate ``agent_id`` among the kept ones is an error.
- **tiered joins**: a child spawns after the last main turn before it (a flat chain: before its
  first request; else turn 0) and is joined at the first later main turn that starts at or after
  it ended (``duration_ms``, else its requests' last ``t + api_time``); none: a background child.
  Children with the same (spawn, join) turns form one branch.
- **cross-stream dependencies** (``infer_cross_stream_predecessors`` in
  ``aiperf/timing/replay_dependencies.py``): within a scope (the trace: root, flat chains; each
  subagent: its chains), a request waits for every other stream's latest request that had ended by
  its recorded start (the frontier, without the ones an element of it already implies).
- **model map** (``_build_model_map``): the main model (the first top-level request's; else the
  first subagent request's) onto the first served model, the others in order of first appearance
  onto the next ones, wrapping around.
- what the harness's loader and orchestrator reject besides the schema: a turn 0 whose hash ids do
  not cover its ``tool_tokens + system_tokens`` prefix, a join turn not after its spawn turn, a
  branch starting before t = 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from benchcamp.errors import TraceError
from benchcamp.workload.agentx.chains import (
    detect_agent_chains,
    is_aux_chain,
    is_reduction_chain,
    worker_group_assignment,
)
from benchcamp.workload.agentx.schema import WekaRequest, WekaSubagent, WekaTrace

EPS_S = 1e-6  # _JOIN_EPSILON_SECONDS
TITLE_GEN_MAX_OUTPUT_TOKENS = 64
# Environment.DATASET defaults of agentx-harness 1.0.12 (aiperf/common/environment.py)
SEAM_MAX_GAP_S, SEAM_MIN_OVERLAP = 3600.0, 0.5
AUX_MAX_REQUESTS, AUX_ISL_RATIO, AUX_ISL_FLOOR, AUX_CROSS_MODEL = 1, 0.10, 16384, True
REDUCTION_OSL_MAX, REDUCTION_RATIO, WORKER_GROUP_MIN = 4000, 20.0, 3

Indexed = tuple[int, WekaRequest]


@dataclass
class Stream:
    """One conversation: the root (``kind`` main) or a child."""

    id: str
    kind: str  # main | aux | subagent (a subagent's main chain) | chain (a flat or nested fan-out agent)
    requests: list[WekaRequest]
    scope: str  # the dependency scope
    init_tokens: int  # the tool + system prefix its turn 0 carries
    spawn_turn: int | None = None
    join_turn: int | None = None
    end_s: float = 0.0
    predecessors: list[list[tuple[str, int]]] = field(default_factory=list)


@dataclass
class Branch:
    children: list[str]
    spawn_turn: int
    join_turn: int | None
    start_s: float


@dataclass
class TracePlan:
    id: str
    block_size: int
    streams: list[Stream]  # the root first
    branches: list[Branch]
    models: list[str]  # main first, then by first appearance
    dropped_subagents: int = 0


def _end(start: float, api: float | None) -> float:
    return start + max(api if api is not None and math.isfinite(api) else 0.0, 0.0)


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def split_off_preamble(normals: list[Indexed]) -> tuple[list[Indexed], list[Indexed]]:
    if len(normals) < 2:
        return [], normals
    ordered = sorted(normals, key=lambda it: (it[1].t, it[0]))
    outer, req = ordered[0]
    if not req.hash_ids:
        return [], normals
    rest = ordered[1:]
    if any(_lcp(req.hash_ids, o.hash_ids) > 0 for _, o in rest if o.hash_ids):
        return [], normals
    if req.output_length > TITLE_GEN_MAX_OUTPUT_TOKENS:
        others = {h for _, o in rest for h in o.hash_ids}
        if not others.isdisjoint(req.hash_ids):
            return [], normals
    return [(outer, req)], sorted(rest, key=lambda it: it[0])


def _chain_init_tokens(tool: int, system: int, bs: int, base_first: list[int], first: list[int]) -> int:
    declared = math.ceil((tool + system) / bs)
    if (
        declared > 0
        and len(first) >= declared
        and len(base_first) >= declared
        and first[:declared] == base_first[:declared]
    ):
        return tool + system
    return 0


def _suffix(n: int, aux: bool, wg: tuple[int, int] | None) -> tuple[str, str]:
    if aux:
        return f"aux:{n:03d}", "aux"
    if wg is not None:
        return f"wg:{wg[0]:03d}_{wg[1]:03d}", "chain"
    return f"fa:{n:03d}", "chain"


def _split(
    reqs: list[Indexed], main_model_of: list[Indexed] | None = None
) -> tuple[list[Indexed], list[tuple[list[Indexed], bool, tuple[int, int] | None, Any]]]:
    """Preamble split + chain detection: (main chain with the preamble, [(worker, aux, wg coord, fork)])."""
    preamble, rest = split_off_preamble(reqs)
    det = detect_agent_chains(rest, seam_max_gap_seconds=SEAM_MAX_GAP_S, seam_min_overlap_ratio=SEAM_MIN_OVERLAP)
    if not det.chains:
        return sorted(preamble, key=lambda it: (it[1].t, it[0])), []
    main = list(det.chains[det.main_index].requests)
    peak = max((r.input_length for _, r in main), default=0)
    model = main[0][1].model if main else None
    wg = worker_group_assignment(det, group_min=WORKER_GROUP_MIN)
    workers = []
    for ci in det.worker_indices:
        ch = det.chains[ci]
        rs = [r for _, r in ch.requests]
        aux = is_aux_chain(
            rs,
            peak,
            max_requests=AUX_MAX_REQUESTS,
            isl_ratio=AUX_ISL_RATIO,
            isl_floor=AUX_ISL_FLOOR,
            main_model=model,
            cross_model=AUX_CROSS_MODEL,
        )
        red = not aux and is_reduction_chain(
            rs, osl_max=REDUCTION_OSL_MAX, ratio=REDUCTION_RATIO, isl_floor=AUX_ISL_FLOOR
        )
        workers.append((list(ch.requests), aux or red, None if (aux or red) else wg.get(ci), ch))
    if preamble:
        main = sorted(preamble + main, key=lambda it: (it[1].t, it[0]))
    return main, workers


def _subagent_streams(tid: str, e: WekaSubagent, bs: int) -> list[Stream]:
    inner = [
        (
            j,
            WekaRequest(
                e.t + r.t,
                r.type,
                r.model,
                r.input_length,
                r.output_length,
                r.hash_ids,
                r.api_time,
                r.think_time,
                r.input_types,
                r.stop,
            )
            if r.t + EPS_S < e.t
            else r,
        )
        for j, r in enumerate(e.requests)
    ]
    scope = f"{tid}::sa:{e.agent_id}"
    if not inner:
        return [Stream(scope, "subagent", [], scope, e.tool_tokens + e.system_tokens)]
    main, workers = _split(inner)
    base_first = next((r.hash_ids for _, r in _detected_main(inner) if r.hash_ids), [])
    out = [Stream(scope, "subagent", [r for _, r in main], scope, e.tool_tokens + e.system_tokens)]
    for n, (reqs, aux, wg, _) in enumerate(workers):
        first = next((r.hash_ids for _, r in reqs if r.hash_ids), [])
        suffix, kind = _suffix(n, aux, wg)
        init = _chain_init_tokens(e.tool_tokens, e.system_tokens, bs, base_first, first)
        out.append(Stream(f"{scope}:{suffix}", kind, [r for _, r in reqs], scope, init))
    return out


def _detected_main(reqs: list[Indexed]) -> list[Indexed]:
    """The detected main chain without the preamble (the harness's yardstick for a chain's prefix)."""
    _, rest = split_off_preamble(reqs)
    det = detect_agent_chains(rest, seam_max_gap_seconds=SEAM_MAX_GAP_S, seam_min_overlap_ratio=SEAM_MIN_OVERLAP)
    return list(det.chains[det.main_index].requests) if det.chains else []


def _models(tr: WekaTrace) -> list[str]:
    main = next((r.model for r in tr.requests if isinstance(r, WekaRequest)), None)
    if main is None:
        main = next((r.requests[0].model for r in tr.requests if isinstance(r, WekaSubagent) and r.requests), None)
    if main is None:
        return []
    out = [main]
    for r in tr.requests:
        for q in r.requests if isinstance(r, WekaSubagent) else [r]:
            if q.model not in out:
                out.append(q.model)
    return out


def model_map(models: list[str], served: list[str]) -> dict[str, str]:
    """A trace's models (main first) onto the served model names, wrapping around (identity: none served)."""
    return {m: served[i % len(served)] for i, m in enumerate(models)} if served else {}


def _sa_end(e: WekaSubagent) -> float:
    if e.duration_ms is not None:
        d = e.duration_ms / 1000.0
        return e.t + (d if math.isfinite(d) and d >= 0 else 0.0)
    if e.requests:
        return max(_end(e.t + q.t if q.t + EPS_S < e.t else q.t, q.api_time) for q in e.requests)
    return e.t


def _prefix_check(where: str, s: Stream, bs: int) -> None:
    if not s.requests or s.init_tokens <= 0:
        return
    need = math.ceil(s.init_tokens / bs)
    have = len(s.requests[0].hash_ids)
    if need > have:
        raise TraceError(
            f"{where}: hash_ids of {s.id}'s first request cover {have} blocks but its tool_tokens + system_tokens "
            f"prefix ({s.init_tokens} tokens) needs {need}: record the prefix's hash ids"
        )


def plan_trace(tr: WekaTrace, where: str) -> TracePlan:
    """One validated trace -> its streams, branches and dependencies (TraceError on what the harness rejects)."""
    tid, bs = tr.id, tr.block_size
    normals: list[Indexed] = [(i, r) for i, r in enumerate(tr.requests) if isinstance(r, WekaRequest)]
    subs = [(i, r) for i, r in enumerate(tr.requests) if isinstance(r, WekaSubagent)]
    flat: list[tuple[Stream, int]] = []  # (stream, first outer idx)
    if len(normals) > 1:
        main, workers = _split(normals)
        if workers:
            main_first = next((r.hash_ids for _, r in _detected_main(normals) if r.hash_ids), [])
            for n, (reqs, aux, wg, _) in enumerate(workers):
                suffix, kind = _suffix(n, aux, wg)
                init = _chain_init_tokens(tr.tool_tokens, tr.system_tokens, bs, main_first, reqs[0][1].hash_ids)
                flat.append((Stream(f"{tid}::{suffix}", kind, [r for _, r in reqs], tid, init), reqs[0][0]))
            normals = main
    root = Stream(tid, "main", [r for _, r in normals], tid, tr.tool_tokens + tr.system_tokens)
    turn_of = {oi: k for k, (oi, _) in enumerate(normals)}
    t_of = {oi: r.t for oi, r in normals}
    later = sorted(turn_of.items())

    def join_at(after_outer: int, end: float) -> int | None:
        return next((pos for oi, pos in later if oi > after_outer and t_of[oi] + EPS_S >= end), None)

    streams = [root]
    branches: list[Branch] = []
    groups: dict[tuple[int, int | None], list[tuple[list[Stream], float]]] = defaultdict(list)
    order: list[tuple[int, int | None]] = []
    seen: set[str] = set()
    dropped = 0
    for oi, e in subs:
        pre = max((pos for o, pos in turn_of.items() if o < oi), default=None)
        if pre is None:
            dropped += 1
            continue
        if e.agent_id in seen:
            raise TraceError(f"{where}: subagent agent_id {e.agent_id!r} appears twice; give each subagent its own id")
        seen.add(e.agent_id)
        end = _sa_end(e)
        key = (pre, join_at(oi, end))
        if key not in groups:
            order.append(key)
        ss = _subagent_streams(tid, e, bs)
        for s in ss:
            s.spawn_turn, s.join_turn, s.end_s = key[0], key[1], end
        groups[key].append((ss, e.t))
    for key in order:
        members = groups[key]
        branches.append(Branch([s.id for ss, _ in members for s in ss], key[0], key[1], min(t for _, t in members)))
        for ss, _ in members:
            streams.extend(ss)
    fgroups: dict[tuple[int, int | None], list[Stream]] = defaultdict(list)
    forder: list[tuple[int, int | None]] = []
    for s, first_outer in flat:
        pre = max((pos for o, pos in turn_of.items() if o < first_outer), default=0)
        end = max(_end(r.t, r.api_time) for r in s.requests)
        key = (pre, join_at(first_outer, end))
        s.spawn_turn, s.join_turn, s.end_s = key[0], key[1], end
        if key not in fgroups:
            forder.append(key)
        fgroups[key].append(s)
    for key in forder:
        ss = fgroups[key]
        branches.append(Branch([s.id for s in ss], key[0], key[1], min(s.requests[0].t for s in ss)))
    streams.extend(s for s, _ in flat)  # after the subagents' children, as the harness emits them
    for b in branches:
        if b.join_turn is not None and b.join_turn <= b.spawn_turn:
            raise TraceError(
                f"{where}: a child spawned after main turn {b.spawn_turn} would be joined at turn {b.join_turn}: "
                "the requests' t values are out of order"
            )
        if not b.start_s >= 0:
            raise TraceError(
                f"{where}: a subagent or fan-out chain starts at t = {b.start_s} (before 0); t must be >= 0"
            )
    for s in streams:
        _prefix_check(where, s, bs)
    _dependencies(streams)
    return TracePlan(tid, bs, streams, branches, _models(tr), dropped)


def _dependencies(streams: list[Stream]) -> None:
    """Each request's cross-stream predecessors within its scope (infer_cross_stream_predecessors)."""
    by_scope: dict[str, list[Stream]] = defaultdict(list)
    for s in streams:
        by_scope[s.scope].append(s)
        s.predecessors = [[] for _ in s.requests]
    for members in by_scope.values():
        iv = {
            s.id: [
                (r.t * 1000.0, _end(r.t, r.api_time) * 1000.0, (s.id, k))
                for k, r in enumerate(s.requests)
                if math.isfinite(r.t)
            ]
            for s in members
        }
        for s in members:
            for k, r in enumerate(s.requests):
                if not math.isfinite(r.t):
                    continue
                start = r.t * 1000.0
                frontier = []
                for sid, cands in iv.items():
                    if sid == s.id:
                        continue
                    done = [c for c in cands if c[0] < start and c[1] <= start]
                    if done:
                        frontier.append(max(done, key=lambda c: (c[1], c[0], c[2])))
                preds = [
                    c[2] for c in frontier if not any(c[0] < o[0] and c[1] <= o[0] for o in frontier if o is not c)
                ]
                s.predecessors[k] = sorted(preds)


def structure(plan: TracePlan, served: list[str]) -> dict:
    """The summary the conformance tests compare with the harness's (scripts/agentx_harness/oracle.py)."""
    return {
        "sessions": {
            s.id: {
                "kind": "sub_aux"
                if s.kind == "aux" and "::sa:" in s.id
                else ("subagent" if s.kind == "subagent" else s.kind),
                "turns": len(s.requests),
            }
            for s in plan.streams
        },
        "branches": [
            {
                "children": sorted(b.children),
                "spawn_turn": b.spawn_turn,
                "join_turn": b.join_turn,
                "background": b.join_turn is None,
            }
            for b in plan.branches
        ],
        "dependencies": sum(len(p) for s in plan.streams for p in s.predecessors),
        "edges": sorted([s.id, k, a, j] for s in plan.streams for k, p in enumerate(s.predecessors) for a, j in p),
        "model_map": model_map(plan.models, served),
    }
