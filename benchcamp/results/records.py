"""Per-request records: the schema shared by the benchmark client and the
virtual-time simulator, and an incremental Parquet writer.

Records are the source of truth; every figure is recomputed from them. The
writer flushes a batch every ``flush_every`` records (and on close), so a
crash loses at most the last unflushed batch; ``read_records`` also reads the
part files of a writer that never closed, and ``recover`` merges the files a
killed run left in a point folder. Every file is written atomically.

Times are seconds on one monotonic clock, relative to the campaign point's
shared epoch (``t = 0`` at the start of the point, warm-up included).
"""

from __future__ import annotations

import datetime
import fcntl
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchcamp.errors import StoreError
from benchcamp.results.atomic import atomic_open, write_error

if TYPE_CHECKING:  # pandas costs seconds to import; each load generator worker imports this module
    import pandas as pd

SCHEMA = pa.schema(
    [
        ("point", pa.string()),  # sweep point label, e.g. "c32"
        ("session_id", pa.string()),
        ("turn", pa.int32()),
        ("parent", pa.string()),  # parent session id for subagents, else null
        ("worker", pa.int32()),  # client process index (0 in the simulator)
        ("scheduled_s", pa.float64()),  # when the workload says it should be sent
        ("sent_s", pa.float64()),  # when it was actually sent
        ("first_token_s", pa.float64()),  # first content chunk; NaN if none
        ("last_token_s", pa.float64()),  # last content chunk; NaN if none
        ("done_s", pa.float64()),  # response fully read (or failed)
        ("chunks", pa.int32()),  # content chunks received
        ("itl_s", pa.list_(pa.float64())),  # gaps between consecutive content chunks
        ("prompt_tokens", pa.int64()),  # from the server's usage; -1 if unknown
        ("cached_tokens", pa.int64()),  # usage.prompt_tokens_details.cached_tokens (0 if omitted)
        (
            "cpu_cached_tokens",
            pa.int64(),
        ),  # of those, from a CPU KV tier (benchcamp_cpu_cached_tokens); null if not reported
        ("completion_tokens", pa.int64()),  # from usage; -1 if unknown
        ("expected_prompt_tokens", pa.int64()),
        ("expected_output_tokens", pa.int64()),
        ("status", pa.int32()),  # HTTP status; 0 when no response (reset, timeout)
        ("error", pa.string()),  # null when ok
    ]
)
COLUMNS = SCHEMA.names


def empty_record(**kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "point": "",
        "session_id": "",
        "turn": 0,
        "parent": None,
        "worker": 0,
        "scheduled_s": math.nan,
        "sent_s": math.nan,
        "first_token_s": math.nan,
        "last_token_s": math.nan,
        "done_s": math.nan,
        "chunks": 0,
        "itl_s": [],
        "prompt_tokens": -1,
        "cached_tokens": 0,
        "cpu_cached_tokens": None,
        "completion_tokens": -1,
        "expected_prompt_tokens": 0,
        "expected_output_tokens": 0,
        "status": 0,
        "error": None,
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
    The writer holds an exclusive ``flock`` on that stream while it lives (the
    kernel drops it when the process dies, even by ``kill -9``): :func:`recover`
    leaves a locked stream alone. ``close`` reads the stream back through the
    handle it wrote with, never by path.
    """

    def __init__(self, path: str | Path, flush_every: int = 64):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial = partial_path(self.path)
        self.flush_every = flush_every
        self._buf: list[dict[str, Any]] = []
        self._sink = open(self.partial, "w+b")
        fcntl.flock(self._sink, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh per-run name: never contended
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
        self._writer = None
        self._sink.seek(0)
        table = _read_batches(self._sink)
        with atomic_open(self.path, "wb") as f:
            pq.write_table(table, f, compression="zstd")
        _unlink_if_same(self.partial, self._sink)
        self._sink.close()  # releases the lock only once the Parquet file is in place

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unlink_if_same(path: Path, handle: IO[bytes]) -> None:
    """Remove ``path`` only if it is still the file behind ``handle``."""
    try:
        if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            path.unlink()
    except FileNotFoundError:
        pass


def _read_batches(source: Any) -> pa.Table:
    """Every complete batch of a (possibly truncated) Arrow stream (a path or an open file)."""
    batches = []
    try:
        reader = pa.ipc.open_stream(source)
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
    except (pa.ArrowInvalid, OSError):
        pass  # a torn last batch, or nothing written yet: keep what was complete
    return pa.Table.from_batches(batches, schema=SCHEMA)


def _read_stream(path: Path) -> pa.Table:
    try:
        with pa.OSFile(str(path), "rb") as f:
            return _read_batches(f)
    except OSError:
        return SCHEMA.empty_table()


def write_records(records: Iterable[dict[str, Any]], path: str | Path) -> None:
    with RecordWriter(path) as w:
        for r in records:
            w.write(r)


def read_table(*paths: str | Path) -> pa.Table:
    """Concatenate record files as one Arrow table; a path whose writer never closed is
    recovered from its partial stream; a missing one contributes nothing."""
    tables = []
    for p in map(Path, paths):
        if p.exists():
            tables.append(pq.read_table(p))
        elif partial_path(p).exists():
            tables.append(_read_stream(partial_path(p)))
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables([_with_all_columns(t) for t in tables], promote_options="default")


def _with_all_columns(t: pa.Table) -> pa.Table:
    """A file written before a column existed gets it as nulls."""
    for f in SCHEMA:
        if f.name not in t.column_names:
            t = t.append_column(f, pa.nulls(len(t), f.type))
    return t


def read_records(*paths: str | Path) -> pd.DataFrame:
    """:func:`read_table` as a DataFrame."""
    return read_table(*paths).to_pandas()


def merge_records(parts: Iterable[str | Path], dest: str | Path) -> int:
    """Concatenate record files (closed or recovered from their partial streams) into
    ``dest`` by send time, atomically; only then remove the parts. Returns the row count."""
    paths = [Path(p) for p in parts]
    table = read_table(*paths)
    if table.num_rows:
        table = table.sort_by("sent_s")  # Arrow's sort is stable: ties keep worker order
    with atomic_open(dest, "wb") as f:
        pq.write_table(table, f, compression="zstd")
    for p in paths:
        if p != Path(dest):
            p.unlink(missing_ok=True)
        partial_path(p).unlink(missing_ok=True)
    return table.num_rows


# -- one point folder, several runs ----------------------------------------------------
# A run of a point (one ``run_point`` call) names its worker files with its own token,
# ``records.<token>.w<i>.parquet``, so it merges and removes only its own files. Files of
# a run that was killed (``kill -9``) stay until :func:`recover` merges them into
# ``records.<token>.parquet``: nothing is deleted before it was written elsewhere.

_WORKER_FILE = re.compile(r"^records\.(?P<token>[A-Za-z0-9_-]+)\.w(?P<index>\d+)\.parquet(?:\.partial\.arrows)?$")


def new_run_token() -> str:
    """A name for one run of a point: UTC time to the microsecond + randomness."""
    now = datetime.datetime.now(datetime.UTC)
    return f"{now:%Y%m%dT%H%M%S%f}-{os.urandom(3).hex()}"


def worker_records_path(point_dir: str | Path, token: str, index: int) -> Path:
    return Path(point_dir) / f"records.{token}.w{index}.parquet"


def recovered_records_path(point_dir: str | Path, token: str) -> Path:
    return Path(point_dir) / f"records.{token}.parquet"


def leftover_runs(point_dir: str | Path) -> dict[str, list[Path]]:
    """{token: its worker record paths} for every run whose worker files are in ``point_dir``."""
    runs: dict[str, set[Path]] = {}
    for f in Path(point_dir).glob("records.*.w*"):
        m = _WORKER_FILE.match(f.name)
        if m:
            runs.setdefault(m["token"], set()).add(worker_records_path(point_dir, m["token"], int(m["index"])))
    return {t: sorted(ps) for t, ps in sorted(runs.items())}


def _being_written(path: Path) -> bool:
    """A live writer (a worker still running, e.g. orphaned) holds the partial stream's lock."""
    try:
        with open(partial_path(path), "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except FileNotFoundError:
        pass
    return False


class PointBusy(StoreError):
    """Another process is measuring into the same point folder right now."""


@contextmanager
def point_lock(point_dir: str | Path) -> Iterator[None]:
    """Exclusive use of a point folder (an ``flock`` on the folder itself: released by
    the kernel when the holder dies, whatever kills it)."""
    point_dir = Path(point_dir)
    try:  # a read-only or full results folder: one line now, not a worker traceback later
        point_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=point_dir).close()
    except OSError as exc:
        raise write_error(point_dir / "records.parquet", exc) from None
    fd = os.open(point_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PointBusy(
                f"{point_dir}: another run is measuring into this folder now; give each execution "
                "its own results folder (a new execution id)"
            ) from None
        yield
    finally:
        os.close(fd)


def recover(point_dir: str | Path, locked: bool = False) -> list[Path]:
    """Merge the worker files of every dead run found in ``point_dir`` into
    ``records.<token>.parquet`` (one file per run, its records as they were flushed)
    and return those files. Runs still being written are left alone. ``locked``: the
    caller already holds :func:`point_lock` on the folder."""
    if not locked:
        with point_lock(point_dir):
            return recover(point_dir, locked=True)
    out = []
    for token, parts in leftover_runs(point_dir).items():
        if any(_being_written(p) for p in parts):
            continue
        dest = recovered_records_path(point_dir, token)
        merge_records(parts + ([dest] if dest.exists() else []), dest)
        out.append(dest)
    return out
