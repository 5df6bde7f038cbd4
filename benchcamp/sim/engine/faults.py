"""Fault injection for reliability tests of the benchmark client and the DAG.

``--fault KEY=VALUE`` (repeatable) on ``benchcamp engine serve``:

- ``crash-after-requests=N``   the process exits abruptly (``os._exit``) right after
  accepting its N-th request: open connections are reset, nothing is flushed.
- ``error-rate=F``             that fraction of accepted requests is answered with HTTP
  500 in OpenAI's error format; which ones is decided by a PRNG seeded with
  ``seed`` (default 0), so a rerun fails the same requests.
- ``stall-after-seconds=S``    S seconds after start the engine stops emitting tokens;
  connections stay open and ``/health`` stays 200 (a hung GPU looks like that).
- ``slow-start-seconds=S``     for S seconds after start ``/health`` answers 503 and
  requests are refused with 503 (a model still loading).
- ``drop-stream-after-tokens=N`` each stream is cut (connection closed, no ``[DONE]``)
  after N tokens were sent.
- ``seed=N``                   seed for ``error-rate``.

Parsing is pure; :class:`FaultState` holds the counters of one server process.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields

_KEYS = {
    "crash-after-requests": ("crash_after_requests", int),
    "error-rate": ("error_rate", float),
    "stall-after-seconds": ("stall_after_seconds", float),
    "slow-start-seconds": ("slow_start_seconds", float),
    "drop-stream-after-tokens": ("drop_stream_after_tokens", int),
    "seed": ("seed", int),
}


class FaultError(ValueError):
    """A ``--fault`` value that cannot be used; the message names it and the fix."""


@dataclass(frozen=True)
class Faults:
    crash_after_requests: int | None = None
    error_rate: float = 0.0
    stall_after_seconds: float | None = None
    slow_start_seconds: float = 0.0
    drop_stream_after_tokens: int | None = None
    seed: int = 0

    def active(self) -> dict[str, object]:
        """The faults that differ from 'no fault', for the startup log."""
        default = Faults()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }


def parse_faults(specs: list[str] | None) -> Faults:
    values: dict[str, object] = {}
    for spec in specs or []:
        key, sep, raw = spec.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS:
            raise FaultError(f"--fault {spec!r}: expected KEY=VALUE with KEY one of {sorted(_KEYS)}")
        name, typ = _KEYS[key]
        try:
            val = typ(raw.strip())
        except ValueError:
            raise FaultError(f"--fault {key}={raw!r}: not a valid {typ.__name__}") from None
        if typ is float and not val == val:  # NaN
            raise FaultError(f"--fault {key}: NaN is not allowed")
        if name == "error_rate" and not 0.0 <= val <= 1.0:
            raise FaultError(f"--fault error-rate={raw}: must be between 0 and 1")
        if name in ("crash_after_requests", "drop_stream_after_tokens") and val < 1:
            raise FaultError(f"--fault {key}={raw}: must be >= 1")
        if name in ("stall_after_seconds", "slow_start_seconds") and val < 0:
            raise FaultError(f"--fault {key}={raw}: must be >= 0 seconds")
        values[name] = val
    return Faults(**values)  # type: ignore[arg-type]


@dataclass
class FaultState:
    """Per-process fault bookkeeping; times are seconds since server start."""

    faults: Faults
    accepted: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.faults.seed)

    def starting(self, t: float) -> bool:
        return t < self.faults.slow_start_seconds

    def stalled(self, t: float) -> bool:
        s = self.faults.stall_after_seconds
        return s is not None and t >= s

    def accept(self) -> tuple[bool, bool]:
        """Count one accepted request -> (crash_now, fail_with_500).

        The PRNG is drawn for every request (not only when error_rate > 0) so
        the failing set depends only on the seed and the request's rank.
        """
        self.accepted += 1
        draw = self._rng.random()
        crash = self.faults.crash_after_requests is not None and self.accepted >= self.faults.crash_after_requests
        return crash, draw < self.faults.error_rate
