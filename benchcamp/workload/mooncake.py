"""Mooncake trace import (kvcache-ai/Mooncake FAST'25 traces).

Each JSONL line is one request: ``timestamp`` (ms from the first request),
``input_length``, ``output_length`` and ``hash_ids`` (one id per 512-token
prompt block, the last one possibly partial; equal ids at equal positions are a
shared prefix). The conversation, tool-and-agent and synthetic traces share
this format.

Each line becomes a one-request session released at ``timestamp / 1000`` s,
with ``blocks = hash_ids``: token synthesis then turns equal ids into equal
token prefixes, so the trace's prefix sharing is replayed exactly.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from benchcamp.errors import TraceError  # noqa: F401  (re-exported)
from benchcamp.workload.model import Request, Session, Workload

MOONCAKE_BLOCK_SIZE = 512
# Token ids stay below 32000 so every common tokenizer (Llama 2/3, Mistral,
# Qwen, DeepSeek) accepts them.
DEFAULT_VOCAB_SIZE = 32000
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# Bounds: a trace spans hours, and no model takes 10M tokens of prompt or output; past
# them the values are corrupt (and would overflow the workload's int32 columns).
MAX_TIMESTAMP_MS = 7 * 24 * 3600 * 1000
MAX_TOKENS = 10_000_000


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_line(text: str, where: str) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        d = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # NaN / Infinity
        raise TraceError(f"{where}: {exc}; fix or drop the line") from None
    except RecursionError:
        raise TraceError(f"{where}: JSON nested too deeply; fix or drop the line") from None
    if not isinstance(d, dict):
        raise TraceError(f"{where}: expected a JSON object with {', '.join(_FIELDS)}")
    missing = [f for f in _FIELDS if f not in d]
    if missing:
        raise TraceError(f"{where}: missing field(s) {', '.join(missing)}")
    ts, n_in, n_out, ids = (d[f] for f in _FIELDS)
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not 0 <= ts <= MAX_TIMESTAMP_MS:
        raise TraceError(f"{where}: timestamp must be milliseconds from 0 to {MAX_TIMESTAMP_MS} (7 days), got {ts!r}")
    if not _int(n_in) or not 1 <= n_in <= MAX_TOKENS:
        raise TraceError(f"{where}: input_length must be an integer from 1 to {MAX_TOKENS:,}, got {n_in!r}")
    if not _int(n_out) or not 1 <= n_out <= MAX_TOKENS:
        raise TraceError(f"{where}: output_length must be an integer from 1 to {MAX_TOKENS:,}, got {n_out!r}")
    if not isinstance(ids, list) or not all(_int(x) and 0 <= x < 1 << 63 for x in ids):
        raise TraceError(f"{where}: hash_ids must be a list of non-negative 64-bit integers")
    need = -(-n_in // MOONCAKE_BLOCK_SIZE)
    if len(ids) != need:
        raise TraceError(
            f"{where}: input_length={n_in} needs {need} hash_ids of {MOONCAKE_BLOCK_SIZE} tokens, got {len(ids)}"
        )
    return float(ts) / 1000.0, n_in, n_out, tuple(ids)


def read_mooncake(path: str | Path, name: str | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Workload:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace {p} not found")
    raw = p.read_bytes()
    sessions: list[Session] = []
    try:
        lines = raw.decode("utf-8", errors="strict").splitlines()
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p.name}: not UTF-8 text (byte {exc.start}); give a Mooncake JSONL trace") from None
    width = len(str(len(lines)))
    for no, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        arrival, n_in, n_out, ids = parse_line(text, f"{p.name} line {no}")
        sessions.append(Session(f"l{no:0{width}d}", [Request(0, ids, n_in, n_out, 0.0)], arrival))
    if not sessions:
        raise TraceError(f"{p.name}: no requests (empty trace)")
    meta = {"source": "mooncake", "trace": p.name, "trace_sha256": hashlib.sha256(raw).hexdigest()}
    return Workload(name or p.stem, MOONCAKE_BLOCK_SIZE, vocab_size, sessions, meta)
