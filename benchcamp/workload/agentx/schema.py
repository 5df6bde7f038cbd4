"""The AgentX (Weka) trace schema exactly as SemiAnalysis' harness validates it.

agentx-harness 1.0.12 (``aiperf/dataset/loader/weka_trace_models.py``) reads each trace file with
``orjson.loads`` and validates it with pydantic models in lax mode; this module accepts and rejects
the same documents (the conformance tests check it against the harness itself) and says why in one
line naming the field. What lax mode means, field by field:

- an ``int`` field takes an int, a bool, a float with no fractional part or a string that parses as
  a whole number (``"4160"``, ``" 4_160 "``, ``"4160.0"``), within 64 bits (orjson reads a larger
  JSON integer as a float, which no int field takes); no bounds otherwise (``in: 0`` and ``out: -5``
  are valid: the loader sends ``max_tokens`` 1 for an ``out`` below 1); benchcamp's one bound of its own:
  ``in`` and ``out`` at most ``MAX_TOKENS`` (the harness would try to build such a prompt);
- a ``float`` field takes a number, a bool or a numeric string (``"1.5"``, ``"nan"``);
- a ``str`` field only a string; a list field only a list; ``totals`` an object or null;
- no unknown field anywhere (``extra="forbid"``), and a request's ``in``/``out`` may also be spelled
  ``input_length``/``output_length`` (``populate_by_name``);
- a request's ``type`` picks its model: ``"n"`` (no ``ttft``), ``"s"`` (optional ``ttft``);
  ``"subagent"`` only at the top level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from benchcamp.errors import TraceError

_I64_MIN, _U64_END = -(1 << 63), 1 << 64
MAX_TOKENS = 10_000_000  # a request's in/out: benchcamp's own bound, so a hostile trace cannot exhaust memory


@dataclass(slots=True)
class WekaRequest:
    """One ``n``/``s`` request (the names the harness's chain detection reads)."""

    t: float
    type: str
    model: str
    input_length: int
    output_length: int
    hash_ids: list[int]
    api_time: float | None
    think_time: float | None
    input_types: list[str] = field(default_factory=list)
    stop: str = ""


@dataclass(slots=True)
class WekaSubagent:
    t: float
    agent_id: str
    subagent_type: str
    status: str
    models: list[str]
    requests: list[WekaRequest]
    duration_ms: int | None
    tool_tokens: int
    system_tokens: int


@dataclass(slots=True)
class WekaTrace:
    id: str
    models: list[str]
    block_size: int
    tool_tokens: int
    system_tokens: int
    requests: list[WekaRequest | WekaSubagent]


def _as_int(v: Any, where: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        if not _I64_MIN <= v < _U64_END:
            raise TraceError(f"{where} must be a whole number within 64 bits, got {v}")
        return v
    if isinstance(v, float):
        if not math.isfinite(v) or not v.is_integer() or not _I64_MIN <= v < -_I64_MIN:
            raise TraceError(f"{where} must be a whole number, got {v!r}")
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
        try:
            f = float(v)
        except ValueError:
            raise TraceError(f"{where} must be a whole number, got {v!r}") from None
        return _as_int(f, where)
    raise TraceError(f"{where} must be a whole number, got {type(v).__name__}")


def _as_float(v: Any, where: str) -> float:
    if isinstance(v, (bool, int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise TraceError(f"{where} must be a number of seconds, got {v!r}")


def _as_str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise TraceError(f"{where} must be a string, got {type(v).__name__}")
    return v


def _as_list(v: Any, where: str) -> list:
    if not isinstance(v, list):
        raise TraceError(f"{where} must be a list, got {type(v).__name__}")
    return v


def _check_keys(d: dict, allowed: set[str], required: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise TraceError(f"{where}: unknown field(s) {', '.join(unknown)} (the AgentX trace format forbids extras)")
    for f in required:
        if f not in d:
            raise TraceError(f"{where}: missing field {f}")


_REQ_KEYS = {"t", "type", "model", "in", "out", "hash_ids", "input_types", "output_types", "stop", "api_time"}
_REQ_KEYS |= {"think_time", "input_length", "output_length"}
_SUB_KEYS = {"t", "type", "agent_id", "subagent_type", "duration_ms", "total_tokens", "tool_use_count", "status"}
_SUB_KEYS |= {"requests", "models", "tool_tokens", "system_tokens"}
_TRACE_KEYS = {"id", "models", "block_size", "hash_id_scope", "tool_tokens", "system_tokens", "requests", "totals"}


def parse_request(d: Any, where: str) -> WekaRequest:
    if not isinstance(d, dict):
        raise TraceError(f"{where}: a request must be a JSON object")
    kind = d.get("type")
    if kind not in ("n", "s"):
        raise TraceError(f"{where}: type must be 'n' or 's', got {kind!r}")
    allowed = _REQ_KEYS | ({"ttft"} if kind == "s" else set())
    if kind == "n" and "ttft" in d:
        raise TraceError(f"{where}: ttft is only for streaming requests (type 's'), not type 'n'")
    # populate_by_name: the alias (in/out) or the field name (input_length/output_length)
    for alias, name in (("in", "input_length"), ("out", "output_length")):
        if alias not in d and name not in d:
            raise TraceError(f"{where}: missing field {alias}")
    # with the alias given, the field name is an extra field (pydantic validates by the alias first)
    allowed -= {name for alias, name in (("in", "input_length"), ("out", "output_length")) if alias in d}
    _check_keys(d, allowed, ("t", "model"), where)
    n_in = _as_int(d["in"] if "in" in d else d["input_length"], f"{where}: in")
    n_out = _as_int(d["out"] if "out" in d else d["output_length"], f"{where}: out")
    for f, n in (("in", n_in), ("out", n_out)):  # benchcamp's own bound (the harness has none): what it can hold
        if n > MAX_TOKENS:
            raise TraceError(f"{where}: {f} must be at most {MAX_TOKENS:,} tokens, got {n:,}")
    ids = [
        _as_int(x, f"{where}: hash_ids[{k}]")
        for k, x in enumerate(_as_list(d.get("hash_ids", []), f"{where}: hash_ids"))
    ]
    if any(x >= 1 << 63 for x in ids):  # the harness's chain detection holds ids as int64
        raise TraceError(f"{where}: hash_ids must be 64-bit signed integers (below 2**63)")
    types = [_as_str(x, f"{where}: input_types[]") for x in _as_list(d.get("input_types", []), f"{where}: input_types")]
    for x in _as_list(d.get("output_types", []), f"{where}: output_types"):
        _as_str(x, f"{where}: output_types[]")
    stop = _as_str(d.get("stop", ""), f"{where}: stop")
    api = None if d.get("api_time") is None else _as_float(d["api_time"], f"{where}: api_time")
    think = None if d.get("think_time") is None else _as_float(d["think_time"], f"{where}: think_time")
    if d.get("ttft") is not None:
        _as_float(d["ttft"], f"{where}: ttft")
    t = _as_float(d["t"], f"{where}: t")
    model = _as_str(d["model"], f"{where}: model")
    return WekaRequest(t, kind, model, n_in, n_out, ids, api, think, types, stop)


def parse_subagent(d: dict, where: str) -> WekaSubagent:
    _check_keys(d, _SUB_KEYS, ("t", "agent_id", "subagent_type", "status", "requests", "models"), where)
    t = _as_float(d["t"], f"{where}: t")
    agent = _as_str(d["agent_id"], f"{where}: agent_id")
    sub_type = _as_str(d["subagent_type"], f"{where}: subagent_type")
    status = _as_str(d["status"], f"{where}: status")
    models = [_as_str(m, f"{where}: models[]") for m in _as_list(d["models"], f"{where}: models")]
    for k in ("duration_ms", "total_tokens", "tool_use_count"):
        if d.get(k) is not None:
            _as_int(d[k], f"{where}: {k}")
    dur = None if d.get("duration_ms") is None else _as_int(d["duration_ms"], f"{where}: duration_ms")
    tool = _as_int(d.get("tool_tokens", 0), f"{where}: tool_tokens")
    system = _as_int(d.get("system_tokens", 0), f"{where}: system_tokens")
    inner = [
        parse_request(r, f"{where}.requests[{j}]") for j, r in enumerate(_as_list(d["requests"], f"{where}: requests"))
    ]
    return WekaSubagent(t, agent, sub_type, status, models, inner, dur, tool, system)


def parse_trace(doc: Any, name: str) -> WekaTrace:
    """One trace object -> WekaTrace, or TraceError naming the field (as the harness's WekaTrace model)."""
    if not isinstance(doc, dict):
        raise TraceError(f"{name}: expected a JSON object (one AgentX/Weka trace)")
    _check_keys(doc, _TRACE_KEYS, ("id", "models", "block_size", "hash_id_scope", "requests"), name)
    tid = _as_str(doc["id"], f"{name}: id")
    models = [_as_str(m, f"{name}: models[]") for m in _as_list(doc["models"], f"{name}: models")]
    bs = _as_int(doc["block_size"], f"{name}: block_size")
    if bs <= 0:
        raise TraceError(f"{name}: block_size must be a positive number of tokens, got {bs}")
    if doc["hash_id_scope"] != "local":
        raise TraceError(f"{name}: hash_id_scope must be 'local' (the only scope the harness replays)")
    tool = _as_int(doc.get("tool_tokens", 0), f"{name}: tool_tokens")
    system = _as_int(doc.get("system_tokens", 0), f"{name}: system_tokens")
    totals = doc.get("totals")
    if totals is not None and not isinstance(totals, dict):
        raise TraceError(f"{name}: totals must be a JSON object or null, got {type(totals).__name__}")
    items: list[WekaRequest | WekaSubagent] = []
    for i, d in enumerate(_as_list(doc["requests"], f"{name}: requests")):
        where = f"{name} requests[{i}]"
        if isinstance(d, dict) and d.get("type") == "subagent":
            items.append(parse_subagent(d, where))
        elif isinstance(d, dict) and d.get("type") in ("n", "s"):
            items.append(parse_request(d, where))
        else:
            kind = d.get("type") if isinstance(d, dict) else None
            raise TraceError(f"{where}: type must be 'n', 's' or 'subagent', got {kind!r}")
    return WekaTrace(tid, models, bs, tool, system, items)
