"""One sweep point from several client hosts: its shards, their barrier, their clocks, their merge.

A point of ``load.shards`` = S shards with ``load.workers`` = W processes each is the point of S x W
client processes that one host would run, cut in S contiguous slices of worker indices
(:func:`shard_workers`): every shard builds the same global plan (closed-loop slots, open-loop
arrivals, trace starts) and runs its slice, so the union of the shards' records is the one-host
point's. Each shard runs its slice with :func:`benchcamp.loadgen.run_point` into a folder of its own.

The barrier (:func:`rendezvous`): once its workers are ready, each shard publishes when it was ready
(its wall clock) and waits until every shard has; all then start at the same agreed wall time, the
latest ready time plus a margin, computed by each from the same files, so no shard leads. Each shard
also records its host's clock offset against the engine's HTTP ``Date`` (:func:`clock_offset`),
stated in the point's meta; the hosts are expected to keep NTP time, the offset says how well they do.

The merge (:func:`merge_shard_points`) concatenates the shards' records into the point's
``records.parquet`` and writes its ``point.json``, so the summary is computed from the merged records by
the one path every point takes. A shard that wrote no ``point.json`` (its host or worker died) makes
the point incomplete, never silently short, and the records it had flushed are merged all the same.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchcamp.loadgen import health as health_mod
from benchcamp.loadgen.outcome import AbortKind, incomplete
from benchcamp.results import atomic
from benchcamp.results.records import leftover_runs, read_records, read_table

# Between the last shard's ready time and the start: long enough for every shard to see the last
# ready file (a poll of the store) and sleep until it.
BARRIER_MARGIN_S = 2.0
BARRIER_POLL_S = 0.2
# A shard that sees the agreed start this late did not start with the others: it fails (the point is incomplete).
MAX_LATE_S = 0.5


@dataclass
class Shard:
    """This process's part of a point: shard ``index`` of ``count``; ``barrier(meta, tick)`` publishes this
    shard's meta, waits for every shard's and returns the agreed start (wall clock, seconds since the epoch)."""

    index: int
    count: int
    barrier: Callable[[dict[str, Any], Callable[[], None]], float]
    host: str = ""  # how the executor names this host (an Airflow worker's hostname); "" = the machine's name


class BarrierTimeout(RuntimeError):
    """Not every shard reached the point's barrier in time."""


def shard_workers(total: int, shards: int, index: int) -> range:
    """The global worker indices of shard ``index``: ``total`` cut in ``shards`` contiguous, even slices."""
    if not 0 <= index < shards:
        raise ValueError(f"shard {index} of {shards}: the index must be in [0, {shards})")
    if total < shards:
        raise ValueError(
            f"load.shards={shards} exceeds the point's {total} client processes (its level or sessions): "
            f"use at most {total} shards"
        )
    base, extra = divmod(total, shards)
    start = index * base + min(index, extra)
    return range(start, start + base + (1 if index < extra else 0))


def agreed_start(ready_walls: list[float], margin_s: float = BARRIER_MARGIN_S) -> float:
    """The wall time every shard starts at: the last one ready plus the margin (the same on every shard)."""
    return max(ready_walls) + margin_s


def rendezvous(
    index: int,
    count: int,
    meta: dict[str, Any],
    publish: Callable[[int, str], None],
    peek: Callable[[int], str | None],
    timeout_s: float,
    tick: Callable[[], None] = lambda: None,
    quit_reason: Callable[[], str | None] = lambda: None,
    margin_s: float = BARRIER_MARGIN_S,
    poll_s: float = BARRIER_POLL_S,
) -> tuple[float, list[dict[str, Any]]]:
    """Publish this shard's ``meta`` (with its ready time), wait for all ``count`` shards' and return
    (agreed start, every shard's meta). Entries older than ``timeout_s`` are an earlier attempt's, not this
    one's. ``tick``: called every poll (raises to stop, e.g. on Ctrl-C); ``quit_reason``: a shard that gave
    up on the sweep says why (the wait ends at once, instead of at the timeout)."""
    ready = time.time()
    publish(index, json.dumps(dict(meta, shard=index, ready_wall=ready)))
    deadline = time.monotonic() + timeout_s
    while True:
        docs = [peek(k) for k in range(count)]
        seen = [json.loads(d) for d in docs if d]
        fresh = [d for d in seen if d["ready_wall"] >= ready - timeout_s]
        if len(fresh) == count:
            return agreed_start([d["ready_wall"] for d in fresh], margin_s), sorted(fresh, key=lambda d: d["shard"])
        why = quit_reason()
        if why:
            raise BarrierTimeout(f"shard {index} of {count}: another shard gave up on the sweep ({why})")
        if time.monotonic() > deadline:
            missing = sorted(set(range(count)) - {d["shard"] for d in fresh})
            raise BarrierTimeout(
                f"shard {index} of {count}: shard(s) {missing} did not reach the point's barrier in {timeout_s:g} s "
                "(load.shard_barrier_timeout_s); are there load.shards load-generator hosts (pool loadgen_hosts)?"
            )
        tick()
        time.sleep(poll_s)


def clock_offset(endpoint: str, timeout_s: float = 5.0, samples: int = 40) -> dict[str, Any]:
    """This host's wall clock minus the engine's, from its HTTP ``Date`` (whole seconds): the request whose
    answer first shows a new second dates that tick; offset = local mid-request time - tick, good to half
    its round trip plus the sampling gap. ``offset_s`` None when the engine sends no Date."""
    url = endpoint.rstrip("/") + "/health"
    last: float | None = None
    best: dict[str, Any] = {"reference": url, "offset_s": None, "uncertainty_s": None}
    for _ in range(samples):
        t0 = time.time()
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as r:
                date = r.headers.get("Date")
        except OSError:
            date = None
        t1 = time.time()
        if not date:
            return best
        second = email.utils.parsedate_to_datetime(date).timestamp()
        if last is not None and second > last:
            return dict(best, offset_s=round((t0 + t1) / 2 - second, 4), uncertainty_s=round((t1 - t0) / 2 + 0.03, 4))
        last = second
        time.sleep(0.03)
    return best


_RECOVERED = re.compile(
    r"^records\.[A-Za-z0-9_-]+\.parquet$"
)  # records.<token>.parquet (benchcamp.results.records.recover)


def _shard_records(folder: Path, complete: bool) -> list[Path]:
    """A finished shard's records file; a dead one's flushed worker files (and what a recovery made of them)."""
    if complete:
        return [folder / "records.parquet"]
    parts = [p for paths in leftover_runs(folder).values() for p in paths]
    recovered = sorted(p for p in folder.glob("records.*.parquet") if _RECOVERED.match(p.name))
    return parts + recovered


def merge_shard_points(
    shard_dirs: list[Path], out_dir: Path, label: str, level: float, window: tuple[float, float]
) -> dict[str, Any]:
    """The point's ``records.parquet`` (every shard's records, by send time) and ``point.json`` from its
    shards' folders, atomically; the shards' files are kept. ``window``: the spec's, for a point whose every
    shard died. Returns the point.json document."""
    docs: list[dict[str, Any] | None] = []
    for folder in shard_dirs:
        path = folder / "point.json"
        docs.append(json.loads(path.read_text()) if path.exists() else None)
    parts = [p for folder, doc in zip(shard_dirs, docs) for p in _shard_records(folder, doc is not None)]
    kept = {
        i: read_table(*_shard_records(f, False)).num_rows for i, (f, d) in enumerate(zip(shard_dirs, docs)) if d is None
    }
    tmp = out_dir / "records.merging.parquet"
    out_dir.mkdir(parents=True, exist_ok=True)
    count = _concat(parts, tmp)
    tmp.replace(out_dir / "records.parquet")
    done = [d for d in docs if d is not None]
    first = done[0] if done else {}
    window_end = min([float(d["window"][1]) for d in done] or [window[1]])
    merged_window = (float(first.get("window", window)[0]), window_end)
    aborted = next((d["aborted"] for d in done if d.get("aborted")), None)
    if kept:
        aborted = incomplete(len(shard_dirs), kept)
    records = read_records(out_dir / "records.parquet")
    health = merge_health([d.get("client_health") or {} for d in done])
    health.update(health_mod.sched_lag_ms(records, merged_window))
    doc = dict(
        first,
        label=label,
        level=level,
        records_path=str(out_dir / "records.parquet"),
        window=list(merged_window),
        client_health=health,
        server_metrics_delta=first.get("server_metrics_delta") or {},
        aborted=aborted,
        abort_kind=(kind.value if (kind := AbortKind.of(aborted)) else None),
        requests=count,
        shards=[dict((d or {}).get("shard") or {"index": i}, wrote_result=d is not None) for i, d in enumerate(docs)],
    )
    atomic.write_text(out_dir / "point.json", json.dumps(doc, indent=2, default=str))
    return doc


def _concat(parts: list[Path], dest: Path) -> int:
    """:func:`benchcamp.results.records.merge_records` without removing the parts (the shards' files stay)."""
    import pyarrow.parquet as pq

    table = read_table(*parts)
    if table.num_rows:
        table = table.sort_by("sent_s")
    with atomic.atomic_open(dest, "wb") as f:
        pq.write_table(table, f, compression="zstd")
    return table.num_rows


def merge_health(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """One client-health dict from the shards' (as :func:`benchcamp.loadgen.health.combine` makes one from
    workers'): counts summed, peaks the worst shard's."""

    def vals(key: str) -> list[Any]:
        return [h[key] for h in shards if h.get(key) is not None]

    reads = [h["chunks_per_read"] for h in shards if h.get("chunks_per_read") is not None]
    return {
        "workers": int(sum(vals("workers"))),
        "cpu_max": max(vals("cpu_max")) if vals("cpu_max") else None,
        "cpu_mean_per_worker": [x for v in vals("cpu_mean_per_worker") for x in v],
        "loop_lag_p99_ms": max(vals("loop_lag_p99_ms")) if vals("loop_lag_p99_ms") else None,
        "max_rss_mb": max(vals("max_rss_mb") or [0.0]),
        "rss_start_mb": max(vals("rss_start_mb") or [0.0]),
        "connections_opened": int(sum(vals("connections_opened"))),
        "chunks_per_read": sum(reads) / len(reads) if reads else None,
        "worker_crashes": [x for v in vals("worker_crashes") for x in v],
        "worker_errors": [x for v in vals("worker_errors") for x in v],
        "sessions_distinct": max(vals("sessions_distinct") or [0]),
        "shards": len(shards),
    }
