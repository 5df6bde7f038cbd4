"""The nightly regression guard: change points over a headline metric's nightly series. Pure: data in,
verdicts out.

One series = one metric of one campaign lineage at one point (the comparability key with its point,
:func:`benchcamp.verdicts.compare.comparability_key`), oldest night first, the night being judged last.
A night's value is the mean of its trials when it has several (``load.trials``), else its one figure.

The rule (what ``bench/regression_guard.py`` measures against series of known truth):

1. Change points: Apache Otava's E-Divisive means with its Student t-test merge step
   (``otava.analysis.compute_change_points``) over the series, at ``max_pvalue`` and with
   ``min_magnitude`` = the relative threshold (``regression.relative_threshold`` / ``per_metric``).
2. The latest change point decides. With ``confirm_nights`` or more nights at or after it, each of
   its first ``confirm_nights`` nearer the new level than the old, the shift persists: ``regressed``
   or ``improved`` by the metric's direction, from the night it began. Otherwise: ``suspected``.
3. No change point at the tail: the night is ``suspected`` when it alone breaches the noise band of
   the nights since the last change point (their median +- ``band_k`` robust standard deviations,
   and beyond the threshold), else ``unchanged``.
4. Fewer than ``min_nights`` earlier nights: ``insufficient``, saying what is lacking.

An alarm opens on the night a series first ends ``regressed`` (judging the series without its last
night tells whether it already was) and closes when it no longer does: one notification per shift,
recomputed from the series alone, so no alarm state is kept anywhere that could drift from the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchcamp.metrics import HEADLINE

# A noise band wider than this (half-width relative to its median) is said in an "unchanged" verdict's reason.
WIDE_BAND = 0.25
STATUSES = ("unchanged", "suspected", "regressed", "improved", "insufficient")
CONFIRMED = ("regressed", "improved")
# What the diff across a change point shows, in this order (keys of Night.config).
DIFF_FIELDS = (
    "engine_version",
    "engine_flags",
    "image",
    "workload_digest",
    "git_commit",
    "hardware",
    "benchcamp_version",
)


@dataclass(frozen=True)
class GuardRule:
    """The guard's parameters; the defaults are the ones bench/regression_guard.py measured."""

    threshold: float = 0.05
    max_pvalue: float = 0.001
    confirm_nights: int = 2
    min_nights: int = 3
    band_k: float = 4.0
    # Otava's split window: the whole judged history in one window (a window of 30 split at 15 judged a
    # tail step against 15 nights instead of all of them: fewer detections, more false alarms, measured)
    window_len: int = 60
    history_nights: int = 60


@dataclass(frozen=True)
class Night:
    """One night of one series: its figure (or its trials' figures) and what it ran with."""

    night: str  # the execution id (or any label that names the night)
    value: float
    trials: tuple[float, ...] = ()
    started_at: str = ""
    config: Mapping[str, str] = field(default_factory=dict)

    @property
    def figure(self) -> float:
        finite = [t for t in self.trials if math.isfinite(t)]
        return float(np.mean(finite)) if finite else float(self.value)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first night of the new level
    night: str
    before: float  # mean of the segment before it
    after: float  # mean of the segment from it on
    pvalue: float
    diff: dict[str, tuple[str, str]]
    # 95% interval of delta_rel (normal approximation over the two segments' nights)
    ci: tuple[float, float] = (math.nan, math.nan)

    @property
    def delta_rel(self) -> float:
        return self.after / self.before - 1.0 if self.before else math.nan


@dataclass
class SeriesVerdict:
    metric: str
    status: str
    reason: str
    nights: int
    current: float = math.nan
    baseline_value: float = math.nan
    delta_rel: float = math.nan
    band: tuple[float, float] = (math.nan, math.nan)
    ci: tuple[float, float] = (math.nan, math.nan)
    began: str = ""
    began_index: int = -1
    diff: dict[str, tuple[str, str]] = field(default_factory=dict)
    change_points: list[ChangePoint] = field(default_factory=list)
    new_alarm: bool = False  # this night opens the alarm (the series without it was not regressed)
    closed_alarm: bool = False  # the series without this night was regressed; with it, no longer

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "status": self.status,
            "reason": self.reason,
            "nights": self.nights,
            "current": _json_num(self.current),
            "baseline_value": _json_num(self.baseline_value),
            "delta_rel": _json_num(self.delta_rel),
            "band": [_json_num(b) for b in self.band],
            "began": self.began,
            "diff": {k: list(v) for k, v in self.diff.items()},
            "change_points": [
                {"night": c.night, "index": c.index, "delta_rel": _json_num(c.delta_rel), "pvalue": _json_num(c.pvalue)}
                for c in self.change_points
            ],
            "new_alarm": self.new_alarm,
            "closed_alarm": self.closed_alarm,
        }


def _json_num(x: float) -> float | None:
    """NaN and infinities become null: the verdicts go to JSON files and XCom."""
    return float(x) if math.isfinite(x) else None


def change_points(values: Sequence[float] | np.ndarray, rule: GuardRule) -> list[tuple[int, float]]:
    """(index, p-value) of Otava's change points of ``values``, oldest first."""
    from otava.analysis import compute_change_points

    if len(values) < 2:
        return []
    found, _ = compute_change_points(
        [float(v) for v in values],
        window_len=rule.window_len,
        max_pvalue=rule.max_pvalue,
        min_magnitude=rule.threshold,
    )
    cps = sorted((int(c.index), float(c.stats.pvalue)) for c in found if 0 < int(c.index) < len(values))
    return [
        (_refine(values, i, cps[k - 1][0] if k else 0, cps[k + 1][0] if k + 1 < len(cps) else len(values)), p)
        for k, (i, p) in enumerate(cps)
    ]


REFINE_NIGHTS = 3


def _refine(values: Sequence[float] | np.ndarray, i: int, lo: int, hi: int) -> int:
    """The night a shift began: E-Divisive's split maximises an energy distance weighted by the segments'
    sizes, which pulls a change near the tail a few nights early; within REFINE_NIGHTS of it (and between
    its neighbours), the split with the largest two-sample t statistic."""
    x = np.asarray(values, dtype=float)

    def t(j: int) -> float:
        a, b = x[lo:j], x[j:hi]
        pooled = (np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / max(len(a) + len(b) - 2, 1)
        return abs(a.mean() - b.mean()) / math.sqrt(max(pooled, 1e-300) * (1 / len(a) + 1 / len(b)))

    candidates = [j for j in range(i - REFINE_NIGHTS, i + REFINE_NIGHTS + 1) if lo + 2 <= j <= hi - 1]
    return max(candidates, key=t) if candidates else i


def config_diff(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The fields of DIFF_FIELDS (then any other) whose values differ: {field: (before, after)}."""
    keys = [k for k in DIFF_FIELDS if k in before or k in after]
    keys += sorted(k for k in set(before) | set(after) if k not in DIFF_FIELDS)
    return {k: (str(before.get(k, "")), str(after.get(k, ""))) for k in keys if before.get(k) != after.get(k)}


def judge_series(metric: str, nights: Sequence[Night], rule: GuardRule = GuardRule()) -> SeriesVerdict:
    """The verdict on the last night of ``nights`` (oldest first), with the alarm it opens or closes."""
    if not nights or not math.isfinite(nights[-1].figure):  # an idle engine's NaN: nothing to judge tonight
        return SeriesVerdict(metric, "insufficient", f"this night has no {HEADLINE[metric].label}", len(nights))
    nights = [n for n in nights if math.isfinite(n.figure)][-rule.history_nights :]
    v = _judge(metric, nights, rule)
    if len(nights) > 1 and v.status != "insufficient":
        before = _judge(metric, nights[:-1], rule).status
        v.new_alarm = v.status == "regressed" and before != "regressed"
        v.closed_alarm = before == "regressed" and v.status != "regressed"
    return v


def _judge(metric: str, nights: Sequence[Night], rule: GuardRule) -> SeriesVerdict:
    m = HEADLINE[metric]
    label = m.label
    x = np.array([n.figure for n in nights], dtype=float)
    v = SeriesVerdict(metric, "insufficient", "", len(x), current=float(x[-1]) if len(x) else math.nan)
    earlier = len(x) - 1
    if earlier < rule.min_nights:
        v.reason = (
            f"{max(earlier, 0)} earlier night{'s' if earlier != 1 else ''}; {rule.min_nights} needed to judge "
            f"the {label} at ±{rule.threshold:.0%}"
        )
        return v
    cps = [_change_point(nights, x, i, p, prev) for (i, p), prev in _with_previous(change_points(x, rule))]
    # Otava's magnitude is the larger of the forward and backward change; a verdict's is the forward one
    cps = [c for c in cps if abs(c.delta_rel) > rule.threshold]
    v.change_points = cps
    start = cps[-1].index if cps else 0
    if cps:
        c = cps[-1]
        after = len(x) - c.index
        v.baseline_value, v.delta_rel, v.ci = c.before, c.delta_rel, c.ci
        v.began, v.began_index, v.diff = c.night, c.index, c.diff
        bad = not m.better(c.after, c.before)
        word = "regression" if bad else "improvement"
        since = (
            f"{word} of {_pct(c.delta_rel)} [95% CI {_pct(c.ci[0])}, {_pct(c.ci[1])}] from night {c.night} on "
            f"(p={c.pvalue:.2g})"
        )
        # persisted: each of its first confirm_nights nights nearer the new level than the old one
        # (one slow night beside a normal one also moves the mean of two)
        first = x[c.index : c.index + rule.confirm_nights]
        held = bool(np.all(np.abs(first - c.after) < np.abs(first - c.before)))
        if after >= rule.confirm_nights and held:
            v.status = "regressed" if bad else "improved"
            v.reason = f"{since}; persisted {after} nights" + _diff_words(c.diff)
        elif after >= rule.confirm_nights:
            v.status = "suspected"
            v.reason = f"{since}; but its first {rule.confirm_nights} nights do not all hold it" + _diff_words(c.diff)
        else:
            v.status = "suspected"
            v.reason = (
                f"{since}; {after} night{'s' if after != 1 else ''} so far, {rule.confirm_nights} confirm it"
                + _diff_words(c.diff)
            )
        if c.index < len(x) - 1:
            v.band = noise_band(x[c.index : -1], rule)
        return v
    seg = x[start:-1]
    v.band = lo, hi = noise_band(seg, rule)
    centre = float(np.median(seg))
    v.baseline_value = centre
    v.delta_rel = float(x[-1] / centre - 1.0) if centre else math.nan
    outside = not (lo <= x[-1] <= hi) and abs(v.delta_rel) > rule.threshold
    if outside:
        bad = not m.better(float(x[-1]), centre)
        v.status = "suspected"
        v.reason = (
            f"{'worse' if bad else 'better'} by {_pct(v.delta_rel)} than the median of {len(seg)} nights, "
            f"outside their noise band [{m.fmt.format(lo)}, {m.fmt.format(hi)}]: one night; "
            f"{rule.confirm_nights} confirm a shift"
        )
    else:
        v.status = "unchanged"
        v.reason = (
            f"{_pct(v.delta_rel)} vs the median of {len(seg)} nights, within their noise band "
            f"[{m.fmt.format(lo)}, {m.fmt.format(hi)}] or ±{rule.threshold:.0%}"
        )
        if centre and (hi - lo) / 2 > WIDE_BAND * abs(centre):
            # few, scattered nights: a large move can sit inside their band; say so rather than let
            # "unchanged" read as "nothing moved"
            v.reason += f"; a band of ±{(hi - lo) / 2 / abs(centre):.0%}: these nights are too scattered to judge it"
    return v


def _with_previous(cps: list[tuple[int, float]]) -> list[tuple[tuple[int, float], int]]:
    """Each change point with the index where its 'before' segment starts (the previous one, or 0)."""
    return [(c, cps[i - 1][0] if i else 0) for i, c in enumerate(cps)]


def _change_point(nights: Sequence[Night], x: np.ndarray, i: int, pvalue: float, prev: int) -> ChangePoint:
    a, b = x[prev:i], x[i:]
    before, after = float(np.mean(a)), float(np.mean(b))
    # one night after: its spread is taken as the nights before's
    sd_a = float(np.std(a, ddof=1)) if len(a) > 1 else 0.0
    sd_b = float(np.std(b, ddof=1)) if len(b) > 1 else sd_a
    half = 1.96 * math.sqrt(sd_a**2 / len(a) + sd_b**2 / len(b)) / abs(before) if before else math.nan
    delta = after / before - 1.0 if before else math.nan
    return ChangePoint(
        index=i,
        night=nights[i].night,
        before=before,
        after=after,
        pvalue=pvalue,
        diff=config_diff(nights[i - 1].config, nights[i].config),
        ci=(delta - half, delta + half),
    )


def noise_band(values: Sequence[float] | np.ndarray, rule: GuardRule) -> tuple[float, float]:
    """median +- band_k robust standard deviations (1.4826 MAD), never narrower than the threshold."""
    seg = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if len(seg) == 0:
        return (math.nan, math.nan)
    med = float(np.median(seg))
    sd = 1.4826 * float(np.median(np.abs(seg - med)))
    half = max(rule.band_k * sd, rule.threshold * abs(med))
    return (med - half, med + half)


def _diff_words(diff: Mapping[str, tuple[str, str]]) -> str:
    if not diff:
        return "; nothing in the configuration changed across it"
    return "; changed across it: " + ", ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in diff.items())


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1%}"
