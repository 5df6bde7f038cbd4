"""Why a sweep point ended early: the one place that names each kind and words its reason.

A point's ``aborted`` (PointResult, point.json) is ``"<kind>: <detail>"``, e.g.
``"engine stalled: no token for 60 s, 8 requests in flight"``. Code that acts on
the cause (the campaign's outcome, the DAG, the report) reads the kind with
:meth:`AbortKind.of`, never by matching free text.
"""

from __future__ import annotations

import enum


class AbortKind(enum.StrEnum):
    ENGINE_DIED = "engine died"  # the endpoint stopped answering mid-point
    ENGINE_STALLED = "engine stalled"  # requests in flight, no token for a while
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM: what was measured is kept
    WORKER_CRASHED = "client worker crashed"  # a load generator process died
    WORKERS_HUNG = "client workers hung"  # workers did not finish after the drain; killed
    NOT_RUN = "not run"  # an earlier point found the endpoint gone
    INCOMPLETE = "incomplete"  # a load-generator shard (host) wrote no result: the point lacks its load

    def reason(self, detail: str = "") -> str:
        return f"{self.value}: {detail}" if detail else self.value

    @classmethod
    def of(cls, reason: str | None) -> AbortKind | None:
        """The kind of an ``aborted`` string (None when the point ran to completion or the
        reason predates these kinds)."""
        if not reason:
            return None
        for kind in cls:
            if reason == kind.value or reason.startswith(kind.value + ":"):
                return kind
        return None


def engine_stalled(stall_s: float, in_flight: int) -> str:
    return AbortKind.ENGINE_STALLED.reason(f"no token for {stall_s:g} s, {in_flight} requests in flight")


def engine_died(cause: str | None = None) -> str:
    """``cause``: what ended the engine, where the deployment can tell (a Slurm job's end: its time limit)."""
    return AbortKind.ENGINE_DIED.reason(cause or "the endpoint stopped accepting connections during the point")


def interrupted() -> str:
    return AbortKind.INTERRUPTED.reason("Ctrl-C or SIGTERM; the records measured so far are kept")


def worker_crashed(exit_codes: dict[int, int | None]) -> str:
    return AbortKind.WORKER_CRASHED.reason(f"exit codes {exit_codes} (records flushed before the crash are kept)")


def workers_hung(grace_s: float) -> str:
    return AbortKind.WORKERS_HUNG.reason(f"still running {grace_s:g} s after the drain; killed")


def not_run(cause: str) -> str:
    return AbortKind.NOT_RUN.reason(cause)


def incomplete(shards: int, kept: dict[int, int]) -> str:
    """``kept``: {shard index: records it had flushed, merged into the point all the same}."""
    lost = ", ".join(f"shard {i} ({n} flushed records kept)" for i, n in sorted(kept.items()))
    return AbortKind.INCOMPLETE.reason(f"{len(kept)} of {shards} load-generator shards wrote no result: {lost}")
