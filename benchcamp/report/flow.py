"""What ends every campaign: track (MLflow) -> compare (baselines) -> report.

``benchcamp run``, ``benchcamp reproduce``, ``benchcamp compare`` and
``benchcamp report`` all go through here, so they judge and render alike.
Baselines: the published references named in ``baselines.published``, the
last ``baselines.history_runs`` valid runs with the same comparability key, and
the run marked as the baseline (``benchcamp.baseline=true`` or
``baselines.run_id``). ``--baseline NAME`` narrows that to one: a published
name, ``history``, or an MLflow run id.

Tracking never costs the report: when MLflow fails after measuring, the
results stay where they are, the report is rendered against the published
baselines, and the Outcome says "not tracked" (the caller exits 1; `benchcamp
log RESULTS_DIR` logs the folder later).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchcamp.tracking.store import TrackingError

log = logging.getLogger(__name__)

HISTORY = "history"


@dataclass
class Outcome:
    run_id: str | None
    verdicts: list
    baselines: list[dict[str, Any]]
    report: Path | None
    regressed: bool
    notes: list[str] = field(default_factory=list)
    tracking_error: str | None = None  # set when MLflow failed: the results are kept but not tracked

    @property
    def tracked(self) -> bool:
        return self.tracking_error is None


def current_input(campaign) -> dict[str, Any]:
    """compare's ``current``: the headline summary, its point's per-request samples, the key."""
    from benchcamp.metrics import request_samples
    from benchcamp.pricing import prices_for
    from benchcamp.results.records import read_records
    from benchcamp.verdicts.compare import comparability_key

    cfg = campaign.config
    headline = dict(campaign.headline or {})
    point = next((p for p in campaign.points if p.label == headline.get("point")), None)
    samples = None
    if point is not None and Path(point.records_path).exists():
        window = tuple(point.window) if point.window and point.window[1] > point.window[0] else None
        samples = request_samples(read_records(point.records_path), window, prices_for(cfg.pricing))
    return {"summary": headline, "samples": samples, "key": comparability_key(cfg, campaign.workload_digest)}


def _run_baseline(run, kind: str, name: str, prices, with_samples: bool = True) -> dict[str, Any]:
    samples = None
    if with_samples and run.headline_point:
        try:
            samples = run.load_samples(prices=prices)
        except TrackingError:
            samples = None  # no records artifact: compare falls back to the history spread
    return {
        "run_id": run.run_id,
        "name": name,
        "kind": kind,
        "key": run.key,
        "summary": dict(run.headline),
        "samples": samples,
        "points": [p.summary | {"point": p.label, "level": p.level} for p in run.points() if p.valid],
    }


def earlier_runs(cfg, campaign, uri: str) -> list:
    """The earlier valid runs with the campaign's comparability key, newest first: the
    history of both its headline and its capacity verdicts."""
    from benchcamp.tracking import historical_baselines
    from benchcamp.verdicts.compare import comparability_key

    key = comparability_key(cfg, campaign.workload_digest)
    return historical_baselines(
        cfg, key, exclude_execution_id=campaign.execution_id, uri=uri, started_before=campaign.started_at
    )


def gather_baselines(
    cfg, campaign, uri: str | None, earlier: list, only: str | None = None
) -> tuple[list[dict], list[str]]:
    """(baseline dicts for :func:`benchcamp.verdicts.compare.compare`, notes about what was not found).
    ``earlier``: :func:`earlier_runs` when ``uri`` is set and ``only`` is None or ``history``."""
    from benchcamp.pricing import prices_for
    from benchcamp.tracking import get_run, marked_baseline
    from benchcamp.verdicts.baselines import list_published, load_published
    from benchcamp.verdicts.compare import comparability_key, historical_baseline

    notes: list[str] = []
    out: list[dict] = []
    published = list(cfg.baselines.published)
    if only and only != HISTORY and only not in list_published():
        if uri is None:
            raise TrackingError(
                f"--baseline {only}: not a published baseline ({', '.join(list_published())}) "
                "and no MLflow store to look it up as a run id"
            )
        run = get_run(uri, only)
        return [
            _run_baseline(run, "marked", f"run {run.run_id[:8]} ({run.execution_id})", prices_for(cfg.pricing))
        ], notes
    if only:
        published = [only] if only != HISTORY else []
    out += [load_published(n) for n in published]
    if uri is None or only in published:
        return out, notes
    key = comparability_key(cfg, campaign.workload_digest)
    prices = prices_for(cfg.pricing)
    if earlier:
        hist = [
            _run_baseline(r, "historical", r.execution_id, prices, with_samples=(i == 0)) for i, r in enumerate(earlier)
        ]
        b = historical_baseline(hist)
        b["points"] = hist[0]["points"]
        out.append(b)
    else:
        notes.append("no earlier valid run with the same workload, model, GPU and engine in MLflow")
    if only is None:
        marked = marked_baseline(cfg, key, uri)
        if marked is not None and marked.execution_id != campaign.execution_id:
            out.append(_run_baseline(marked, "marked", f"marked baseline {marked.execution_id}", prices))
    return out, notes


def capacity_baselines(cfg, campaign, earlier: list) -> list[dict[str, Any]]:
    """The capacity searches of ``earlier`` (:func:`earlier_runs`): the latest as the
    baseline, all of them as its history (the noise rule's spread)."""
    from benchcamp.verdicts.compare import comparability_key

    if not campaign.capacity:
        return []
    history = [c for c in (r.capacity() for r in earlier) if c]
    if not history:
        return []
    return [
        {
            "name": f"history ({len(history)} search(es))",
            "kind": "historical",
            "key": comparability_key(cfg, campaign.workload_digest),
            "capacity": history[0],
            "history": history,
        }
    ]


def assess(cfg, campaign, uri: str | None, only: str | None = None) -> tuple[list, list[dict], list[str]]:
    from benchcamp.verdicts.compare import comparability_key, compare, compare_capacity

    # the history is read once: the headline and the capacity verdicts both judge against it
    earlier = earlier_runs(cfg, campaign, uri) if uri is not None and only in (None, HISTORY) else []
    baselines, notes = gather_baselines(cfg, campaign, uri, earlier, only)
    verdicts: list = []
    if campaign.capacity and only in (None, HISTORY):
        current = {"capacity": campaign.capacity, "key": comparability_key(cfg, campaign.workload_digest)}
        cap_baselines = capacity_baselines(cfg, campaign, earlier)
        verdicts += compare_capacity(current, cap_baselines, cfg.regression)
        if not cap_baselines:
            notes.append("no earlier capacity search with the same workload, model, GPU and engine in MLflow")
    if not campaign.headline:
        notes.append("no valid sweep point: nothing to compare")
        return verdicts, baselines, notes
    return compare(current_input(campaign), baselines, cfg.regression) + verdicts, baselines, notes


def finish(
    cfg,
    campaign,
    out_dir: str | Path = "reports",
    track: bool = True,
    only: str | None = None,
    airflow: dict[str, str] | None = None,
    run_id: str | None = None,
) -> Outcome:
    """Log ``campaign`` (unless ``track`` is False or it is already logged as ``run_id``),
    compare it, tag the verdicts, render the report and log it. A tracking failure is
    returned on ``Outcome.tracking_error`` (with a note), never raised: the report is
    rendered all the same."""
    from benchcamp.report.render import render
    from benchcamp.tracking import (
        check_reachable,
        log_campaign,
        log_report,
        log_verdicts,
    )
    from benchcamp.verdicts.compare import any_regression

    uri = cfg.tracking.mlflow_uri if track else None
    failed: str | None = None
    if track and run_id is None:
        try:
            check_reachable(cfg.tracking.mlflow_uri)
            run_id = log_campaign(cfg, campaign, airflow=airflow)
        except Exception as exc:  # noqa: BLE001  (any tracking failure: keep the results, render the report)
            failed, uri = _tracking_failure(exc), None
    try:
        verdicts, baselines, notes = assess(cfg, campaign, uri, only)
    except Exception as exc:  # history unreadable: judge against the published baselines
        if uri is None:
            raise
        failed, uri = failed or _tracking_failure(exc), None
        verdicts, baselines, notes = assess(cfg, campaign, None, only)
    report = render(campaign, verdicts, baselines, out_dir, run_id=run_id)
    if track and run_id and failed is None:
        try:
            log_verdicts(cfg.tracking.mlflow_uri, run_id, verdicts)
            log_report(cfg.tracking.mlflow_uri, run_id, report.parent)
        except Exception as exc:  # noqa: BLE001  (the report is rendered; say it is not in MLflow)
            failed = _tracking_failure(exc)
    if failed:
        notes.append(
            f"not tracked: {failed}; the results are kept in {campaign.results_dir}: log them later "
            f"with `benchcamp log {campaign.results_dir}`"
        )
    return Outcome(run_id, verdicts, baselines, report, any_regression(verdicts), notes, tracking_error=failed)


def _tracking_failure(exc: Exception) -> str:
    """One line for the user; the traceback goes to the debug log only."""
    from benchcamp.secrets.redaction import redact

    log.debug("tracking failed", exc_info=exc)
    text = re.sub(r"//[^/@\s]+@", "//***@", (str(exc).strip().splitlines() or [""])[0][:300])  # URL passwords
    return redact(text if isinstance(exc, TrackingError) else f"{type(exc).__name__}: {text}")
