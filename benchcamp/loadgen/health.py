"""The client's own health: is the client the bottleneck?

Per worker: CPU use (process CPU time over wall time, sampled every
``interval_s``; the peak over the measurement window is what matters: a
saturated core delays reads and sends) and event-loop lag (how late a timer
fires). Over all workers: scheduling lag = actual send - scheduled send, from
the records (coordinated omission shows up here).
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # workers import this module; pandas would add seconds to their start
    import pandas as pd


class HealthSampler:
    def __init__(
        self,
        now: Callable[[], float],
        window_start: float,
        stop_at: Callable[[], float],
        interval_s: float = 1.0,
        lag_tick_s: float = 0.01,
    ) -> None:
        self.now, self.window_start, self.stop_at = now, window_start, stop_at
        self.interval_s, self.lag_tick_s = interval_s, lag_tick_s
        self.cpu: list[float] = []  # CPU fraction of one core per interval, inside the window
        self.lags: list[float] = []  # timer lateness, seconds
        self.error: str | None = None
        self._tasks: list[asyncio.Future] = []
        self._cpu_total = (0.0, 0.0)
        self.rss_start_mb = _rss_mb()  # before any request: the baseline for memory per session

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._cpu_loop()), asyncio.ensure_future(self._lag_loop())]

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()

    async def _cpu_loop(self) -> None:
        t0, c0 = self.now(), time.process_time()
        first = None
        while True:
            await asyncio.sleep(self.interval_s)
            t1, c1 = self.now(), time.process_time()
            if t0 >= self.window_start and t1 <= self.stop_at():
                self.cpu.append((c1 - c0) / max(t1 - t0, 1e-9))
                if first is None:
                    first = (t0, c0)
                self._cpu_total = (t1 - first[0], c1 - first[1])
            t0, c0 = t1, c1

    async def _lag_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.lag_tick_s)
            late = loop.time() - t - self.lag_tick_s
            if self.now() >= self.window_start:
                self.lags.append(max(0.0, late))

    def report(self) -> dict[str, Any]:
        wall, cpu = self._cpu_total
        lags = np.asarray(self.lags) * 1000.0
        return {
            "cpu_mean": cpu / wall if wall > 0 else None,
            "cpu_max": max(self.cpu) if self.cpu else None,
            "loop_lag_p50_ms": float(np.percentile(lags, 50)) if lags.size else None,
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags.size else None,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "rss_start_mb": self.rss_start_mb,
            "error": self.error,
        }


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def sched_lag_ms(records: pd.DataFrame, window: tuple[float, float]) -> dict[str, float | None]:
    """p50/p99/max of sent - scheduled over the requests sent in the window."""
    if records.empty:
        return {"sched_lag_p50_ms": None, "sched_lag_p99_ms": None, "sched_lag_max_ms": None}
    sent = records["sent_s"].astype(float)
    m = (sent >= window[0]) & (sent < window[1])
    lag = ((sent[m] - records["scheduled_s"].astype(float)[m]) * 1000.0).dropna().to_numpy()
    if not lag.size:
        return {"sched_lag_p50_ms": None, "sched_lag_p99_ms": None, "sched_lag_max_ms": None}
    return {
        "sched_lag_p50_ms": float(np.percentile(lag, 50)),
        "sched_lag_p99_ms": float(np.percentile(lag, 99)),
        "sched_lag_max_ms": float(lag.max()),
    }


def combine(workers: list[dict[str, Any]], n_workers: int, crashed: list[int]) -> dict[str, Any]:
    """One health dict for the point. ``cpu_max`` is the busiest worker's peak
    (benchcamp.metrics.validity compares it with load.max_client_cpu)."""

    def vals(key: str) -> list[float]:
        return [w[key] for w in workers if w.get(key) is not None]

    cpu_max, cpu_mean = vals("cpu_max"), vals("cpu_mean")
    lag99 = vals("loop_lag_p99_ms")
    return {
        "workers": n_workers,
        "cpu_max": max(cpu_max) if cpu_max else None,
        "cpu_mean_per_worker": [round(x, 4) for x in cpu_mean],
        "loop_lag_p99_ms": max(lag99) if lag99 else None,
        "max_rss_mb": max(vals("max_rss_mb") or [0.0]),
        "rss_start_mb": max(vals("rss_start_mb") or [0.0]),
        "connections_opened": int(sum(vals("connections_opened"))),
        # content chunks per socket read: 1 = each token read on its own (the costly case)
        "chunks_per_read": (sum(vals("chunks")) / sum(vals("reads"))) if sum(vals("reads") or [0]) else None,
        "worker_crashes": crashed,
        "worker_errors": [w["error"] for w in workers if w.get("error")],
    }
