"""A live progress line per sweep point: phase, requests, streamed chunks/s (about
tokens/s: servers stream about one token per chunk), errors, time left.

On a terminal the line is rewritten in place; otherwise (logs, CI) one line is
printed every ``every_s`` seconds so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_line(
    label: str,
    t: float,
    warmup_s: float,
    stop_at: float,
    drain_s: float,
    done: int,
    in_window: int,
    chunks_per_s: float,
    errors: int,
    inflight: int,
) -> str:
    if t < warmup_s:
        phase, left = "warm-up", stop_at - t
    elif t < stop_at:
        phase, left = "measure", stop_at - t
    else:
        phase, left = "drain", max(0.0, stop_at + drain_s - t)
    return (
        f"[{label}] {phase:<7} t={t:6.1f}s  requests {done} ({in_window} in window)  "
        f"{chunks_per_s:,.0f} chunks/s  errors {errors}  in flight {inflight}  "
        f"{'left' if phase != 'drain' else 'drain ≤'} {left:.0f}s"
    )


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, every_s: float = 10.0) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s
        self._last_print = -1e9
        self._last = (time.monotonic(), 0.0)
        self._rate = 0.0

    def update(
        self,
        t: float,
        warmup_s: float,
        stop_at: float,
        drain_s: float,
        done: int,
        in_window: int,
        chunks: float,
        errors: int,
        inflight: int,
    ) -> None:
        now = time.monotonic()
        t_prev, prev = self._last
        if now - t_prev >= 1.0:
            self._rate = (chunks - prev) / (now - t_prev)
            self._last = (now, chunks)
        line = format_line(self.label, t, warmup_s, stop_at, drain_s, done, in_window, self._rate, errors, inflight)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
        elif now - self._last_print >= self.every_s:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_print = now

    def close(self, message: str) -> None:
        self.stream.write(("\r\x1b[2K" if self.tty else "") + f"[{self.label}] {message}\n")
        self.stream.flush()
