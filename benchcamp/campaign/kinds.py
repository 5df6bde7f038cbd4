"""Campaign-level kinds shared by the writer (steps) and the readers (CLI, tasks, report).

Point abort kinds belong to the load generator (``benchcamp.loadgen``); these
name what happens to a whole execution: its steps, the errors recorded per
step, its final status, and the keys of the summary documents.
"""

from __future__ import annotations

import enum

from benchcamp.errors import BenchcampError, ExitCode


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


class Metric(enum.StrEnum):
    """Summary keys (written by benchcamp.metrics.summarize) that the campaign's readers use:
    the headline, the terminal sweep table, the report's cards."""

    REQUESTS = "requests"
    THROUGHPUT_PER_GPU = "total_tokens_per_s_per_gpu"
    OUTPUT_THROUGHPUT_PER_GPU = "output_tokens_per_s_per_gpu"
    P90_USER_RATE = "p90_user_tokens_per_s"
    TTFT_P50 = "ttft_p50_s"
    TTFT_P90 = "ttft_p90_s"
    CACHE_HIT_RATE_CLIENT = "cache_hit_rate_client"
    REVENUE_PER_GPU_HOUR = "revenue_per_gpu_hour"
    ERROR_RATE = "error_rate"


class CampaignFailed(BenchcampError):
    """The campaign ran but failed (a point aborted, a step failed, nothing valid): exit 1."""

    exit_code = ExitCode.FAILED


class PointAborted(CampaignFailed):
    """A sweep point ended early; its records are already in the store."""
