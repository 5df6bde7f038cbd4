"""One campaign, two drivers: the step library (``steps``) that `benchcamp run`
(``driver``) and the Airflow tasks (tasks/) share, what its steps hand to each
other (``handoff``), the store layout of an execution (``layout``), its results
(``result``) and the campaign-level kinds."""

from typing import TYPE_CHECKING, Any

from benchcamp.campaign.driver import run_campaign, target
from benchcamp.campaign.interrupt import sigterm_as_interrupt
from benchcamp.campaign.kinds import CampaignFailed, PointAborted, Status, Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.result import (
    CampaignResult,
    PointOutcome,
    new_execution_id,
    point_summary_doc,
    resolve_execution_dir,
    strict_json,
    summarize_point,
    utcnow,
    write_campaign_files,
)
from benchcamp.campaign.steps import judge, startup_timeout

if TYPE_CHECKING:
    from benchcamp.metrics import Metric

__all__ = [
    "CampaignFailed",
    "CampaignResult",
    "Metric",
    "PointAborted",
    "PointOutcome",
    "Status",
    "Step",
    "StoreLayout",
    "judge",
    "new_execution_id",
    "point_summary_doc",
    "resolve_execution_dir",
    "run_campaign",
    "sigterm_as_interrupt",
    "startup_timeout",
    "strict_json",
    "summarize_point",
    "target",
    "utcnow",
    "write_campaign_files",
]


def __getattr__(name: str) -> Any:
    if name == "Metric":  # on first use, as in kinds: benchcamp.metrics loads pandas
        from benchcamp.metrics import Metric

        return Metric
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
