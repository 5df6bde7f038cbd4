"""SemiAnalysis AgentX trace import (the Weka / kv-cache-tester agentic-coding format).

The format, as AIPerf reads it for its ``inferencex-agentx-mvp`` scenario
(``src/aiperf/dataset/loader/weka_trace_models.py`` in ai-dynamo/aiperf, commit
90f31d18c57a572640729b1070a01b1bf2c7c7e4; the scenario is
``src/aiperf/common/scenario/inferencex_agentx_mvp.py`` in SemiAnalysisAI/aiperf,
commit 211ad67f51ed99e2abc932b91208c5ae8bc8b04f; loader semantics from its
``weka_trace.py``, SemiAnalysisAI/aiperf commit 2141c6217b7f051379eca54263cee8eb62767304,
and ``docs/tutorials/weka-trace.md``, commit 063a53220a15473047936596c2502072eb237632).
One JSON object per trace (a file, or a folder of ``*.json`` files, one trace each):

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

Mapping (each AIPerf rule named; where benchcamp simplifies, it says so):

- blocks: the workload's block size is the trace's (64); a request's blocks are its
  ``hash_ids``, each mapped to a 63-bit id unique to (trace, hash id), so equal ids
  in a trace are equal prefixes and two traces never alias (``hash_id_scope`` local).
  When ``in`` needs more blocks than ``hash_ids`` has, the rest are fresh blocks of
  that request alone (AIPerf fills "the precise recorded count for any remainder");
  ids beyond ``ceil(in / block_size)`` are dropped. ``prompt_len = in``,
  ``output_len = out``.
- main agent: the top-level requests on the trace's main model (the first top-level
  request's), in order, are the root session (``kind: main``).
- auxiliary requests: a top-level request on another model, or whose context shares
  no leading block with the main agent's previous turn (a fresh small context), is a
  one-off sidecar: a one-request child session (``kind: aux``) spawned after the
  preceding main turn (AIPerf's ``::aux:`` sidecars; benchcamp does not run AIPerf's
  whole hash-LCP chain detection, which also splits flattened worker fan-outs).
- subagents: a ``subagent`` entry is a child session (``kind: subagent``) spawned
  after the preceding main turn; its requests run in time order (AIPerf additionally
  splits a subagent's inner requests into LCP chains run side by side). An entry
  with no preceding main turn is dropped (AIPerf drops it too). It is joined (the
  parent's next main turn waits for it) when that turn started after the subagent
  ended (``t + duration_ms``, else its last request's ``t + api_time``); otherwise,
  or when there is no next main turn, it runs in the background (``joined: false``)
  and still holds its tree's slot.
- delays: end-to-start, as AIPerf always replays them: a turn's ``think_s`` is
  ``t - (t_prev + api_time_prev)`` clamped at 0 (after a join: minus the latest end of
  the children it joined, as benchcamp counts think time); a child's first request
  waits its start minus the end of the parent turn it follows.
- ``fixed_blocks``: the ``tool_tokens + system_tokens`` prefix in whole blocks: the
  blocks a first-turn cache-bust marker leaves shared across plays.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from benchcamp.errors import TraceError
from benchcamp.workload.model import Request, Session, Workload

AGENTX_BLOCK_SIZE = 64
DEFAULT_VOCAB_SIZE = 32000
MAX_TOKENS = 10_000_000
MAX_T_S = 7 * 24 * 3600.0
_TRACE_KEYS = {"id", "models", "block_size", "hash_id_scope", "tool_tokens", "system_tokens", "requests", "totals"}
_REQ_KEYS = {
    "t",
    "type",
    "model",
    "in",
    "out",
    "hash_ids",
    "input_types",
    "output_types",
    "stop",
    "api_time",
    "think_time",
    "ttft",
}
_SUB_KEYS = {
    "t",
    "type",
    "agent_id",
    "subagent_type",
    "duration_ms",
    "total_tokens",
    "tool_use_count",
    "status",
    "requests",
    "models",
    "tool_tokens",
    "system_tokens",
}


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _block_id(trace: str, hid: int) -> int:
    d = hashlib.blake2b(f"{trace}\x00{hid}".encode(), digest_size=8).digest()
    return int.from_bytes(d, "big") >> 1


def _fresh_id(trace: str, where: str, k: int) -> int:
    d = hashlib.blake2b(f"{trace}\x00fill\x00{where}\x00{k}".encode(), digest_size=8).digest()
    return int.from_bytes(d, "big") >> 1


class _Req:
    __slots__ = ("t", "model", "n_in", "n_out", "hash_ids", "api")

    def __init__(self, t: float, model: str, n_in: int, n_out: int, hash_ids: list[int], api: float) -> None:
        self.t, self.model, self.n_in, self.n_out, self.hash_ids, self.api = t, model, n_in, n_out, hash_ids, api

    @property
    def end(self) -> float:
        return self.t + self.api


def _check_fields(d: dict, allowed: Any, required: tuple[str, ...], where: str, why: str = "") -> None:
    """A trace object names no field outside ``allowed`` (``why`` says what forbids it) and every ``required``."""
    unknown = set(d) - set(allowed)
    if unknown:
        raise TraceError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}{why}")
    for f in required:
        if f not in d:
            raise TraceError(f"{where}: missing field {f}")


def _parse_request(d: Any, where: str) -> _Req:
    if not isinstance(d, dict):
        raise TraceError(f"{where}: a request must be a JSON object")
    _check_fields(d, _REQ_KEYS, ("t", "model", "in", "out"), where, " (AIPerf's format forbids extras)")
    t, model, n_in, n_out = d["t"], d["model"], d["in"], d["out"]
    if not _num(t) or not 0 <= t <= MAX_T_S:
        raise TraceError(f"{where}: t must be seconds from 0 to {MAX_T_S:.0f} (7 days), got {t!r}")
    if not isinstance(model, str):
        raise TraceError(f"{where}: model must be a string")
    if not _int(n_in) or not 1 <= n_in <= MAX_TOKENS:
        raise TraceError(f"{where}: in must be an integer from 1 to {MAX_TOKENS:,}, got {n_in!r}")
    if not _int(n_out) or not 1 <= n_out <= MAX_TOKENS:
        raise TraceError(f"{where}: out must be an integer from 1 to {MAX_TOKENS:,}, got {n_out!r}")
    ids = d.get("hash_ids", [])
    if not isinstance(ids, list) or not all(_int(x) and 0 <= x < 1 << 63 for x in ids):
        raise TraceError(f"{where}: hash_ids must be a list of non-negative 64-bit integers")
    api = d.get("api_time")
    if api is not None and not _num(api):
        raise TraceError(f"{where}: api_time must be a number of seconds or null, got {api!r}")
    return _Req(float(t), model, n_in, n_out, ids, max(0.0, float(api or 0.0)))


def _blocks(trace: str, r: _Req, where: str, bs: int) -> tuple[int, ...]:
    need = -(-r.n_in // bs)
    out = [_block_id(trace, h) for h in r.hash_ids[:need]]
    out += [_fresh_id(trace, where, k) for k in range(len(out), need)]
    return tuple(out)


def parse_trace(doc: Any, name: str) -> tuple[str, int, int, list[tuple[str, Any]]]:
    """Validate one trace object -> (id, block size, fixed tokens, [(kind, item)]) in file order."""
    if not isinstance(doc, dict):
        raise TraceError(f"{name}: expected a JSON object (one AgentX/Weka trace)")
    _check_fields(doc, _TRACE_KEYS, ("id", "block_size", "hash_id_scope", "requests"), name)
    tid, bs, scope = doc["id"], doc["block_size"], doc["hash_id_scope"]
    if not isinstance(tid, str) or not tid:
        raise TraceError(f"{name}: id must be a non-empty string")
    if not _int(bs) or not 1 <= bs <= 1 << 20:
        raise TraceError(f"{name}: block_size must be a positive integer, got {bs!r}")
    if scope != "local":
        raise TraceError(f"{name}: hash_id_scope must be 'local' (the only scope AIPerf replays), got {scope!r}")
    if not isinstance(doc["requests"], list):
        raise TraceError(f"{name}: requests must be a list")
    fixed = sum(int(doc.get(k) or 0) for k in ("tool_tokens", "system_tokens"))
    items: list[tuple[str, Any]] = []
    for i, d in enumerate(doc["requests"]):
        where = f"{name} requests[{i}]"
        kind = d.get("type") if isinstance(d, dict) else None
        if kind in ("n", "s"):
            items.append(("req", _parse_request(d, where)))
        elif kind == "subagent":
            unknown = set(d) - _SUB_KEYS
            if unknown:
                raise TraceError(f"{where}: unknown subagent field(s) {', '.join(sorted(unknown))}")
            for f in ("t", "agent_id", "requests"):
                if f not in d:
                    raise TraceError(f"{where}: subagent missing field {f}")
            if not _num(d["t"]) or d["t"] < 0:
                raise TraceError(f"{where}: subagent t must be seconds >= 0")
            if not isinstance(d["requests"], list):
                raise TraceError(f"{where}: subagent requests must be a list")
            inner = []
            for j, r in enumerate(d["requests"]):
                if not isinstance(r, dict) or r.get("type") not in ("n", "s"):
                    raise TraceError(f"{where}.requests[{j}]: a subagent's requests are type 'n' or 's'")
                q = _parse_request(r, f"{where}.requests[{j}]")
                if q.t + 1e-6 < d["t"]:  # relative to the spawn (older captures)
                    q.t = float(d["t"]) + q.t
                inner.append(q)
            dur = d.get("duration_ms")
            if dur is not None and not _num(dur):
                raise TraceError(f"{where}: duration_ms must be a number or null")
            items.append(("sub", (float(d["t"]), str(d["agent_id"]), dur, sorted(inner, key=lambda q: q.t))))
        else:
            raise TraceError(f"{where}: type must be 'n', 's' or 'subagent', got {kind!r}")
    return tid, bs, fixed, items


def _sub_end(t: float, dur: Any, inner: list[_Req]) -> float:
    if dur is not None:
        return t + max(0.0, float(dur) / 1000.0)
    return max((q.end for q in inner), default=t)


def trace_sessions(doc: Any, name: str, counts: dict[str, int]) -> tuple[int, list[Session]]:
    """One trace -> (block size, its sessions: the main agent first, then its children)."""
    tid, bs, fixed_tokens, items = parse_trace(doc, name)
    fixed = fixed_tokens // bs
    reqs = [it for k, it in items if k == "req"]
    if not reqs:
        counts["traces_without_requests"] += 1
        return bs, []
    main_model = reqs[0].model
    main: list[Request] = []
    main_raw: list[_Req] = []
    children: list[tuple[int, Session, float, float]] = []  # (parent turn, session, start t, end t)
    pending: list[int] = []  # children spawned since the last main turn: joined or not at the next one
    n_aux = n_sub = 0

    def settle(next_t: float | None) -> float:
        """Mark the children since the last main turn joined or background; the latest joined end."""
        latest = -math.inf
        for ci in pending:
            _, s, _, end = children[ci]
            s.joined = next_t is not None and next_t + 1e-6 >= end
            if s.joined:
                latest = max(latest, end)
            else:
                counts["background_children"] += 1
        pending.clear()
        return latest

    for k, it in items:
        if k == "req":
            r: _Req = it
            prev = main_raw[-1] if main_raw else None
            shares = prev is not None and bool(r.hash_ids) and r.hash_ids[:1] == prev.hash_ids[:1]
            aux = prev is not None and (r.model != main_model or not shares)
            if aux:
                assert prev is not None
                sid = f"{tid}::aux:{n_aux:03d}"
                n_aux += 1
                blocks = _blocks(tid, r, sid, bs)
                req = Request(0, blocks, r.n_in, r.n_out, max(0.0, r.t - prev.end))
                s = Session(sid, [req], 0.0, tid, len(main) - 1, "aux", None, min(fixed, len(blocks)))
                children.append((len(main) - 1, s, r.t, r.end))
                pending.append(len(children) - 1)
                counts["aux_requests"] += 1
                continue
            joined_end = settle(r.t)
            # benchcamp counts a turn's think time from the end of the previous turn and of the
            # children it joined (benchcamp.workload.model)
            think = 0.0 if prev is None else max(0.0, r.t - max(prev.end, joined_end))
            blocks = _blocks(tid, r, f"{tid}#{len(main)}", bs)
            main.append(Request(len(main), blocks, r.n_in, r.n_out, think))
            main_raw.append(r)
        else:
            t0, agent, dur, inner = it
            if not main_raw:
                counts["subagents_dropped_no_parent_turn"] += 1
                continue
            if not inner:
                counts["subagents_without_requests"] += 1
                continue
            prev = main_raw[-1]
            sid = f"{tid}::sa:{agent}"
            if any(c[1].id == sid for c in children):
                sid = f"{sid}:{n_sub:03d}"
            n_sub += 1
            srs: list[Request] = []
            for j, q in enumerate(inner):
                think = max(0.0, q.t - (prev.end if j == 0 else inner[j - 1].end))
                srs.append(Request(j, _blocks(tid, q, f"{sid}#{j}", bs), q.n_in, q.n_out, think))
            first = srs[0].blocks
            s = Session(sid, srs, 0.0, tid, len(main) - 1, "subagent", None, min(fixed, len(first)))
            children.append((len(main) - 1, s, t0, _sub_end(t0, dur, inner)))
            pending.append(len(children) - 1)
            counts["subagents"] += 1
            counts["subagent_requests"] += len(srs)
    settle(None)
    root = Session(tid, main, 0.0, None, None, "main", None, min(fixed, len(main[0].blocks)))
    counts["main_requests"] += len(main)
    return bs, [root] + [c[1] for c in children]


def _trace_files(p: Path) -> list[Path]:
    if p.is_dir():
        files = sorted(q for q in p.iterdir() if q.suffix == ".json" and q.is_file())
        if not files:
            raise TraceError(f"{p}: no *.json trace files in the folder")
        return files
    return [p]


def read_agentx(path: str | Path, name: str | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Workload:
    """A trace file (one trace object, or a JSON list of them) or a folder of trace files -> Workload."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace {p} not found")
    sessions: list[Session] = []
    counts: dict[str, int] = {
        k: 0
        for k in (
            "traces",
            "main_requests",
            "subagents",
            "subagent_requests",
            "aux_requests",
            "background_children",
            "subagents_dropped_no_parent_turn",
            "subagents_without_requests",
            "traces_without_requests",
        )
    }
    h = hashlib.sha256()
    block_size: int | None = None
    seen: set[str] = set()
    for f in _trace_files(p):
        raw = f.read_bytes()
        h.update(f.name.encode() + b"\x00" + raw)
        try:
            doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError as exc:
            raise TraceError(f"{f.name}: not UTF-8 text (byte {exc.start}); give AgentX trace JSON") from None
        except json.JSONDecodeError as exc:
            raise TraceError(f"{f.name}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except ValueError as exc:
            raise TraceError(f"{f.name}: {exc}") from None
        except RecursionError:
            raise TraceError(f"{f.name}: JSON nested too deeply") from None
        docs = doc if isinstance(doc, list) else [doc]
        for i, d in enumerate(docs):
            where = f.name if len(docs) == 1 else f"{f.name}[{i}]"
            bs, ss = trace_sessions(d, where, counts)
            if ss and ss[0].id in seen:
                raise TraceError(f"{where}: trace id {ss[0].id!r} appears twice; give each trace its own id")
            if block_size is not None and bs != block_size:
                raise TraceError(f"{where}: block_size {bs} differs from the other traces' {block_size}")
            block_size = bs
            counts["traces"] += 1
            if ss:
                seen.add(ss[0].id)
                sessions.extend(ss)
    if not sessions:
        raise TraceError(f"{p.name}: no requests (empty trace set)")
    meta = {"source": "agentx", "trace": p.name, "trace_sha256": h.hexdigest(), "agentx": counts}
    return Workload(name or p.stem, block_size or AGENTX_BLOCK_SIZE, vocab_size, sessions, meta)
