"""Reading campaigns back from MLflow: one run, the latest, the historical
baselines with the same comparability key, and a full CampaignResult (config
and records downloaded) for re-rendering a report or reproducing a run."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchcamp.tracking.log import COMPARABILITY_TAGS
from benchcamp.tracking.store import ROLE_CAMPAIGN, ROLE_POINT, TAG, TrackingError, client, describe_uri, mlflow_time
from benchcamp.verdicts.baselines import POINT_FIELDS
from benchcamp.verdicts.guard import Night


@dataclass
class PointRun:
    run_id: str
    label: str
    level: float
    valid: bool
    reasons: list[str]
    summary: dict[str, float]
    window: tuple[float, float] | None = None


@dataclass
class TrackedRun:
    """A campaign's parent run: its tags, headline metrics, and access to its points."""

    uri: str
    run_id: str
    experiment_id: str
    execution_id: str
    start_time: int
    status: str
    tags: dict[str, str]
    headline: dict[str, float]
    _points: list[PointRun] | None = field(default=None, repr=False)
    params: dict[str, str] = field(default_factory=dict, repr=False)

    def tag(self, name: str, default: str = "") -> str:
        return self.tags.get(TAG + name, default)

    @property
    def valid(self) -> bool:
        return self.tag("valid") == "true"

    @property
    def headline_point(self) -> str:
        return self.tag("headline_point")

    @property
    def key(self) -> dict[str, Any]:
        """The comparability key as :mod:`benchcamp.verdicts.compare` builds it (gpu_count an int)."""
        key: dict[str, Any] = {k: self.tag(k) or None for k in COMPARABILITY_TAGS}
        if key.get("point") is None:  # a capacity search (or a run logged before points were keyed)
            key = {k: v for k, v in key.items() if k not in POINT_FIELDS}
        if str(key.get("gpu_count") or "").isdigit():
            key["gpu_count"] = int(key["gpu_count"])
        return key

    def points(self) -> list[PointRun]:
        if self._points is None:
            c = client(self.uri)
            runs = c.search_runs(
                [self.experiment_id],
                max_results=1000,
                filter_string=f"tags.mlflow.parentRunId = '{self.run_id}' AND tags.`{TAG}role` = '{ROLE_POINT}'",
            )
            self._points = sorted((_point(r) for r in runs), key=lambda p: (p.level, p.label))
        return self._points

    def at(self, point: str) -> PointRun | None:
        """The run's valid point ``point``, None when it did not measure it or measured it invalid."""
        return next((p for p in self.points() if p.label == point and p.valid), None)

    def config(self) -> dict[str, Any]:
        """The resolved config logged with the run (``config.json``)."""
        with tempfile.TemporaryDirectory() as d:
            path = self._download(self.run_id, "config.json", d)
            return json.loads(Path(path).read_text())

    def capacity(self) -> dict[str, Any] | None:
        """The capacity search logged with the run (``summary.json``'s ``capacity``), if any."""
        with tempfile.TemporaryDirectory() as d:
            try:
                path = self._download(self.run_id, "summary.json", d)
            except TrackingError:
                return None
            return json.loads(Path(path).read_text()).get("capacity")

    def records_path(self, point: str | None = None, dst: str | Path | None = None) -> Path:
        """Download a point's ``records.parquet`` (default: the headline point) and return its path."""
        label = point or self.headline_point
        match = [p for p in self.points() if p.label == label]
        if not match:
            raise TrackingError(
                f"run {self.run_id} has no point {label!r}; points: "
                f"{', '.join(p.label for p in self.points()) or 'none'}"
            )
        dst = Path(dst or tempfile.mkdtemp(prefix="benchcamp-records-")) / label
        dst.mkdir(parents=True, exist_ok=True)
        try:
            return Path(self._download(match[0].run_id, "records.parquet", dst))
        except TrackingError:
            # a point measured in trials (load.trials > 1) keeps each trial's records under trial-<k>/: its
            # records are its first trial's, as in the results store (benchcamp.results.outcome.combine_trials)
            from benchcamp.results.trials import trial_name

            path = Path(self._download(match[0].run_id, f"{trial_name(1)}/records.parquet", dst))
            return path.replace(dst / "records.parquet")

    def load_records(self, point: str | None = None):
        """The per-request records of a point (default: the headline point)."""
        from benchcamp.results.records import read_records

        with tempfile.TemporaryDirectory() as d:
            return read_records(self.records_path(point, d))

    def load_samples(self, point: str | None = None, prices=None):
        """:func:`benchcamp.metrics.request_samples` of a point's window, for compare's bootstrap."""
        from benchcamp.metrics import request_samples

        label = point or self.headline_point
        window = next((p.window for p in self.points() if p.label == label), None)
        return request_samples(self.load_records(label), window, prices)

    def _download(self, run_id: str, artifact: str, dst: str | Path) -> str:
        try:
            return client(self.uri).download_artifacts(run_id, artifact, str(dst))
        except Exception as exc:
            raise TrackingError(
                f"run {run_id}: could not download artifact {artifact!r} from {describe_uri(self.uri)}: {exc}"
            ) from exc


def _point(run) -> PointRun:
    t = run.data.tags
    reasons = t.get(f"{TAG}reasons", "-")
    try:
        t0, t1 = (float(x) for x in t.get(f"{TAG}window", "").split(","))
        window = (t0, t1) if t1 > t0 else None
    except ValueError:
        window = None
    return PointRun(
        run.info.run_id,
        t.get(f"{TAG}point", run.info.run_name),
        float(t.get(f"{TAG}level", "0") or 0),
        t.get(f"{TAG}valid") == "true",
        [] if reasons == "-" else reasons.split("; "),
        dict(run.data.metrics),
        window,
    )


def _tracked(uri: str, run) -> TrackedRun:
    return TrackedRun(
        uri,
        run.info.run_id,
        run.info.experiment_id,
        run.data.tags.get(f"{TAG}execution_id", ""),
        run.info.start_time,
        run.info.status,
        dict(run.data.tags),
        dict(run.data.metrics),
        params=dict(run.data.params),
    )


def get_run(uri: str, run_id: str) -> TrackedRun:
    """A campaign run by id; a point's run id resolves to its campaign."""
    c = client(uri)
    try:
        run = c.get_run(run_id)
    except Exception as exc:
        raise TrackingError(
            f"run {run_id!r} not found in {describe_uri(uri)}; list runs with "
            f"`mlflow ui --backend-store-uri {describe_uri(uri)}`"
        ) from exc
    role = run.data.tags.get(f"{TAG}role")
    if role == ROLE_POINT:
        run = c.get_run(run.data.tags["mlflow.parentRunId"])
    elif role != ROLE_CAMPAIGN:
        raise TrackingError(f"run {run_id} is not a benchcamp campaign run (no {TAG}role tag)")
    return _tracked(uri, run)


def _experiment_ids(c, experiment: str | None) -> list[str]:
    if experiment:
        exp = c.get_experiment_by_name(experiment)
        return [exp.experiment_id] if exp else []
    return [e.experiment_id for e in c.search_experiments(max_results=1000)]


def _newest(uri: str, filter_string: str, n: int, experiment: str | None = None) -> list:
    """The newest ``n`` MLflow runs that match ``filter_string`` in ``experiment`` (all
    experiments when None), newest first."""
    c = client(uri)
    ids = _experiment_ids(c, experiment)
    if not ids:
        return []
    return c.search_runs(ids, filter_string=filter_string, max_results=n, order_by=["attributes.start_time DESC"])


def latest_run(uri: str, experiment: str | None = None) -> TrackedRun | None:
    """The most recent campaign run of ``experiment`` (all experiments when None)."""
    runs = _newest(uri, f"tags.`{TAG}role` = '{ROLE_CAMPAIGN}'", 1, experiment)
    return _tracked(uri, runs[0]) if runs else None


def _key_filter(key: dict[str, str]) -> str:
    parts = [f"tags.`{TAG}role` = '{ROLE_CAMPAIGN}'"]
    for name, value in key.items():
        if "'" in str(value):
            raise TrackingError(f"comparability key {name}={value!r}: quotes are not supported")
        parts.append(f"tags.`{TAG}{name}` = '{value}'")
    return " AND ".join(parts)


def historical_baselines(
    cfg,
    key: dict[str, str],
    n: int | None = None,
    exclude_execution_id: str | None = None,
    uri: str | None = None,
    started_before: str | None = None,
) -> list[TrackedRun]:
    """The last ``n`` valid, finished campaign runs with the same comparability key
    (any experiment), newest first, without the current execution; with ``started_before``
    (the current campaign's ISO start), only campaigns that started before it: an older run
    judged again is compared with what came before it, not with later runs."""
    uri = uri or cfg.tracking.mlflow_uri
    n = cfg.baselines.history_runs if n is None else n
    if n <= 0:
        return []
    flt = _key_filter(key) + f" AND tags.`{TAG}valid` = 'true' AND attributes.status = 'FINISHED'"
    if started_before:
        flt += f" AND attributes.start_time < {mlflow_time(started_before)}"  # MLflow's start_time is started_at
    runs = _newest(uri, flt, n + 1)
    out = [_tracked(uri, r) for r in runs if r.data.tags.get(f"{TAG}execution_id") != exclude_execution_id]
    return out[:n]


def point_history(
    cfg,
    key: dict[str, str],
    n: int,
    exclude_execution_id: str | None = None,
    uri: str | None = None,
    started_before: str | None = None,
) -> list[TrackedRun]:
    """:func:`historical_baselines` of ``key``'s point (``key["point"]``): the last ``n`` valid, finished campaigns
    of the same deployment, workload, load mode, window rule and clock that measured that point valid, whatever
    their own headline point, newest first. A point's history is not its campaign's headline history: a change
    that moves tonight's headline to another level is still judged against what that level gave before."""
    point = key["point"]
    others = {k: v for k, v in key.items() if k != "point"}
    # campaigns that did not measure the point are skipped: read a few more than n
    runs = historical_baselines(cfg, others, 4 * n + 4, exclude_execution_id, uri, started_before)
    found: list[TrackedRun] = []
    for run in runs:  # one search per campaign read (its points): stop at the n-th that measured the point
        if len(found) == n:
            break
        if run.at(point) is not None:
            found.append(run)
    return found


def marked_baseline(cfg, key: dict[str, str], uri: str | None = None) -> TrackedRun | None:
    """``cfg.baselines.run_id`` if set, else the newest run tagged ``benchcamp.baseline=true`` with the same key."""
    uri = uri or cfg.tracking.mlflow_uri
    if cfg.baselines.run_id:
        return get_run(uri, cfg.baselines.run_id)
    runs = _newest(uri, _key_filter(key) + f" AND tags.`{TAG}baseline` = 'true'", 1)
    return _tracked(uri, runs[0]) if runs else None


def mark_baseline(uri: str, run_id: str, on: bool = True) -> None:
    client(uri).set_tag(get_run(uri, run_id).run_id, f"{TAG}baseline", str(on).lower())


def night_config(tags: Mapping[str, str], params: Mapping[str, str]) -> dict[str, str]:
    """What a night ran with, for the guard's diff across a change point (benchcamp.verdicts.guard.DIFF_FIELDS):
    from a campaign run's tags and params (:func:`benchcamp.tracking.log.campaign_tags`, the config's flat params)."""

    def tag(name: str) -> str:
        return str(tags.get(TAG + name, ""))

    out = {
        "engine_version": tag("engine_version"),
        "image": str(params.get("engine.container_image", "")),
        "workload_digest": tag("workload_digest"),
        "git_commit": tag("git_commit"),
        "hardware": f"{tag('gpu')} x{tag('gpu_count')}",
        "benchcamp_version": tag("benchcamp_version"),
    }
    # every engine setting on its own line of the diff (engine.max_num_seqs 8 -> 4), not one opaque string
    out |= {k: str(v) for k, v in params.items() if k.startswith("engine.") and k != "engine.container_image"}
    return out


def nights(runs: Sequence[TrackedRun], metric: str, point: str | None = None) -> list[Night]:
    """``runs`` (newest first, as :func:`historical_baselines` returns them) as the guard's nights of ``metric``
    at ``point`` (each run's headline when None), oldest first; a run without the metric there is left out."""
    out = []
    for r in reversed(list(runs)):
        measured = r.at(point) if point else None
        value = measured.summary.get(metric) if measured else (None if point else r.headline.get(metric))
        if value is None or not math.isfinite(float(value)):
            continue
        out.append(Night(r.execution_id, float(value), (), r.tag("started_at"), night_config(r.tags, r.params)))
    return out
