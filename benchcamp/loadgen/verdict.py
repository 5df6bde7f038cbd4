"""A point's summary and validity from its records, through benchcamp.metrics.

Used by `benchcamp bench run`. When benchcamp.metrics is not importable (a
partial install), a minimal summary with the same validity rule is computed
here, so an invalid point is still reported as invalid, never averaged in.
"""

from __future__ import annotations

import math
from typing import Any

from benchcamp.loadgen.spec import PointResult
from benchcamp.records import read_records


def point_summary(cfg: Any, result: PointResult, theoretical_hit_rate: float | None = None) -> dict[str, Any]:
    records = read_records(result.records_path)
    try:
        from benchcamp.metrics import summarize, validity
        from benchcamp.pricing import prices_for
    except ImportError:
        summary = _minimal(records, result.window)
        verdict = local_validity(summary, result.client_health, cfg.load)
    else:
        kw = dict(window=tuple(result.window), gpus=cfg.hardware.gpu_count, prices=prices_for(cfg),
                  usd_per_gpu_hour=cfg.hardware.usd_per_gpu_hour, slo=cfg.slo,
                  server_delta=result.server_metrics_delta, theoretical_hit_rate=theoretical_hit_rate,
                  client_health=result.client_health)
        summary = summarize(records, **kw)
        verdict = validity(summary, result.client_health, cfg.load)
    reasons = list(verdict["reasons"])
    if result.aborted:
        reasons.insert(0, f"point aborted: {result.aborted}")
    summary.update(point=result.label, level=result.level, valid=int(not reasons),
                   invalid_reasons="; ".join(reasons))
    return summary


def _minimal(records: Any, window: tuple[float, float]) -> dict[str, Any]:
    t0, t1 = window
    sent = records["sent_s"].astype(float)
    w = records[(sent >= t0) & (sent < t1)]
    n = len(w)
    ok = (w["status"] == 200) & w["error"].isna()
    lag = ((w["sent_s"] - w["scheduled_s"]) * 1000.0).dropna()
    return {"requests": n, "window_s": t1 - t0,
            "error_rate": float((~ok).sum() / n) if n else math.nan,
            "client_lag_p99_ms": float(lag.quantile(0.99)) if len(lag) else math.nan}


def local_validity(summary: dict[str, Any], client_health: dict[str, Any] | None, load: Any) -> dict[str, Any]:
    """The rule of benchcamp.metrics.validity: too few requests, too many errors, or the
    client was the bottleneck (CPU or scheduling lag)."""
    reasons = []
    if summary["requests"] < load.min_requests:
        reasons.append(f"only {summary['requests']} requests in the window, fewer than load.min_requests="
                       f"{load.min_requests}")
    if summary["error_rate"] == summary["error_rate"] and summary["error_rate"] > load.max_error_rate:
        reasons.append(f"error rate {summary['error_rate']:.2%} above load.max_error_rate={load.max_error_rate:.2%}")
    lag = summary.get("client_lag_p99_ms", math.nan)
    if lag == lag and lag > load.max_sched_lag_p99_ms:
        reasons.append(f"client scheduling lag p99 {lag:.1f} ms above load.max_sched_lag_p99_ms")
    cpu = (client_health or {}).get("cpu_max")
    if cpu is not None and cpu > load.max_client_cpu:
        reasons.append(f"client CPU peaked at {cpu:.0%}, above load.max_client_cpu={load.max_client_cpu:.0%}")
    return {"valid": not reasons, "reasons": reasons}
