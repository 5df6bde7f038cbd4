"""The workload model and its Parquet form.

A workload is a set of sessions. A session is an ordered list of requests; each
request's prompt is a list of block ids (``block_size`` tokens per block, the
last block possibly partial), its output length, and the think time before it
(tool latency, counted from the end of the previous turn and of the subagents
that joined it).

Subagents are sessions of their own with ``parent`` = the parent's session id
and ``parent_turn`` = the parent turn after whose completion they start. They
run concurrently and the parent's next turn waits for all of them (join).
Their prompts start with the parent's context blocks, so they share its prefix.

Sessions with ``arrival_s`` > 0 are released at that offset (trace replay,
open loop); closed-loop replay ignores arrival times.

Optional session fields (imported traces; absent from the file and the digest
of a workload that sets none of them, so older workloads keep their bytes):
``kind`` (``main`` | ``subagent`` | ``aux``: what the trace says the session
is), ``joined`` (False: a background subagent the parent does not wait for; it
still belongs to the parent's session tree) and ``fixed_blocks`` (how many
leading blocks a per-play cache-bust marker leaves shared: the tool and system
prefix, AgentX's ``first_turn_prefix``). ``join_turn`` (its own column, written only when a
session sets it): the parent turn that waits for a joined subagent when that is a later one than
``parent_turn + 1`` (AgentX's tiered join: the parent goes on meanwhile).

On disk (Parquet) a workload is one row per request, in session order, with the
workload's metadata (name, block_size, vocab_size, spec, seed) as JSON in the
schema metadata key ``benchcamp``. The content digest is the sha256 of the
canonical row data and the metadata, independent of Parquet encoding details.

Optional columns come after the schema's and are written only when a workload uses
them, so the bytes and digest of a workload without them never change:
``chat`` (text replay, ``import-agentperf``): the request's recorded chat body,
canonical JSON ``{"messages": [...], "tools": [...]}``, which a text client sends to
``/v1/chat/completions`` as is (the server tokenizes it); ``prompt_len`` and
``blocks`` still give its token count and prefix structure for token-id replay;
``after`` (AgentX imports): the request's cross-stream predecessors in its session tree, a list of
``{session, turn}`` (the harness's ``replay_predecessors``): the replay sends it only once each of them has
ended (``benchcamp.loadgen.dependencies``); ``model``: the model the trace recorded for it (the harness maps a
trace's models onto the served ones: ``benchcamp.workload.agentx.plan.model_map``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("parent", pa.string()),
        ("parent_turn", pa.int32()),
        ("arrival_s", pa.float64()),
        ("turn", pa.int32()),
        ("blocks", pa.list_(pa.int64())),
        ("prompt_len", pa.int32()),
        ("output_len", pa.int32()),
        ("think_s", pa.float64()),
    ]
)
# Optional columns, appended only when a workload uses them (see the module docstring):
# per-session fields of imported traces, and the per-request recorded chat body.
OPTIONAL_FIELDS = (
    pa.field("kind", pa.string()),
    pa.field("joined", pa.bool_()),
    pa.field("fixed_blocks", pa.int32()),
)
_OPTIONAL = tuple(f.name for f in OPTIONAL_FIELDS)
CHAT_COLUMN = pa.field("chat", pa.string())
JOIN_COLUMN = pa.field("join_turn", pa.int32())
AFTER_COLUMN = pa.field("after", pa.list_(pa.struct([("session", pa.string()), ("turn", pa.int32())])))
MODEL_COLUMN = pa.field("model", pa.string())

Key = tuple[str, int]  # (session id, turn): one request of a workload


@dataclass(frozen=True)
class Request:
    turn: int
    blocks: tuple[int, ...]
    prompt_len: int
    output_len: int
    think_s: float = 0.0
    chat: str | None = None  # optional column ``chat``: the recorded chat body (canonical JSON)
    after: tuple[Key, ...] = ()  # optional column ``after``: requests of its tree that must have ended first
    model: str | None = None  # optional column ``model``: the model its trace recorded


@dataclass
class Session:
    id: str
    requests: list[Request]
    arrival_s: float = 0.0
    parent: str | None = None
    parent_turn: int | None = None
    kind: str | None = None
    joined: bool | None = None  # None and True: the parent's next turn waits for it
    fixed_blocks: int | None = None
    join_turn: int | None = None  # joined at this parent turn (None: parent_turn + 1)

    def joins_at(self) -> int:
        """The parent turn that waits for this (joined) session."""
        return self.join_turn if self.join_turn is not None else int(self.parent_turn or 0) + 1


@dataclass
class Workload:
    name: str
    block_size: int
    vocab_size: int
    sessions: list[Session]
    meta: dict[str, Any] = field(default_factory=dict)

    def top_level(self) -> list[Session]:
        return [s for s in self.sessions if s.parent is None]

    def uses_optional(self) -> bool:
        return any(getattr(s, f) is not None for s in self.sessions for f in _OPTIONAL)

    def children(self) -> dict[tuple[str, int], list[Session]]:
        """(parent session id, parent turn) -> subagent sessions spawned after that turn."""
        out: dict[tuple[str, int], list[Session]] = {}
        for s in self.sessions:
            if s.parent is not None:
                out.setdefault((s.parent, int(s.parent_turn or 0)), []).append(s)
        return out

    def requests(self) -> Iterator[tuple[Session, Request]]:
        for s in self.sessions:
            for r in s.requests:
                yield s, r

    @property
    def digest(self) -> str:
        return workload_digest(self)


def _meta(w: Workload) -> dict[str, Any]:
    return {"name": w.name, "block_size": w.block_size, "vocab_size": w.vocab_size, **w.meta}


def workload_digest(w: Workload) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(_meta(w), sort_keys=True, separators=(",", ":")).encode())
    optional = w.uses_optional()
    for s in w.sessions:
        extra = f"|{s.kind}|{s.joined}|{s.fixed_blocks}" if optional else ""
        extra += f"|J{s.join_turn}" if s.join_turn is not None else ""  # absent unless set: older digests stay
        h.update(f"S|{s.id}|{s.parent}|{s.parent_turn}|{s.arrival_s!r}{extra}\n".encode())
        for r in s.requests:
            h.update(f"R|{r.turn}|{r.prompt_len}|{r.output_len}|{r.think_s!r}|".encode())
            h.update(",".join(map(str, r.blocks)).encode())
            if r.chat is not None:  # optional column: absent from the digest of workloads without it
                h.update(b"|C|" + hashlib.sha256(r.chat.encode()).hexdigest().encode())
            if r.after:  # (likewise)
                h.update(b"|A|" + ",".join(f"{a}#{t}" for a, t in r.after).encode())
            if r.model is not None:
                h.update(b"|M|" + r.model.encode())
            h.update(b"\n")
    return h.hexdigest()


def _schema(w: Workload) -> pa.Schema:
    fields = list(SCHEMA)
    if w.uses_optional():
        fields += OPTIONAL_FIELDS
    if any(s.join_turn is not None for s in w.sessions):
        fields.append(JOIN_COLUMN)
    if any(r.chat is not None for _, r in w.requests()):
        fields.append(CHAT_COLUMN)
    if any(r.after for _, r in w.requests()):
        fields.append(AFTER_COLUMN)
    if any(r.model is not None for _, r in w.requests()):
        fields.append(MODEL_COLUMN)
    return pa.schema(fields)


def to_table(w: Workload) -> pa.Table:
    schema = _schema(w)
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    optional = _OPTIONAL[0] in cols
    chat = CHAT_COLUMN.name in cols
    join = JOIN_COLUMN.name in cols
    after = AFTER_COLUMN.name in cols
    model = MODEL_COLUMN.name in cols
    for s in w.sessions:
        for r in s.requests:
            cols["session_id"].append(s.id)
            cols["parent"].append(s.parent)
            cols["parent_turn"].append(s.parent_turn)
            cols["arrival_s"].append(float(s.arrival_s))
            cols["turn"].append(r.turn)
            cols["blocks"].append(list(r.blocks))
            cols["prompt_len"].append(r.prompt_len)
            cols["output_len"].append(r.output_len)
            cols["think_s"].append(float(r.think_s))
            if optional:
                for f in _OPTIONAL:
                    cols[f].append(getattr(s, f))
            if join:
                cols[JOIN_COLUMN.name].append(s.join_turn)
            if chat:
                cols[CHAT_COLUMN.name].append(r.chat)
            if after:
                cols[AFTER_COLUMN.name].append([{"session": a, "turn": t} for a, t in r.after])
            if model:
                cols[MODEL_COLUMN.name].append(r.model)
    meta = dict(_meta(w), digest=workload_digest(w))
    schema = schema.with_metadata({"benchcamp": json.dumps(meta, sort_keys=True)})
    return pa.Table.from_pydict(cols, schema=schema)


def read_meta(path: str | Path) -> dict[str, Any] | None:
    """A workload file's ``benchcamp`` metadata (name, digest, ``trace_sha256``, the AgentX counts) from its
    Parquet footer alone, no rows read; None when the file is missing or is not a benchcamp workload."""
    try:
        raw = (pq.read_schema(path).metadata or {}).get(b"benchcamp")
        meta = json.loads(raw) if raw else None
    except (OSError, ValueError, pa.ArrowException):
        return None
    return meta if isinstance(meta, dict) else None


def from_table(table: pa.Table) -> Workload:
    raw = (table.schema.metadata or {}).get(b"benchcamp")
    if raw is None:
        raise ValueError(
            "not a benchcamp workload: the Parquet file has no 'benchcamp' metadata; "
            "build it with `benchcamp workload build` or `import-mooncake`"
        )
    meta = json.loads(raw)
    meta.pop("digest", None)
    name, block_size, vocab = meta.pop("name"), meta.pop("block_size"), meta.pop("vocab_size")
    missing = [c for c in SCHEMA.names if c not in table.column_names]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    d = table.to_pydict()
    none = [None] * table.num_rows
    opt = {f: d.get(f, none) for f in _OPTIONAL}
    chats = d.get(CHAT_COLUMN.name) or none
    joins = d.get(JOIN_COLUMN.name) or none
    afters = d.get(AFTER_COLUMN.name) or none
    models = d.get(MODEL_COLUMN.name) or none
    sessions: list[Session] = []
    by_id: dict[str, Session] = {}
    for i in range(table.num_rows):
        sid = d["session_id"][i]
        s = by_id.get(sid)
        if s is None:
            s = Session(
                sid,
                [],
                d["arrival_s"][i],
                d["parent"][i],
                d["parent_turn"][i],
                opt["kind"][i],
                opt["joined"][i],
                opt["fixed_blocks"][i],
                joins[i],
            )
            by_id[sid] = s
            sessions.append(s)
        s.requests.append(
            Request(
                d["turn"][i],
                tuple(d["blocks"][i]),
                d["prompt_len"][i],
                d["output_len"][i],
                d["think_s"][i],
                chats[i],
                tuple((a["session"], a["turn"]) for a in afters[i] or ()),
                models[i],
            )
        )
    return Workload(name, block_size, vocab, sessions, meta)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` then rename: never a half-written file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)


def write_workload(w: Workload, path: str | Path) -> str:
    """Write atomically; returns the content digest."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        # Fixed writer options so the same workload gives the same bytes.
        pq.write_table(
            to_table(w),
            tmp,
            compression="zstd",
            write_statistics=False,
            use_dictionary=_dictionary_columns(w),
            store_schema=True,
        )
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return workload_digest(w)


def _dictionary_columns(w: Workload) -> list[str]:
    out = ["session_id", "parent", "kind"] if w.uses_optional() else ["session_id", "parent"]
    return out + ["model"] if any(r.model is not None for _, r in w.requests()) else out


REBUILD_HINT = "rebuild it with `benchcamp workload build` or `dvc repro workload`"


def read_workload(path: str | Path) -> Workload:
    """Raises FileNotFoundError when absent, TraceError when unreadable (both name the file and the fix)."""
    from benchcamp.errors import TraceError

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"workload file {p} not found; build it with `benchcamp workload build` or `dvc repro workload`"
        )
    try:
        table = pq.read_table(p)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(
            f"workload file {p} is not a readable Parquet file ({_first_line(exc)}); {REBUILD_HINT}"
        ) from None
    try:
        return from_table(table)
    except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise TraceError(
            f"workload file {p} is not a benchcamp workload ({_first_line(exc)}); {REBUILD_HINT}"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
