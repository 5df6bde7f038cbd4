"""Repeated trials of one point (``load.trials: K``): each trial's figures, and the point's figure over them.

A point measured K times keeps each trial in its own folder (``<label>/trial-<k>/``: records.parquet,
point.json, summary.json). The point's summary is the trials' aggregate: every figure is the mean over the
trials that have it (a 0/1 flag such as ``steady`` holds only when it holds in every trial), and the
headline figures (:func:`trial_metrics`) carry a confidence interval over the trial values
(:class:`FigureInterval`), all in :class:`PointTrials`, written to the point's summary.json under
:data:`TRIALS_KEY`.

The interval is Student's t over the K trial values: mean +- t(1 - alpha/2, K - 1) * s / sqrt(K), s the
sample standard deviation (K - 1 in the denominator). Each trial's figure is itself an aggregate of hundreds
of requests, so trial values are close to normal, which is what the t-interval assumes; with the few trials
a nightly affords (3-5), a bootstrap over trial values has almost no resamples to draw from (10 distinct
ones for K=3) and its percentile interval stays inside [min, max], far narrower than the noise it should
cover. AIPerf's multi-run confidence report uses the same t-interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

TRIALS_KEY = "trials"  # the PointTrials block in a point's summary.json (and campaign.json)
INTERVAL = "student-t over trial values"


@cache
def trial_metrics() -> tuple[str, ...]:
    """The figures whose spread over trials is reported: the headline metrics and the sweep table's.
    A function, not a constant: benchcamp.metrics loads pandas, which a DAG file's parse must not."""
    from benchcamp.metrics import HEADLINE, Metric

    return (
        *HEADLINE,
        Metric.THROUGHPUT_PER_GPU_SPAN,
        Metric.OUTPUT_THROUGHPUT_PER_GPU,
        Metric.TTFT_P50,
        Metric.CACHE_HIT_RATE_CLIENT,
        Metric.COST_PER_GPU_HOUR,
        Metric.MARGIN_PER_GPU_HOUR,
        Metric.REQUESTS,
    )


def trial_name(k: int) -> str:
    """The folder of trial ``k`` (1-based) inside its point's folder."""
    return f"trial-{k}"


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


@dataclass(frozen=True)
class FigureInterval:
    """One figure over the trials: the values in trial order (None where a trial has no finite value) and,
    over the finite ones (``n``), their mean, median, sample standard deviation and the t-interval of the
    mean at ``confidence``. Fewer than 2 values: no spread, no interval (None)."""

    values: tuple[float | None, ...]
    n: int
    mean: float | None
    median: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    t_critical: float | None

    @property
    def half_width_rel(self) -> float | None:
        """The interval's half width relative to the mean (e.g. 0.03 = +-3%); None without an interval."""
        if self.ci_high is None or self.ci_low is None or not self.mean:
            return None
        return (self.ci_high - self.ci_low) / 2 / abs(self.mean)

    @classmethod
    def of(cls, values: Sequence[float | None], confidence: float) -> FigureInterval:
        vals = tuple(_finite(v) for v in values)
        xs = [v for v in vals if v is not None]
        n = len(xs)
        if n == 0:
            return cls(vals, 0, None, None, None, None, None, None)
        mean = statistics.fmean(xs)
        median = statistics.median(xs)
        if n < 2:
            return cls(vals, n, mean, median, None, None, None, None)
        from scipy.stats import t

        std = statistics.stdev(xs)
        tc = float(t.ppf(1 - (1 - confidence) / 2, n - 1))
        half = tc * std / math.sqrt(n)
        return cls(vals, n, mean, median, std, mean - half, mean + half, tc)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FigureInterval:
        return cls(**{**d, "values": tuple(d["values"])})


@dataclass(frozen=True)
class TrialFigures:
    """One trial of a point: its validity and its :func:`trial_metrics` figures (the whole summary is in the
    trial folder's summary.json)."""

    trial: int  # 1-based, in the order the trials ran
    folder: str  # relative to the point's folder
    valid: bool
    reasons: tuple[str, ...]
    figures: dict[str, float | None]
    aborted: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialFigures:
        return cls(**{**d, "reasons": tuple(d["reasons"])})


@dataclass(frozen=True)
class PointTrials:
    """A point's trials and the point's figures over them: what the summary table's CI column, MLflow's
    ``trial/`` and ``ci_*/`` metrics, the report and a verdict's between-trial variance read."""

    asked: int  # load.trials
    confidence: float  # regression.confidence
    trials: tuple[TrialFigures, ...]
    figures: dict[str, FigureInterval] = field(default_factory=dict)
    interval: str = INTERVAL
    statistic: str = "mean"  # the point's figure in its summary

    @property
    def measured(self) -> int:
        return len(self.trials)

    def values(self, metric: str) -> list[float | None]:
        """``metric`` per trial, in trial order."""
        return [t.figures.get(metric) for t in self.trials]

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PointTrials:
        return cls(
            asked=int(d["asked"]),
            confidence=float(d["confidence"]),
            trials=tuple(TrialFigures.from_dict(t) for t in d["trials"]),
            figures={k: FigureInterval.from_dict(v) for k, v in (d.get("figures") or {}).items()},
            interval=str(d.get("interval", INTERVAL)),
            statistic=str(d.get("statistic", "mean")),
        )


def point_trials(trials: Sequence[TrialFigures], asked: int, confidence: float) -> PointTrials:
    """The trials block of a point from its measured trials (any order), with every figure's interval."""
    ordered = tuple(sorted(trials, key=lambda t: t.trial))
    figures = {m: FigureInterval.of([t.figures.get(m) for t in ordered], confidence) for m in trial_metrics()}
    return PointTrials(asked=asked, confidence=confidence, trials=ordered, figures=figures)


def trial_figures(
    k: int, valid: bool, reasons: Sequence[Any], summary: dict[str, Any], aborted: str | None = None
) -> TrialFigures:
    """Trial ``k``'s :func:`trial_metrics` figures from its summary."""
    return TrialFigures(
        trial=k,
        folder=trial_name(k),
        valid=bool(valid),
        reasons=tuple(map(str, reasons)),
        figures={m: _finite(summary.get(m)) for m in trial_metrics()},
        aborted=aborted,
    )


def aggregate_summary(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The point's summary over its trials' summaries (in trial order): numbers -> the mean of the finite
    values (NaN when none is), a 0/1 flag -> its minimum (it holds for the point only when every trial
    holds it), anything else -> the common value, or each trial's where they differ."""
    keys: dict[str, None] = {}
    for s in summaries:
        keys.update(dict.fromkeys(s))
    out: dict[str, Any] = {}
    for key in keys:
        vals = [s.get(key) for s in summaries]
        present = [v for v in vals if v is not None]
        if present and all(isinstance(v, bool) for v in present):
            out[key] = all(present)
        elif present and all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in present):
            out[key] = min(present)
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            xs = [x for x in (_finite(v) for v in present) if x is not None]
            out[key] = statistics.fmean(xs) if xs else math.nan
        elif all(v == present[0] for v in present):
            out[key] = present[0] if present else None
        else:
            out[key] = "; ".join(f"{trial_name(k)}: {v}" for k, v in enumerate(vals, 1) if v not in (None, ""))
    return out


def ci_text(trials: PointTrials | None, metric: str, pattern: str) -> str:
    """``mean [low, high]`` of ``metric`` over a point's trials, formatted with ``pattern``; "" without trials,
    ``mean (1 trial)`` when there is no interval."""
    if trials is None or metric not in trials.figures:
        return ""
    f = trials.figures[metric]
    if f.mean is None:
        return "-"
    if f.ci_low is None or f.ci_high is None:
        return f"{pattern.format(f.mean)} ({f.n} trial)"
    return f"{pattern.format(f.mean)} [{pattern.format(f.ci_low)}, {pattern.format(f.ci_high)}]"
