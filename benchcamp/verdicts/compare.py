"""Noise-aware verdicts of a run against its baselines. Pure: data in, verdicts out.

``current``  = ``{"summary": {...}, "samples": per-request samples, "key": {...}}``
``baseline`` = ``{"name", "kind": "published"|"historical"|"marked", "key", "summary",
               optional "samples", optional "history": [summaries of past runs]}``

``samples`` is :func:`benchcamp.metrics.request_samples` output (a DataFrame or a
dict of arrays with ``ok, ttft, tpot, total`` and optionally ``revenue``), or a
raw records DataFrame (then every row counts; window it first). ``key`` is the
comparability key (:func:`comparability_key`).

For each headline metric the verdict is ``improved``, ``unchanged``,
``regressed`` or ``not_comparable``:

1. Comparable only when every key field matches: workload digest, model, GPU
   type, GPU count, engine kind, and the point measured (the headline point's
   label: load mode and level or rate, the load mode, the window rule, the
   clock) when the key has it. A simulated engine is never compared with a
   real-hardware result (published or not). A field the baseline does not
   state makes it not comparable on that field.
2. The relative change ``delta_rel = (current - baseline) / |baseline|`` must
   exceed ``regression.relative_threshold`` (``regression.per_metric`` overrides
   it per metric) in the metric's bad (or good) direction.
3. And it must be significant, by every evidence available:
   - bootstrap: ``bootstrap_samples`` resamples of the requests (seeded, so
     verdicts are reproducible) give a ``confidence`` interval of
     ``delta_rel``; it must lie entirely on one side of 0. TTFT P90 and the
     P90 per-user rate (1 / P90 of TPOT) are recomputed from resampled
     requests; error rate from resampled success flags; throughput and
     revenue are scaled by the resampled requests' token (revenue) sum over
     the observed one, i.e. the variability of the request mix in the window.
     Both sides are resampled when both have samples; otherwise the
     baseline value is taken as exact. Above 5,000 requests the bootstrap's
     large-n limit is used (normal resampled sums, binomial quantile ranks):
     the same interval in O(n) instead of O(n * B).
   - history: with >= 3 historical runs the baseline value is their mean, and
     the change must exceed ``k * std`` of their values, k = z(confidence) *
     sqrt(1 + 1/n) (a prediction interval for one new run).
   Without any evidence (no samples, < 3 runs) a change is not flagged; the
   reason says so.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from benchcamp.config import Config, Regression
from benchcamp.errors import ConfigError
from benchcamp.metrics import HEADLINE, HeadlineMetric, Metric, request_samples
from benchcamp.planning.capacity import TierField
from benchcamp.verdicts.baselines import KEY_FIELDS, POINT_FIELDS, load_published
from benchcamp.verdicts.guard import GuardRule, Night, judge_series

__all__ = [
    "Verdict",
    "compare",
    "any_regression",
    "format_table",
    "comparability_key",
    "comparable",
    "historical_baseline",
    "load_published",
    "VERDICTS",
    "guard_verdicts",
]

VERDICTS = ("improved", "unchanged", "regressed", "suspected", "insufficient", "not_comparable")
SEED = 20250226  # fixed: the same data always gets the same verdict
MIN_HISTORY = 3
_MAX_BATCH_ELEMENTS = 4_000_000  # bootstrap memory bound (floats per batch)
EXACT_BOOTSTRAP_MAX = 5_000  # above this many requests, the bootstrap's large-n limit (same answer, O(n))

_FIELD_WORDS = {
    "workload_digest": "workload",
    "model": "model",
    "gpu": "GPU type",
    "gpu_count": "GPU count",
    "engine_kind": "engine",
    "point": "point",
    "load_mode": "load mode",
    "window_rule": "window rule",
    "clock": "clock",
}


@dataclass
class Verdict:
    metric: str
    baseline: str
    current: float
    baseline_value: float
    delta_rel: float
    ci_low: float
    ci_high: float
    verdict: str
    reason: str
    baseline_kind: str = ""
    # total_tokens_per_s_per_gpu: the throughput definition compared (window | span), the baseline's;
    # p90_user_tokens_per_s: the per-user rate compared (tpot | e2e_normalized), the baseline's
    definition: str = ""
    # the nightly guard's (benchcamp.verdicts.guard): the night a shift began, the config diff across it,
    # and the alarm: "opened" (this night confirms it: exit 3, one notification), "open" (confirmed on an
    # earlier night and still standing: said once already), "closed" (this night ends it)
    began: str = ""
    diff: dict[str, Any] = field(default_factory=dict)
    alarm: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        """A verdict read back from JSON (verdicts.json, XCom), where a figure that was not measured (NaN) is
        null (benchcamp.results.jsonsafe): NaN again, as :func:`compare` made it."""
        floats = ("current", "baseline_value", "delta_rel", "ci_low", "ci_high")
        fields: dict[str, Any] = {k: (math.nan if k in floats and v is None else v) for k, v in d.items()}
        return cls(**fields)


# ---------------------------------------------------------------------------
# comparability


def comparability_key(cfg: Config, workload_digest: str, point: str | None = None) -> dict[str, Any]:
    """The key two runs must share to be compared; with ``point`` (a point's label, e.g. ``c8``: load mode
    and level or rate), what was measured there too: the load mode, the window rule and the clock.
    Without it (a capacity search, judged per tier) the key names the deployment and the workload only."""
    key = {
        "workload_digest": workload_digest,
        "model": cfg.engine.model,
        "gpu": cfg.hardware.gpu,
        "gpu_count": int(cfg.hardware.gpu_count),
        "engine_kind": cfg.engine.kind,
    }
    if point is not None:
        key |= {"point": point, "load_mode": cfg.load.mode, "window_rule": window_rule(cfg), "clock": cfg.load.clock}
    return key


def window_rule(cfg: Config) -> str:
    """What decides a point's measurement window: when it opens, how long it lasts, what ends it early."""
    ld = cfg.load
    opens = "at_warmup" if ld.clock == "wall" else ld.steady.window_opens  # the wall clock opens at warmup_s
    ends = f", at most {ld.max_requests} requests" if ld.max_requests else ""
    return f"{opens} {ld.warmup_s:g}s, {ld.duration_s:g}s{ends}"


def comparable(
    current_key: Mapping[str, Any], baseline_key: Mapping[str, Any], baseline_kind: str = "historical"
) -> tuple[bool, str]:
    """(comparable?, reason). The reason lists every field that differs."""
    ce, be = current_key.get("engine_kind"), baseline_key.get("engine_kind")
    what = "a published real-hardware result" if baseline_kind == "published" else "a real-hardware run"
    if (ce == "simulated") != (be == "simulated"):
        sim_side = "this run" if ce == "simulated" else "the baseline"
        return False, (
            f"simulated vs real hardware: {sim_side} used the simulated engine and the other is "
            f"{what if ce == 'simulated' else 'a real-hardware run'}; simulated results are never "
            "compared with real hardware"
        )
    reasons = []
    # the point's fields count when this run names its point: a baseline must name the same one
    fields = KEY_FIELDS + tuple(f for f in POINT_FIELDS if f in current_key)
    for f in fields:
        c, b = current_key.get(f), baseline_key.get(f)
        word = _FIELD_WORDS[f]
        if b is None:
            reasons.append(f"the baseline does not state its {word}")
        elif c is None:
            reasons.append(f"this run does not record its {word}")
        elif _norm(c) != _norm(b):
            shown = (str(c)[:12], str(b)[:12]) if f == "workload_digest" else (c, b)
            reasons.append(f"other {word} ({shown[0]} here, {shown[1]} in the baseline)")
    return (not reasons), "; ".join(reasons)


def _norm(v: Any) -> Any:
    return v.casefold() if isinstance(v, str) else v


# ---------------------------------------------------------------------------
# samples and bootstrap


def _as_samples(samples: Any) -> pd.DataFrame | None:
    if samples is None:
        return None
    df = samples if isinstance(samples, pd.DataFrame) else pd.DataFrame(dict(samples))
    if "first_token_s" in df.columns:  # raw records
        df = request_samples(df)
    return df


def _column(df: pd.DataFrame | None, name: str, ok_only: bool = False) -> np.ndarray | None:
    if df is None or name not in df.columns:
        return None
    x = df[name].to_numpy(dtype=float)
    if ok_only and "ok" in df.columns:
        x = x[df["ok"].to_numpy(dtype=bool)]
    return x


def _bootstrap(
    metric: str, df: pd.DataFrame | None, value: float, B: int, rng: np.random.Generator
) -> np.ndarray | None:
    """B bootstrap replicates of ``metric`` from per-request samples; None when impossible."""
    if df is None or not math.isfinite(value):
        return None
    if metric in (Metric.TTFT_P90, Metric.P90_USER_RATE):
        x = _column(df, "ttft" if metric == Metric.TTFT_P90 else "tpot", ok_only=True)
        if x is None:
            return None
        x = x[np.isfinite(x)]
        reduce = (
            (lambda m: np.percentile(m, 90, axis=1))
            if metric == Metric.TTFT_P90
            else (lambda m: 1.0 / np.percentile(m, 90, axis=1))
        )
    elif metric == Metric.ERROR_RATE:
        if "ok" not in df.columns:
            return None
        x = (~df["ok"].to_numpy(dtype=bool)).astype(float)
        reduce = lambda m: m.mean(axis=1)  # noqa: E731
    elif metric in (Metric.THROUGHPUT_PER_GPU, Metric.REVENUE_PER_GPU_HOUR):
        col = "revenue" if metric == Metric.REVENUE_PER_GPU_HOUR and "revenue" in df.columns else "total"
        x = _column(df, col)
        if x is None:
            return None
        x = np.nan_to_num(x)
        base = x.sum()
        if base <= 0:
            return None
        reduce = lambda m: value * m.sum(axis=1) / base  # noqa: E731
    else:
        return None
    n = x.size
    if n < 2:
        return None
    if n > EXACT_BOOTSTRAP_MAX:
        return _bootstrap_large(metric, x, value, B, rng)
    out = np.empty(B)
    step = max(1, _MAX_BATCH_ELEMENTS // n)
    for i in range(0, B, step):
        b = min(step, B - i)
        out[i : i + b] = reduce(x[rng.integers(0, n, size=(b, n))])
    return out


def _bootstrap_large(metric: str, x: np.ndarray, value: float, B: int, rng: np.random.Generator) -> np.ndarray:
    """The bootstrap's large-n limit, O(n log n + B) instead of O(n * B).

    A resampled sum is normal with the sample's mean and variance (CLT); the
    resample's q-quantile sits at rank q*(n-1) + N(0, n*q*(1-q)) of the sorted
    sample (binomial count of resampled values below each order statistic).
    """
    n = x.size
    if metric in (Metric.TTFT_P90, Metric.P90_USER_RATE):
        xs = np.sort(x)
        q = 0.9
        rank = np.clip(q * (n - 1) + rng.normal(0.0, math.sqrt(n * q * (1 - q)), B), 0, n - 1)
        lo = np.floor(rank).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        p90 = xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)
        return p90 if metric == Metric.TTFT_P90 else 1.0 / p90
    if metric == Metric.ERROR_RATE:
        return np.clip(x.mean() + rng.normal(0.0, x.std() / math.sqrt(n), B), 0.0, 1.0)
    total = x.sum()
    return value * (1.0 + rng.normal(0.0, x.std() * math.sqrt(n) / total, B))


def _rel(cur: np.ndarray | float, base: np.ndarray | float) -> np.ndarray:
    cur, base = np.asarray(cur, dtype=float), np.asarray(base, dtype=float)
    diff = cur - base
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(base != 0, diff / np.abs(base), np.sign(diff) * np.inf)
    return np.where(diff == 0, 0.0, rel)


# ---------------------------------------------------------------------------
# verdicts


def compare(
    current: Mapping[str, Any], baselines: Iterable[Mapping[str, Any]], regression: Regression | None = None
) -> list[Verdict]:
    """One verdict per (baseline, headline metric); see the module doc for the rules. ``regression``: the
    config's section (unset: its defaults)."""
    regression = regression or Regression()
    threshold = float(regression.relative_threshold)
    per_metric = dict(regression.per_metric)
    unknown = set(per_metric) - set(HEADLINE)
    if unknown:
        raise ConfigError(f"regression.per_metric: unknown metric(s) {sorted(unknown)}; known: {', '.join(HEADLINE)}")
    confidence = float(regression.confidence)
    B = int(regression.bootstrap_samples)
    if "summary" not in current or "key" not in current:
        raise ValueError("compare: current needs 'summary' and 'key' (see benchcamp.verdicts.compare docs)")

    cur_summary, cur_key = current["summary"], current["key"]
    cur_samples = _as_samples(current.get("samples"))
    verdicts: list[Verdict] = []
    for b in baselines:
        name, kind = str(b.get("name", "baseline")), str(b.get("kind", "historical"))
        ok, why = comparable(cur_key, b.get("key") or {}, kind)
        base_samples = _as_samples(b.get("samples"))
        definition = str(b.get("throughput_definition") or (b.get("meta") or {}).get("throughput_definition") or "")
        rate_def = _interactivity_definition(b)
        for m in HEADLINE.values():
            span = m.name == Metric.THROUGHPUT_PER_GPU and definition == "span"
            e2e_rate = m.name == Metric.P90_USER_RATE and rate_def == "e2e_normalized"
            # like with like: a baseline published with AgentX's span definition meets the run's span figure,
            # one published as E2E-normalized interactivity the run's figure of that definition
            c = _num(
                cur_summary.get(
                    Metric.THROUGHPUT_PER_GPU_SPAN if span else Metric.E2E_INTERACTIVITY_P90 if e2e_rate else m.name
                )
            )
            bv = _num((b.get("summary") or {}).get(m.name))
            history = [v for v in (_num(h.get(m.name)) for h in b.get("history") or []) if math.isfinite(v)]
            if len(history) >= MIN_HISTORY:
                bv = float(np.mean(history))
            delta = float(_rel(c, bv)) if math.isfinite(c) and math.isfinite(bv) else math.nan
            v = Verdict(m.name.value, name, c, bv, delta, math.nan, math.nan, "not_comparable", "", kind)
            if m.name == Metric.THROUGHPUT_PER_GPU:
                v.definition = "span" if span else "window"
            elif m.name == Metric.P90_USER_RATE:
                v.definition = rate_def
            if not ok:
                v.reason = why
            elif not math.isfinite(bv):
                v.reason = f"the baseline has no value for {m.name}"
            elif not math.isfinite(c):
                v.reason = f"this run has no value for {m.name}"
            else:
                _judge(
                    v,
                    m,
                    threshold=float(per_metric.get(m.name, threshold)),
                    confidence=confidence,
                    B=B,
                    # the bootstrap rescales the window's token sum: not the span figure
                    # and the samples' per-user rate is the TPOT one
                    cur_samples=None if span or e2e_rate else cur_samples,
                    base_samples=None if len(history) >= MIN_HISTORY or span or e2e_rate else base_samples,
                    history=history,
                )
            verdicts.append(v)
    return verdicts


def _interactivity_definition(baseline: Mapping[str, Any]) -> str:
    """Which per-user rate a baseline's p90_user_tokens_per_s is (benchcamp.metrics.INTERACTIVITY_DEFINITIONS):
    ``tpot`` (the P90 per-user rate, the default) or ``e2e_normalized`` (AgentX's E2E-normalized interactivity)."""
    meta = baseline.get("meta") or {}
    return str(baseline.get("interactivity_definition") or meta.get("interactivity_definition") or "tpot")


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _judge(
    v: Verdict,
    m: HeadlineMetric,
    threshold: float,
    confidence: float,
    B: int,
    cur_samples: pd.DataFrame | None,
    base_samples: pd.DataFrame | None,
    history: list[float],
) -> None:
    seed = [SEED, zlib.crc32(m.name.encode())]
    cur_boot = _bootstrap(m.name, cur_samples, v.current, B, np.random.default_rng(seed + [0]))
    base_boot = _bootstrap(m.name, base_samples, v.baseline_value, B, np.random.default_rng(seed + [1]))
    if cur_boot is not None or base_boot is not None:
        rel = _rel(v.current if cur_boot is None else cur_boot, v.baseline_value if base_boot is None else base_boot)
        alpha = 1.0 - confidence
        # inverted_cdf: never interpolates between an infinite and a finite replicate
        v.ci_low, v.ci_high = (float(q) for q in np.quantile(rel, [alpha / 2, 1 - alpha / 2], method="inverted_cdf"))

    change = v.current - v.baseline_value
    pct = _pct(v.delta_rel)
    if change == 0 or abs(change) < m.min_abs_change:
        v.verdict, v.reason = (
            "unchanged",
            ("no change" if change == 0 else f"change {change:+.4g} is below the metric's floor {m.min_abs_change:g}"),
        )
        return
    better = m.better(v.current, v.baseline_value)
    word = "improvement" if better else "regression"
    if abs(v.delta_rel) <= threshold:
        v.verdict, v.reason = "unchanged", f"{pct} is within the ±{threshold:.0%} threshold"
        return
    evidence = []
    if v.ci_low == v.ci_low:  # a bootstrap CI was computed (not NaN)
        ci = f"{confidence:.0%} CI [{_pct(v.ci_low)}, {_pct(v.ci_high)}]"
        if not (v.ci_low > 0 or v.ci_high < 0):
            v.verdict, v.reason = "unchanged", f"{pct} exceeds ±{threshold:.0%} but is not significant: {ci} includes 0"
            return
        evidence.append(ci)
    if noise := _within_history_noise(change, pct, history, confidence, evidence):
        v.verdict, v.reason = "unchanged", noise
        return
    if not evidence:
        v.verdict, v.reason = (
            "unchanged",
            (
                f"{pct} exceeds ±{threshold:.0%} but significance cannot be assessed "
                f"(no per-request samples, fewer than {MIN_HISTORY} runs): not flagged"
            ),
        )
        return
    if len(history) < MIN_HISTORY:
        # resampled requests show the noise within one run, not between runs (a nightly's dominant noise)
        v.verdict = "suspected"
        v.reason = (
            f"{word} of {pct} (threshold ±{threshold:.0%}), significant only against a resampling of the "
            f"requests ({'; '.join(evidence)}), which says nothing about run-to-run noise; "
            f"{len(history)} earlier run{'s' if len(history) != 1 else ''} of this point, {MIN_HISTORY} needed to judge it"
        )
        return
    v.verdict = "improved" if better else "regressed"
    v.reason = f"{word} of {pct} (threshold ±{threshold:.0%}); significant: {'; '.join(evidence)}"


def _pct(x: float) -> str:
    if x != x:
        return "n/a"
    if math.isinf(x):
        return "+inf%" if x > 0 else "-inf%"
    return f"{x:+.1%}"


# ---------------------------------------------------------------------------
# helpers for callers


def historical_baseline(
    runs: Sequence[Mapping[str, Any]], name: str | None = None, kind: str = "historical"
) -> dict[str, Any]:
    """A baseline from past runs (most recent first, the current run excluded):
    the latest run's summary, samples and key, and every run's summary as history."""
    if not runs:
        raise ValueError("historical_baseline: no runs given")
    last = runs[0]
    label = name or (
        f"last {len(runs)} run{'s' if len(runs) > 1 else ''}"
        + (f" (latest {str(last.get('run_id'))[:8]})" if last.get("run_id") else "")
    )
    return {
        "name": label,
        "kind": kind,
        "key": dict(last.get("key") or {}),
        "summary": dict(last["summary"]),
        "samples": last.get("samples"),
        "history": [dict(r["summary"]) for r in runs],
    }


def any_regression(verdicts: Iterable[Verdict]) -> bool:
    """A regression to fail on: one the nightly guard already alarmed on an earlier night does not count again."""
    return any(v.verdict == "regressed" and v.alarm != "open" for v in verdicts)


def format_table(verdicts: Iterable[Verdict]) -> str:
    """A plain-text table: one line per verdict."""
    header = ["metric", "baseline", "current", "baseline value", "change", "CI", "verdict", "reason"]
    rows = []
    for v in verdicts:
        fmt = HEADLINE[v.metric].fmt if v.metric in HEADLINE else "{:.4g}"
        ci = "" if v.ci_low != v.ci_low else f"[{_pct(v.ci_low)}, {_pct(v.ci_high)}]"
        rows.append(
            [
                v.metric + (f" ({v.definition})" if v.definition else ""),
                v.baseline,
                _fmt(fmt, v.current),
                _fmt(fmt, v.baseline_value),
                _pct(v.delta_rel),
                ci,
                v.verdict.upper() if v.verdict == "regressed" else v.verdict,
                v.reason,
            ]
        )
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header) - 1)]
    lines = []
    for r in [header, ["-" * w for w in widths] + ["-" * 6]] + rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])
    return "\n".join(lines)


def _fmt(pattern: str, x: float) -> str:
    if x != x:
        return "-"
    try:
        return pattern.format(x)
    except (ValueError, TypeError):
        return str(x)


# ---------------------------------------------------------------------------
# capacity at service tiers (benchcamp.planning.capacity)
#
# One verdict per (baseline, tier) on ``max_agents``, higher is better, by the same
# rules as the headline metrics: comparable keys, the relative threshold, and
# significance by every evidence available. A search has no per-request bootstrap;
# its evidence is
#   - the brackets: the current search measured a valid probe that FAILS the tier at
#     a level (``failed_above``) no higher than the baseline's max_agents, where the
#     baseline met it (for an improvement: current max_agents >= the baseline's
#     failed_above), i.e. the two [max_agents, failed_above) intervals are disjoint;
#   - history: with >= 3 past runs, beyond k * std of their max_agents (as above).
# A tier whose search did not finish (invalid_probe) on either side, or whose
# thresholds differ, is not comparable.

CAPACITY_METRIC = "capacity.{tier}.max_agents"
_FINISHED = ("ok", "none", "at_max")


def compare_capacity(
    current: Mapping[str, Any], baselines: Iterable[Mapping[str, Any]], regression: Regression | None = None
) -> list[Verdict]:
    """``current`` = ``{"capacity": CapacityResult.to_dict(), "key": comparability key}``;
    each baseline = ``{"name", "kind", "key", "capacity", optional "history": [capacity dicts]}``."""
    regression = regression or Regression()
    threshold = float(regression.relative_threshold)
    confidence = float(regression.confidence)
    cur_tiers = {t["tier"]: t for t in (current.get("capacity") or {}).get("tiers", [])}
    out: list[Verdict] = []
    for b in baselines:
        name, kind = str(b.get("name", "baseline")), str(b.get("kind", "historical"))
        ok, why = comparable(current.get("key") or {}, b.get("key") or {}, kind)
        base_tiers = {t["tier"]: t for t in (b.get("capacity") or {}).get("tiers", [])}
        for tier, c in cur_tiers.items():
            bt = base_tiers.get(tier)
            v = Verdict(
                CAPACITY_METRIC.format(tier=tier),
                name,
                float(c["max_agents"]),
                float(bt["max_agents"]) if bt else math.nan,
                math.nan,
                math.nan,
                math.nan,
                "not_comparable",
                "",
                kind,
            )
            history = [
                float(t["max_agents"])
                for h in b.get("history") or []
                for t in h.get("tiers", [])
                if t["tier"] == tier and t.get("status") in _FINISHED
            ]
            if len(history) >= MIN_HISTORY:
                v.baseline_value = float(np.mean(history))
            if not ok:
                v.reason = why
            elif bt is None:
                v.reason = f"the baseline has no tier {tier!r}"
            elif (bt[TierField.RATE], bt[TierField.TTFT]) != (c[TierField.RATE], c[TierField.TTFT]):
                v.reason = (
                    f"tier {tier!r} differs: >= {c[TierField.RATE]:g} tok/s, TTFT <= {c[TierField.TTFT]:g} s "
                    f"here; >= {bt[TierField.RATE]:g}, <= {bt[TierField.TTFT]:g} in the baseline"
                )
            elif c["status"] not in _FINISHED or bt["status"] not in _FINISHED:
                v.reason = (
                    f"the search did not finish (status {c['status']} here, {bt['status']} in the baseline): "
                    "its max_agents is only a lower bound"
                )
            else:
                v.delta_rel = float(_rel(v.current, v.baseline_value))
                _judge_capacity(v, c, bt, threshold, confidence, history)
            out.append(v)
    return out


def _within_history_noise(
    change: float, pct: str, history: list[float], confidence: float, evidence: list[str]
) -> str | None:
    """With MIN_HISTORY or more earlier runs: the reason when ``change`` (from their mean) lies
    within their noise (the prediction interval of one more run at ``confidence``), else None,
    and the noise is added to ``evidence`` when the change lies beyond it."""
    if len(history) < MIN_HISTORY:
        return None
    n = len(history)
    k = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(1 + 1 / n)
    band = k * float(np.std(history, ddof=1))
    if abs(change) <= band:
        return f"{pct} vs the mean of {n} runs is within their noise (±{band:.4g} = {k:.2f} x std)"
    evidence.append(f"beyond the noise of {n} runs (±{band:.4g})")
    return None


def _judge_capacity(
    v: Verdict,
    cur: Mapping[str, Any],
    base: Mapping[str, Any],
    threshold: float,
    confidence: float,
    history: list[float],
) -> None:
    change = v.current - v.baseline_value
    pct = _pct(v.delta_rel)
    if change == 0:
        v.verdict, v.reason = "unchanged", "no change"
        return
    better = change > 0
    if abs(v.delta_rel) <= threshold:
        v.verdict, v.reason = "unchanged", f"{pct} is within the ±{threshold:.0%} threshold"
        return
    evidence = []
    # disjoint brackets: a valid failing probe of one side at or below the other's met level
    if better:
        hi = base.get("failed_above")
        disjoint = hi is not None and cur["max_agents"] >= hi
        seen = f"{cur['max_agents']} agents met the tier here; the baseline failed it at {hi}"
    else:
        hi = cur.get("failed_above")
        disjoint = hi is not None and hi <= base["max_agents"]
        seen = f"the tier failed here at {hi} agents; the baseline met it at {base['max_agents']}"
    if not disjoint:
        v.verdict, v.reason = (
            "unchanged",
            (
                f"{pct} exceeds ±{threshold:.0%} but the search brackets overlap "
                f"(here [{cur['max_agents']}, {cur.get('failed_above')}), baseline "
                f"[{base['max_agents']}, {base.get('failed_above')})): not significant"
            ),
        )
        return
    evidence.append(seen)
    if noise := _within_history_noise(change, pct, history, confidence, evidence):
        v.verdict, v.reason = "unchanged", noise
        return
    v.verdict = "improved" if better else "regressed"
    v.reason = (
        f"{'improvement' if better else 'regression'} of {pct} in max agents (threshold ±{threshold:.0%}); "
        f"significant: {'; '.join(evidence)}"
    )


# ---------------------------------------------------------------------------
# the nightly guard (benchcamp.verdicts.guard) as verdicts


def guard_rule(regression: Regression | None, metric: str) -> GuardRule:
    """The guard's rule for ``metric``: its relative threshold from ``regression`` (per_metric first)."""
    regression = regression or Regression()
    threshold = float(regression.per_metric.get(metric, regression.relative_threshold))
    return GuardRule(threshold=threshold)


def guard_verdicts(series: Mapping[str, Sequence[Night]], regression: Regression | None = None) -> list[Verdict]:
    """One verdict per headline metric over its nightly series (metric -> nights, oldest first, the judged
    night last), judged by :func:`benchcamp.verdicts.guard.judge_series`."""
    out = []
    for metric, nights in series.items():
        if metric not in HEADLINE or not nights:
            continue
        sv = judge_series(metric, nights, guard_rule(regression, metric))
        v = Verdict(
            metric,
            f"nightly series ({sv.nights} nights)",
            sv.current,
            sv.baseline_value,
            sv.delta_rel,
            sv.ci[0],
            sv.ci[1],
            sv.status,
            sv.reason,
            "historical",
            began=sv.began,
            diff={k: list(d) for k, d in sv.diff.items()},
            alarm="opened"
            if sv.new_alarm
            else "closed"
            if sv.closed_alarm
            else "open"
            if sv.status == "regressed"
            else "",
        )
        if metric == Metric.THROUGHPUT_PER_GPU:
            v.definition = "window"
        out.append(v)
    return out
