"""Campaign-level kinds shared by the writer (steps) and the readers (CLI, tasks, report).

Point abort kinds belong to the load generator (``benchcamp.loadgen``); these
name what happens to a whole execution: its steps, the errors recorded per
step, its final status, and the keys of the summary documents. The keys of a
point's summary (``Metric``) belong to their writer, ``benchcamp.metrics``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from benchcamp.errors import BenchcampError, ExitCode

if TYPE_CHECKING:
    from benchcamp.metrics import Metric as Metric


class Step(enum.StrEnum):
    """The steps of one execution, in order; also the names of recorded step errors."""

    PREPARE_WORKLOAD = "prepare_workload"
    PROVISION = "provision"
    DEPLOY = "deploy"
    SWEEP = "sweep"
    STOP_ENGINE = "stop_engine"
    DEPROVISION = "deprovision"
    SUMMARIZE = "summarize"
    TRACK = "track"
    EVALUATE = "evaluate"


class Status(enum.StrEnum):
    """How an execution ended (``status`` in campaign.json and summary.json)."""

    OK = "ok"  # every point measured, at least one valid
    FAILED = "failed"  # a step failed or a point aborted / was not measured
    NO_VALID_POINT = "no valid point"  # measured, but nothing valid to report
    INTERRUPTED = "interrupted"  # SIGINT / SIGTERM: what was measured is kept

    @property
    def exit_code(self) -> ExitCode:
        return {Status.OK: ExitCode.OK, Status.INTERRUPTED: ExitCode.INTERRUPTED}.get(self, ExitCode.FAILED)


# Keys of summary.json that the CLI, the DAG's verdict task and the report read.
STATUS = "status"
ERROR = "error"
HEADLINE = "headline"
POINTS = "points"
MISSING = "missing_points"
INTERRUPTED = "interrupted"
# Keys of verdicts.json (written by the evaluate step).
VERDICTS = "verdicts"
REGRESSED = "regressed"


class CampaignFailed(BenchcampError):
    """The campaign ran but failed (a point aborted, a step failed, nothing valid): exit 1."""

    exit_code = ExitCode.FAILED


class PointAborted(CampaignFailed):
    """A sweep point ended early; its records are already in the store."""


def __getattr__(name: str) -> Any:
    # Metric lives with its writer, benchcamp.metrics (pandas): loaded on first use, so that
    # importing benchcamp.campaign (the DAG file does, at every parse) stays light
    if name == "Metric":
        from benchcamp.metrics import Metric

        return Metric
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
