"""The steps of one campaign execution, shared by `benchcamp run` and the Airflow tasks.

Each step takes the config, the results store with the execution's
:class:`StoreLayout`, and what earlier steps returned (the small frozen objects of
benchcamp.campaign.handoff, which an Airflow task hands on as their JSON), and
returns one: any step can run on any worker, because everything it needs is in
the store and everything it makes goes there. Per engine configuration:

prepare_workload -> provision -> deploy_engine -> sweep -> stop_engine -> deprovision
-> summarize -> track -> evaluate; :func:`judge` turns the result into an exit code.

A failing step records its reason under ``errors/<step>`` (a retry that succeeds
deletes it), so summarize reports it even when the step ran on another machine.
"""

from __future__ import annotations

import logging

# The steps live in modules by concern (execution: what they share; lifecycle: node and engine; measure: sweep
# and search; conclude: summarize, track, evaluate, judge): callers and the Airflow tasks name them all here.
from benchcamp.campaign.conclude import (
    evaluate,
    export_benchmark_reports,
    judge,
    judge_stored,
    load_campaign,
    merge_shards,
    mlflow_location,
    publish_report,
    summarize,
    track,
    verdict_lines,
)
from benchcamp.campaign.execution import (
    BEFORE_SUMMARY,
    clear_error,
    measurement_name,
    measurements,
    point_labels,
    record_error,
    recorded,
    recorded_errors,
    startup_timeout,
    trial_spec,
    virtual,
)
from benchcamp.campaign.handoff import WorkloadRef
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.lifecycle import deploy_engine, deprovision, poll_node, provision, release_queued, stop_engine
from benchcamp.campaign.measure import SHARD_SYNC_S, measured_any, search, sweep
from benchcamp.config import Config
from benchcamp.results.jsonsafe import strict_json
from benchcamp.results.store import ResultsStore

__all__ = [
    "BEFORE_SUMMARY",
    "SHARD_SYNC_S",
    "clear_error",
    "deploy_engine",
    "deprovision",
    "evaluate",
    "export_benchmark_reports",
    "judge",
    "judge_stored",
    "load_campaign",
    "measured_any",
    "measurement_name",
    "measurements",
    "merge_shards",
    "mlflow_location",
    "point_labels",
    "poll_node",
    "prepare_workload",
    "provision",
    "publish_report",
    "record_error",
    "recorded",
    "recorded_errors",
    "release_queued",
    "search",
    "startup_timeout",
    "stop_engine",
    "summarize",
    "sweep",
    "track",
    "trial_spec",
    "verdict_lines",
    "virtual",
]

log = logging.getLogger(__name__)


def prepare_workload(
    cfg: Config, store: ResultsStore, layout: StoreLayout, publish: bool = True, check: bool = False
) -> WorkloadRef:
    """Build (or reuse) the workload; ``publish``: put it in the store by digest for other workers; ``check``:
    refuse a campaign this workload makes infeasible (benchcamp.campaign.feasible.check_workload), as both drivers
    do before provisioning."""
    from benchcamp.campaign.feasible import check_workload
    from benchcamp.workload import ensure_workload
    from benchcamp.workload.stats import workload_stats

    workload, path, digest = ensure_workload(cfg.workload)
    if check:
        check_workload(cfg, workload)  # before provision: a context the model cannot hold, a window too short
    key = None
    if publish:
        key = layout.workload(digest)
        if not store.exists(key):
            store.put_file(path, key)
    stats = strict_json(workload_stats(workload))
    return WorkloadRef(
        key=key, digest=digest, path=str(path), name=workload.name, sessions=len(workload.sessions), stats=stats
    )
