"""A campaign's headline metrics over nights, per lineage and point, read from MLflow; and the same series
logged to one trend run per lineage and point, whose metric histories MLflow's run view draws as lines
(one step per night: MLflow plots a metric with several steps as a line, one value per run as a bar)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchcamp.metrics import HEADLINE
from benchcamp.tracking.history import TrackedRun, _newest, _tracked, nights
from benchcamp.tracking.store import ROLE_CAMPAIGN, TAG, TrackingError, client, mlflow_time
from benchcamp.verdicts.guard import GuardRule, Night, SeriesVerdict, judge_series

ROLE_TREND = "trend"
TREND_PREFIX = "trend/"
MAX_RUNS = 5000


@dataclass
class Lineage:
    """The nights of one campaign at one point (one comparability key), oldest first."""

    campaign: str
    key: dict[str, Any]
    runs: list[TrackedRun]

    @property
    def label(self) -> str:
        k = self.key
        return f"{self.campaign} {k.get('point')} ({k.get('engine_kind')}, {k.get('model')}, {k.get('gpu')} x{k.get('gpu_count')})"

    def series(self, metric: str) -> list[Night]:
        return nights(list(reversed(self.runs)), metric, point=self.key["point"])

    def judged(self, metric: str, rule: GuardRule | None = None) -> SeriesVerdict:
        return judge_series(metric, self.series(metric), rule or GuardRule())


def lineages(uri: str, campaign: str | None = None) -> list[Lineage]:
    """Valid, finished campaign runs (of ``campaign`` when given) grouped by comparability key and by each
    point they measured valid, each group oldest first: a point's nights whatever each campaign's headline,
    as the guard judges them (:func:`benchcamp.tracking.history.point_history`). Runs logged without a
    point are left out (a capacity search names none)."""
    flt = f"tags.`{TAG}role` = '{ROLE_CAMPAIGN}' AND tags.`{TAG}valid` = 'true' AND attributes.status = 'FINISHED'"
    if campaign:
        if "'" in campaign:
            raise TrackingError(f"--campaign {campaign!r}: quotes are not supported")
        flt += f" AND tags.`{TAG}campaign` = '{campaign}'"
    groups: dict[tuple, Lineage] = {}
    order: dict[tuple, tuple[str, float]] = {}  # campaign, then level: c8 before c64
    for r in reversed(_newest(uri, flt, MAX_RUNS)):
        run = _tracked(uri, r)
        if not run.key.get("point"):
            continue
        name = run.tag("campaign")
        for point in run.points():
            if not point.valid:
                continue
            key = run.key | {"point": point.label}
            ident = (name, tuple(sorted((k, str(v)) for k, v in key.items())))
            groups.setdefault(ident, Lineage(name, key, [])).runs.append(run)
            order[ident] = (name, point.level)
    return [groups[i] for i in sorted(groups, key=lambda i: order[i])]


def log_trend(uri: str, lineage: Lineage, metrics: Sequence[str] = tuple(HEADLINE)) -> str:
    """:func:`log_series` of a lineage read back from MLflow."""
    series = {m: lineage.series(m) for m in metrics}
    return log_series(uri, lineage.runs[-1].experiment_id, lineage.campaign, lineage.key, series)


def log_series(uri: str, experiment: str, campaign: str, key: dict[str, Any], series: dict[str, list[Night]]) -> str:
    """(Re)write the trend run of ``campaign`` at ``key``: ``trend/<metric>`` at step = night number,
    timestamped with the night's start. The run is replaced whole, so a night judged again never doubles a
    point."""
    from mlflow.entities import Metric as MlflowMetric

    c = client(uri)
    tags = {f"{TAG}role": ROLE_TREND, f"{TAG}campaign": campaign}
    tags |= {f"{TAG}{k}": str(v) for k, v in key.items()}
    flt = " AND ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items() if "'" not in v)
    for old in c.search_runs([experiment], filter_string=flt, max_results=100):
        c.delete_run(old.info.run_id)
    name = f"trend {campaign} {key.get('point')}"
    run = c.create_run(experiment, tags=tags | {"mlflow.runName": name[:250]})
    batch = []
    for metric, nights_ in series.items():
        for step, n in enumerate(nights_):
            if math.isfinite(n.figure):
                when = mlflow_time(n.started_at) if n.started_at else step
                batch.append(MlflowMetric(f"{TREND_PREFIX}{metric}", n.figure, when, step))
    for i in range(0, len(batch), 1000):  # MLflow's log_batch limit
        c.log_batch(run.info.run_id, metrics=batch[i : i + 1000])
    c.set_terminated(run.info.run_id)
    return str(run.info.run_id)
