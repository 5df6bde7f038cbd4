"""Fit the simulator's hardware and engine factors to measured points (pure logic, no files).

A measured point is what one sweep point of a real run says: its engine settings and load (to replay it) and its
figures (throughput, TPOT, TTFT). ``predict`` replays the point in virtual time (``benchcamp.sim.clock.simulate``, the
core the capacity planner uses) with candidate profiles and computes the same figures from the simulated records;
``fit`` searches the chosen factors by a pattern search on a log scale (Hooke-Jeeves: each factor multiplied
and divided by a step, a jump along the moves that helped, the step shrinking when none does) to minimise the mean |log(simulated / measured)| over the fit points'
figures. Deterministic: the simulator is, and so is the search.

Figures (``figures_of``):
- ``throughput``: (prompt + completion tokens) of the successful requests sent in the window / window length
  (the summary's total tokens/s, before the division by GPUs);
- ``tpot``: the engine's own mean time per output token when the point kept its /metrics histograms
  (``vllm:request_time_per_output_token_seconds``, every request of the point), else the client's median TPOT in the
  window; the simulated side computes the same statistic over the same requests;
- ``ttft``: likewise (``vllm:time_to_first_token_seconds`` mean, else the client's median).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from benchcamp.profiles import EngineProfile, GpuProfile, ModelProfile
from benchcamp.sim.engine.settings import EngineSettings

if TYPE_CHECKING:
    import pandas as pd

    from benchcamp.workload.model import Workload

METRICS = ("throughput", "tpot", "ttft")
# Factors calibrate may fit: (profile kind, field) -> (lower, upper bound). Per-layer costs are left out on purpose:
# with one model they cannot be told apart from the per-step cost.
FACTORS: dict[str, tuple[str, float, float]] = {
    "compute_efficiency": ("gpu", 1e-3, 1.0),
    "memory_efficiency": ("gpu", 0.02, 10.0),
    "step_overhead_ms": ("gpu", 0.01, 100.0),
    "seq_overhead_us": ("engine", 1.0, 20_000.0),
    "frontend_ms": ("engine", 0.1, 1_000.0),
    "frontend_request_us": ("engine", 10.0, 200_000.0),
    "frontend_chunk_us": ("engine", 1.0, 20_000.0),
}
DEFAULT_FACTORS = (
    "compute_efficiency",
    "memory_efficiency",
    "step_overhead_ms",
    "seq_overhead_us",
    "frontend_request_us",
)
# Histogram names, newest first (vLLM renamed time_per_output_token in 0.11).
SERVER_TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
SERVER_TTFT = ("vllm:time_to_first_token_seconds",)


@dataclass
class MeasuredPoint:
    """One measured sweep point: how to replay it and what it measured."""

    label: str
    source: str  # the execution folder or MLflow run it came from
    settings: EngineSettings  # the engine it ran (flags); the profiles are the fit's
    workload: Workload
    load: dict[str, Any]  # mode, level, warmup_s, duration_s, drain_s, seed, arrival, gamma_shape, max_requests
    measured: dict[str, float]  # metric -> value (seconds, tokens/s)
    server: bool  # tpot/ttft are the engine's histogram means (True) or the client's medians
    tags: dict[str, str] = field(default_factory=dict)  # e.g. {"role": "fit"} for reports


@dataclass
class Profiles:
    gpu: GpuProfile
    engine: EngineProfile
    model: ModelProfile | None = None  # None: the settings' own

    def with_factors(self, values: dict[str, float]) -> Profiles:
        gpu: dict[str, Any] = {k: v for k, v in values.items() if FACTORS[k][0] == "gpu"}
        eng: dict[str, Any] = {k: v for k, v in values.items() if FACTORS[k][0] == "engine"}
        return Profiles(replace(self.gpu, **gpu), replace(self.engine, **eng), self.model)

    def value(self, factor: str) -> float:
        kind = FACTORS[factor][0]
        return float(getattr(self.gpu if kind == "gpu" else self.engine, factor))


@dataclass
class _Pinned(EngineSettings):
    """EngineSettings whose profiles are given objects (candidates of the fit), not names."""

    pinned: Profiles | None = None

    def gpu_profile(self) -> GpuProfile:
        assert self.pinned is not None
        return self.pinned.gpu

    def engine_spec(self) -> EngineProfile:
        assert self.pinned is not None
        return self.pinned.engine

    def model_spec(self) -> ModelProfile:
        assert self.pinned is not None
        return self.pinned.model or super().model_spec()


def pinned(settings: EngineSettings, profiles: Profiles) -> EngineSettings:
    fields_ = {k: getattr(settings, k) for k in EngineSettings.__dataclass_fields__}
    return _Pinned(**fields_, pinned=profiles)


# -- figures ------------------------------------------------------------------------------------------------------
def _tpot(df: pd.DataFrame) -> pd.Series:
    multi = df[df.completion_tokens > 1]
    return (multi.last_token_s - multi.first_token_s) / (multi.completion_tokens - 1)


def figures_of(df: pd.DataFrame, window: tuple[float, float], server: bool) -> dict[str, float]:
    """Throughput, TPOT and TTFT of a point's records (client clock), as ``MeasuredPoint.measured`` holds them:
    ``server``: TPOT and TTFT as the engine's histograms see them (mean over every successful request of the
    point), else the client's medians over the window."""
    w0, w1 = window
    ok = df[df.status == 200]
    win = ok[(ok.sent_s >= w0) & (ok.sent_s < w1)]
    span = max(w1 - w0, 1e-9)
    out = {"throughput": float(win.prompt_tokens.sum() + win.completion_tokens.sum()) / span}
    base = ok if server else win
    tpot, ttft = _tpot(base), base.first_token_s - base.sent_s
    pick = (lambda s: float(s.mean())) if server else (lambda s: float(s.median()))
    out["tpot"] = pick(tpot) if len(tpot) else math.nan
    out["ttft"] = pick(ttft) if len(ttft) else math.nan
    return out


def server_figures(delta: dict[str, float]) -> dict[str, float]:
    """The engine's mean TPOT and TTFT over a point from its /metrics delta (``benchcamp.loadgen.scrape``)."""
    out: dict[str, float] = {}
    for metric, names in (("tpot", SERVER_TPOT), ("ttft", SERVER_TTFT)):
        for name in names:
            n = delta.get(f"{name}_count", 0.0)
            if n > 0:
                out[metric] = delta[f"{name}_sum"] / n
                break
    return out


def histogram_median(delta: dict[str, float], name: str) -> float:
    """Median of a histogram delta by linear interpolation inside its bucket (coarse: for reports only)."""
    prefix = f"{name}_bucket:"
    bounds = sorted(
        (float(k[len(prefix) :]), v) for k, v in delta.items() if k.startswith(prefix) and k[len(prefix) :] != "+Inf"
    )
    total = delta.get(f"{name}_count", 0.0)
    if not total or not bounds:
        return math.nan
    lo, below = 0.0, 0.0
    for hi, cum in bounds:
        if cum >= total / 2:
            return lo + (hi - lo) * (total / 2 - below) / max(cum - below, 1e-12)
        lo, below = hi, cum
    return math.nan


# -- replay -------------------------------------------------------------------------------------------------------
def simulate_point(point: MeasuredPoint, profiles: Profiles) -> pd.DataFrame:
    from benchcamp.sim.clock.simulate import SimLoad, simulate

    ld = point.load
    return simulate(
        point.workload,
        pinned(point.settings, profiles),
        SimLoad(
            mode=ld["mode"],
            level=ld["level"],
            warmup_s=ld["warmup_s"],
            duration_s=ld["duration_s"],
            drain_s=ld["drain_s"],
            seed=int(ld.get("seed", 0)),
            point=point.label,
            max_requests=ld.get("max_requests"),
            arrival=ld.get("arrival", "poisson"),
            gamma_shape=float(ld.get("gamma_shape", 1.0)),
        ),
    )


def predict(point: MeasuredPoint, profiles: Profiles) -> dict[str, float]:
    df = simulate_point(point, profiles)
    return figures_of(df, tuple(df.attrs["window"]), point.server)


def log_errors(
    points: Sequence[MeasuredPoint], profiles: Profiles, metrics: Sequence[str] = METRICS
) -> list[tuple[str, str, float, float]]:
    """(point label, metric, measured, simulated) for every finite pair."""
    out = []
    for p in points:
        sim = predict(p, profiles)
        for m in metrics:
            a, b = p.measured.get(m, math.nan), sim.get(m, math.nan)
            if math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0:
                out.append((p.label, m, a, b))
    return out


def score(rows: Iterable[tuple[str, str, float, float]], weights: dict[str, float] | None = None) -> float:
    """Weighted mean |log(simulated / measured)|; inf when nothing is comparable."""
    weights = weights or {}
    num = den = 0.0
    for _, m, a, b in rows:
        w = weights.get(m, 1.0)
        num += w * abs(math.log(b / a))
        den += w
    return num / den if den else math.inf


# -- search -------------------------------------------------------------------------------------------------------
@dataclass
class FitResult:
    start: dict[str, float]
    fitted: dict[str, float]
    profiles: Profiles
    score_start: float
    score: float
    evaluations: int
    rows: list[tuple[str, str, float, float]]  # on the fit points, with the fitted profiles
    trace: list[tuple[int, float, dict[str, float]]]  # (evaluation, score, values) of each accepted move


def fit(
    points: Sequence[MeasuredPoint],
    base: Profiles,
    factors: Sequence[str] = DEFAULT_FACTORS,
    metrics: Sequence[str] = METRICS,
    weights: dict[str, float] | None = None,
    step: float = 2.0,
    min_step: float = 1.03,
    max_evaluations: int = 400,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """Pattern search (Hooke-Jeeves) over ``factors`` on a log scale, within FACTORS' bounds, from ``base``'s
    values; the step (a factor) shrinks to its square root when no move helps, down to ``min_step``."""
    unknown = [f for f in factors if f not in FACTORS]
    if unknown:
        raise ValueError(f"unknown factor(s) {unknown}; choose from {', '.join(FACTORS)}")
    if not points:
        raise ValueError("no measured point to fit")
    values = {f: max(base.value(f), FACTORS[f][1]) for f in factors}
    start = dict(values)
    cache: dict[tuple[float, ...], float] = {}
    evaluations = 0

    def evaluate(v: dict[str, float]) -> float:
        nonlocal evaluations
        key = tuple(round(math.log(v[f]), 9) for f in factors)
        if key not in cache:
            evaluations += 1
            try:
                cache[key] = score(log_errors(points, base.with_factors(v), metrics), weights)
            except ValueError:  # e.g. the model no longer fits: not a candidate
                cache[key] = math.inf
        return cache[key]

    def clip(v: dict[str, float]) -> dict[str, float]:
        return {f: min(FACTORS[f][2], max(FACTORS[f][1], v[f])) for f in factors}

    def explore(v: dict[str, float], fv: float, mult: float) -> tuple[dict[str, float], float]:
        """Hooke-Jeeves' exploratory move: each factor in turn x mult or / mult, kept where it helps."""
        for f in factors:
            tries = [clip(dict(v, **{f: v[f] * m})) for m in (mult, 1 / mult)]
            scored = [(evaluate(c), i, c) for i, c in enumerate(tries) if c[f] != v[f]]
            if scored:
                sc, _, c = min(scored)
                if sc < fv - 1e-12:
                    v, fv = c, sc
        return v, fv

    best = first = evaluate(values)
    trace = [(evaluations, best, dict(values))]
    # Hooke-Jeeves pattern search on log(factor): explore around the point; where that helps, jump again by the
    # same displacement (the pattern move) while it keeps helping; else shrink the step.
    while step >= min_step and evaluations < max_evaluations:
        new, fnew = explore(values, best, step)
        if fnew < best - 1e-12:
            while evaluations < max_evaluations:
                prev, values, best = values, new, fnew
                trace.append((evaluations, best, dict(values)))
                jump = clip({f: values[f] * values[f] / prev[f] for f in factors})
                new, fnew = explore(jump, evaluate(jump), step)
                if fnew >= best - 1e-12:
                    break
        else:
            step = math.sqrt(step)
        if progress:
            progress(
                f"step x{step:.3f}: score {best:.4f} after {evaluations} replays  "
                + "  ".join(f"{f}={values[f]:.4g}" for f in factors)
            )
    profiles = base.with_factors(values)
    return FitResult(start, values, profiles, first, best, evaluations, log_errors(points, profiles, metrics), trace)


def error_table(rows: Sequence[tuple[str, str, float, float]]) -> dict[str, dict[str, float]]:
    """metric -> {n, median |err|, max |err|, within 15%} of simulated / measured - 1."""
    out: dict[str, dict[str, float]] = {}
    for m in sorted({r[1] for r in rows}):
        err = np.array([b / a - 1 for _, mm, a, b in rows if mm == m])
        out[m] = {
            "n": len(err),
            "median_abs_err": float(np.median(np.abs(err))),
            "max_abs_err": float(np.max(np.abs(err))),
            "within_15": float(np.mean(np.abs(err) <= 0.15)),
        }
    return out
