"""Per-request records: the schema shared by the benchmark client and the
virtual-time simulator, and an incremental Parquet writer.

Records are the source of truth; every figure is recomputed from them. The
writer flushes a row group every ``flush_every`` records (and on close), so a
crash loses at most the last unflushed batch; ``read_records`` also reads the
part files of a writer that never closed.

Times are seconds on one monotonic clock, relative to the campaign point's
shared epoch (``t = 0`` at the start of the point, warm-up included).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:  # pandas costs seconds to import; each load generator worker imports this module
    import pandas as pd

SCHEMA = pa.schema([
    ("point", pa.string()),            # sweep point label, e.g. "c32"
    ("session_id", pa.string()),
    ("turn", pa.int32()),
    ("parent", pa.string()),           # parent session id for subagents, else null
    ("worker", pa.int32()),            # client process index (0 in the simulator)
    ("scheduled_s", pa.float64()),     # when the workload says it should be sent
    ("sent_s", pa.float64()),          # when it was actually sent
    ("first_token_s", pa.float64()),   # first content chunk; NaN if none
    ("last_token_s", pa.float64()),    # last content chunk; NaN if none
    ("done_s", pa.float64()),          # response fully read (or failed)
    ("chunks", pa.int32()),            # content chunks received
    ("itl_s", pa.list_(pa.float64())),  # gaps between consecutive content chunks
    ("prompt_tokens", pa.int64()),     # from the server's usage; -1 if unknown
    ("cached_tokens", pa.int64()),     # usage.prompt_tokens_details.cached_tokens (0 if omitted)
    ("cpu_cached_tokens", pa.int64()),  # of those, from a CPU KV tier (benchcamp_cpu_cached_tokens); null if not reported
    ("completion_tokens", pa.int64()),  # from usage; -1 if unknown
    ("expected_prompt_tokens", pa.int64()),
    ("expected_output_tokens", pa.int64()),
    ("status", pa.int32()),            # HTTP status; 0 when no response (reset, timeout)
    ("error", pa.string()),            # null when ok
])
COLUMNS = SCHEMA.names


def empty_record(**kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "point": "", "session_id": "", "turn": 0, "parent": None, "worker": 0,
        "scheduled_s": math.nan, "sent_s": math.nan, "first_token_s": math.nan,
        "last_token_s": math.nan, "done_s": math.nan, "chunks": 0, "itl_s": [],
        "prompt_tokens": -1, "cached_tokens": 0, "cpu_cached_tokens": None, "completion_tokens": -1,
        "expected_prompt_tokens": 0, "expected_output_tokens": 0, "status": 0, "error": None,
    }
    unknown = set(kw) - set(rec)
    if unknown:
        raise KeyError(f"unknown record fields: {sorted(unknown)}")
    rec.update(kw)
    return rec


def to_table(records: Iterable[dict[str, Any]]) -> pa.Table:
    rows = list(records)
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def partial_path(path: str | Path) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".partial.arrows")


class RecordWriter:
    """Append records to an Arrow IPC stream; ``close`` turns it into Parquet.

    Each flush writes one record batch and flushes it to the OS, so a process
    that dies keeps every flushed batch in ``<path>.partial.arrows``, which
    :func:`read_records` recovers (a stream needs no footer, unlike Parquet).
    """

    def __init__(self, path: str | Path, flush_every: int = 64):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial = partial_path(self.path)
        self.flush_every = flush_every
        self._buf: list[dict[str, Any]] = []
        self._sink = open(self.partial, "wb")
        self._writer: pa.ipc.RecordBatchStreamWriter | None = pa.ipc.new_stream(self._sink, SCHEMA)
        self.count = 0

    def write(self, rec: dict[str, Any]) -> None:
        self._buf.append(rec)
        self.count += 1
        if len(self._buf) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if self._buf and self._writer is not None:
            self._writer.write_table(to_table(self._buf))
            self._buf.clear()
            self._sink.flush()

    def close(self) -> None:
        if self._writer is None:
            return
        self.flush()
        self._writer.close()
        self._sink.close()
        self._writer = None
        table = _read_stream(self.partial)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(self.path)
        self.partial.unlink(missing_ok=True)

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_stream(path: Path) -> pa.Table:
    """Every complete batch of a (possibly truncated) Arrow stream."""
    batches = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError):
        pass  # a torn last batch, or nothing written yet: keep what was complete
    return pa.Table.from_batches(batches, schema=SCHEMA)


def write_records(records: Iterable[dict[str, Any]], path: str | Path) -> None:
    with RecordWriter(path) as w:
        for r in records:
            w.write(r)


def read_records(*paths: str | Path) -> pd.DataFrame:
    """Read and concatenate record files; a path whose writer never closed is
    recovered from its partial stream; a missing one contributes nothing."""
    tables = []
    for p in map(Path, paths):
        if p.exists():
            tables.append(pq.read_table(p))
        elif partial_path(p).exists():
            tables.append(_read_stream(partial_path(p)))
    if not tables:
        return SCHEMA.empty_table().to_pandas()
    return pa.concat_tables([_with_all_columns(t) for t in tables], promote_options="default").to_pandas()


def _with_all_columns(t: pa.Table) -> pa.Table:
    """A file written before a column existed gets it as nulls."""
    for f in SCHEMA:
        if f.name not in t.column_names:
            t = t.append_column(f, pa.nulls(len(t), f.type))
    return t
