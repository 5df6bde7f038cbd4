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
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchcamp.tracking.log import headline_point
from benchcamp.tracking.store import TrackingError

log = logging.getLogger(__name__)

HISTORY = "history"
TREND_PAGE = "trend.html"


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
    key = comparability_key(cfg, campaign.workload_digest, headline_point(campaign))
    return {"summary": headline, "samples": samples, "key": key}


def _run_baseline(
    run, kind: str, name: str, prices, with_samples: bool = True, point: str | None = None
) -> dict[str, Any]:
    """A run as a baseline: its figures at ``point`` (its headline point when None)."""
    label = point or run.headline_point
    measured = run.at(point) if point else None
    samples = None
    if with_samples and label:
        try:
            samples = run.load_samples(label, prices=prices)
        except TrackingError:
            samples = None  # no records artifact: compare falls back to the history spread
    return {
        "run_id": run.run_id,
        "name": name,
        "kind": kind,
        "key": (run.key | {"point": label}) if measured else run.key,
        "summary": dict(measured.summary if measured else run.headline),
        "samples": samples,
        "points": [p.summary | {"point": p.label, "level": p.level} for p in run.points() if p.valid],
        # an imported run whose tool measured throughput by the span rule (benchcamp.interop.br_import) meets the
        # judged run's span figure
        **({"throughput_definition": "span"} if run.tag("throughput_headline") == "span" else {}),
    }


def earlier_runs(cfg, campaign, uri: str) -> list:
    """The earlier valid runs that measured the campaign's headline point with its comparability key (their own
    headline may be another point), newest first: the history of its headline verdicts
    (:func:`benchcamp.tracking.history.point_history`)."""
    from benchcamp.tracking.history import point_history
    from benchcamp.verdicts.compare import comparability_key
    from benchcamp.verdicts.guard import GuardRule

    point = headline_point(campaign)
    # the guard reads a longer series than the report's historical baseline (baselines.history_runs)
    n = max(cfg.baselines.history_runs, GuardRule().history_nights) if cfg.baselines.history_runs else 0
    if point is None or n == 0:
        return []
    key = comparability_key(cfg, campaign.workload_digest, point)
    return point_history(cfg, key, n, campaign.execution_id, uri, campaign.started_at)


def earlier_searches(cfg, campaign, uri: str) -> list:
    """The earlier valid runs with the campaign's point-less key (deployment and workload), newest first: the
    history of its capacity verdicts. Not at the headline point: a search's headline point is the level it
    found, which moves with the capacity the verdict judges."""
    from benchcamp.tracking import historical_baselines
    from benchcamp.verdicts.compare import comparability_key

    key = comparability_key(cfg, campaign.workload_digest)
    return historical_baselines(
        cfg,
        key,
        n=cfg.baselines.history_runs,
        exclude_execution_id=campaign.execution_id,
        uri=uri,
        started_before=campaign.started_at,
    )


def tonight_trials(headline: dict, metric: str) -> tuple[float, ...]:
    """``metric`` of each measured trial of the headline point (its ``trials`` block, load.trials > 1), in trial order."""
    from benchcamp.results.trials import TRIALS_KEY, PointTrials

    if not headline.get(TRIALS_KEY):
        return ()
    return tuple(float(v) for v in PointTrials.from_dict(headline[TRIALS_KEY]).values(metric) if v is not None)


def nightly_series(cfg, campaign, earlier: list) -> dict[str, list]:
    """Each headline metric's nights: ``earlier`` (newest first) then this campaign, oldest first."""
    from benchcamp.metrics import HEADLINE
    from benchcamp.secrets.redaction import safe_params
    from benchcamp.tracking.history import night_config, nights
    from benchcamp.tracking.log import campaign_tags
    from benchcamp.verdicts.guard import Night

    headline = dict(campaign.headline or {})
    tonight = night_config(campaign_tags(cfg, campaign), safe_params(cfg.flat()))
    out = {}
    for metric in HEADLINE:
        if metric not in headline:
            continue
        trials = tonight_trials(headline, metric)
        value = float(headline[metric]) if headline[metric] is not None else math.nan
        out[metric] = nights(earlier, metric, headline_point(campaign)) + [
            Night(campaign.execution_id, value, trials, campaign.started_at, tonight)
        ]
    return out


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
    key = comparability_key(cfg, campaign.workload_digest, headline_point(campaign))
    prices = prices_for(cfg.pricing)
    if earlier:
        hist = [
            _run_baseline(r, "historical", r.execution_id, prices, with_samples=(i == 0), point=key.get("point"))
            for i, r in enumerate(earlier)
        ]
        before = earlier[0].headline_point
        if before and before != key.get("point"):
            notes.append(
                f"the headline point moved: {before} in the last comparable run, {key.get('point')} tonight; "
                f"judged against {key.get('point')}'s own history"
            )
        b = historical_baseline(hist)
        b["points"] = hist[0]["points"]
        out.append(b)
    else:
        notes.append("no earlier valid run with the same workload, model, GPU, engine and point in MLflow")
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


def assess(
    cfg, campaign, uri: str | None, only: str | None = None, series_out: dict | None = None
) -> tuple[list, list[dict], list[str]]:
    """(verdicts, baselines, notes); ``series_out`` receives the nightly series the guard judged."""
    from benchcamp.verdicts.compare import comparability_key, compare, compare_capacity, guard_verdicts

    # the history is read once: the headline and the capacity verdicts both judge against it
    guarded = uri is not None and only in (None, HISTORY)
    series_runs = earlier_runs(cfg, campaign, uri) if guarded and uri is not None else []
    earlier = series_runs[: cfg.baselines.history_runs]
    baselines, notes = gather_baselines(cfg, campaign, uri, earlier, only)
    verdicts: list = []
    if campaign.capacity and only in (None, HISTORY):
        current = {"capacity": campaign.capacity, "key": comparability_key(cfg, campaign.workload_digest)}
        searches = earlier_searches(cfg, campaign, uri) if guarded and uri is not None else []
        cap_baselines = capacity_baselines(cfg, campaign, searches)
        verdicts += compare_capacity(current, cap_baselines, cfg.regression)
        if not cap_baselines:
            notes.append("no earlier capacity search with the same workload, model, GPU and engine in MLflow")
    if not campaign.headline:
        notes.append("no valid sweep point: nothing to compare")
        return verdicts, baselines, notes
    # the history is judged as a nightly series (benchcamp.verdicts.guard), the others point against point
    judged = [b for b in baselines if not (guarded and b.get("kind") == "historical")]
    verdicts = compare(current_input(campaign), judged, cfg.regression) + verdicts
    if guarded and cfg.baselines.history_runs:
        series = nightly_series(cfg, campaign, series_runs)
        verdicts = guard_verdicts(series, cfg.regression) + verdicts
        if series_out is not None:
            series_out.update(series)
    return verdicts, baselines, notes


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
    series: dict = {}
    try:
        verdicts, baselines, notes = assess(cfg, campaign, uri, only, series_out=series)
    except Exception as exc:  # history unreadable: judge against the published baselines
        if uri is None:
            raise
        failed, uri = failed or _tracking_failure(exc), None
        verdicts, baselines, notes = assess(cfg, campaign, None, only)
    report = render(campaign, verdicts, baselines, out_dir, run_id=run_id)
    if series:
        notes.append(f"trend: {_trend(cfg, campaign, series, report.parent, run_id if failed is None else None)}")
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


def _trend(cfg, campaign, series: dict, out: Path, run_id: str | None) -> str:
    """The trend page beside the report (each headline over nights, change points and their diff) and,
    when the run is tracked, the lineage's MLflow trend run; the page's name, relative to the report."""
    from benchcamp.report.trend import chart, write_html
    from benchcamp.tracking.store import client
    from benchcamp.tracking.trend import log_series
    from benchcamp.verdicts.compare import comparability_key, guard_rule

    point = headline_point(campaign)
    title = f"{cfg.campaign.name} at {point}"
    charts = [chart(title, m, nights, guard_rule(cfg.regression, m)) for m, nights in series.items()]
    page = write_html(f"benchcamp history: {title}", charts, out / TREND_PAGE)
    if run_id:
        try:
            exp = client(cfg.tracking.mlflow_uri).get_run(run_id).info.experiment_id
            key = comparability_key(cfg, campaign.workload_digest, point)
            log_series(cfg.tracking.mlflow_uri, exp, cfg.campaign.name, key, series)
        except Exception as exc:  # noqa: BLE001  (the page is written; the MLflow line is a convenience)
            log.warning("trend run not logged: %s", _tracking_failure(exc))
    return page.name


def _tracking_failure(exc: Exception) -> str:
    """One line for the user; the traceback goes to the debug log only."""
    from benchcamp.secrets.redaction import redact

    log.debug("tracking failed", exc_info=exc)
    text = re.sub(r"//[^/@\s]+@", "//***@", (str(exc).strip().splitlines() or [""])[0][:300])  # URL passwords
    return redact(text if isinstance(exc, TrackingError) else f"{type(exc).__name__}: {text}")
