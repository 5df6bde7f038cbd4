"""MLflow tracking of campaigns: log (parent run per execution, child run per
sweep point), read back, historical baselines, verdict tags, report artifacts."""

from benchcamp.secrets.redaction import safe_params, scrub
from benchcamp.tracking.history import (
    PointRun,
    TrackedRun,
    get_run,
    historical_baselines,
    latest_run,
    mark_baseline,
    marked_baseline,
)
from benchcamp.tracking.log import (
    COMPARABILITY_TAGS,
    comparability_key,
    log_campaign,
    log_report,
    log_verdicts,
    numeric_metrics,
)
from benchcamp.tracking.store import TrackingError, check_reachable

__all__ = [
    "COMPARABILITY_TAGS",
    "PointRun",
    "TrackedRun",
    "TrackingError",
    "check_reachable",
    "comparability_key",
    "get_run",
    "historical_baselines",
    "latest_run",
    "log_campaign",
    "log_report",
    "log_verdicts",
    "mark_baseline",
    "marked_baseline",
    "numeric_metrics",
    "safe_params",
    "scrub",
]
