"""A measured sweep point as llm-d's Benchmark Report v0.2.1, built and validated by ``llmd-benchmark-report``'s own
models (``BenchmarkReportV02``: unknown fields and wrong units are refused).

What goes where (the schema's fields; llmd_benchmark_report/schema_v0_2.py):
- ``run``: ``uid`` = ``<execution id>/<point>``, ``eid`` = the execution id (every point of one execution shares
  it), start and end, keywords (benchcamp, the engine kind, the clock).
- ``scenario.stack``: one ``inference_engine`` component per role of the deployment (unified -> ``replica``,
  prefill, decode): engine (``vllm``, or ``benchcamp-simulated-vllm``) and version, model, GPU type and count,
  TP / DP / EP; the engine's settings as ``native.args`` (secrets scrubbed).
- ``scenario.load``: benchcamp as the tool; prompt and output lengths of the window's requests; the level as
  ``concurrency`` (closed loop) or ``rate_qps`` (open loop); ``native.config.benchcamp``: the workload's name and
  content digest, the window, the GPUs, the headline figures with their definitions
  (benchcamp.metrics.THROUGHPUT_DEFINITION_WORDS / INTERACTIVITY_DEFINITION_WORDS), and the pointer back to the
  MLflow run (tracking URI and run id) when the point was tracked.
- ``results.request_performance.aggregate``: request counts (failures are errors; incomplete = the client cut them
  off), per-request statistics in seconds (TTFT, TPOT, ITL pooled over chunks, E2E), prompt and output lengths,
  and the deployment's token and request rates over the window (benchcamp's window rule; per GPU: divide by
  the stack's accelerator count).

Percentiles are numpy's linear ones over the window's successful requests, as in benchcamp.metrics.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchcamp.config import Config
from benchcamp.metrics import (
    INTERACTIVITY_DEFINITION_WORDS,
    INTERACTIVITY_HEADLINE,
    THROUGHPUT_DEFINITION_WORDS,
    THROUGHPUT_HEADLINE,
    Metric,
)
from benchcamp.results import atomic
from benchcamp.results.outcome import PointOutcome

SCHEMA_VERSION = "0.2.1"
# the Statistics fields of the schema and the percentile each one is
QUANTILES = {"p0p1": 0.1, "p1": 1, "p5": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90, "p95": 95,
             "p99": 99, "p99p9": 99.9}  # fmt: skip
ROLES = {"unified": "replica", "prefill": "prefill", "decode": "decode"}


@dataclass(frozen=True)
class Execution:
    """What a point's report needs of its execution (a CampaignResult's fields, or a tracked run's tags)."""

    execution_id: str
    fingerprint: str
    workload_digest: str
    started_at: str
    finished_at: str


@dataclass(frozen=True)
class RunPointer:
    """The MLflow run a report points back to."""

    tracking_uri: str
    run_id: str


def execution_of(campaign: Any) -> Execution:
    """The :class:`Execution` of a ``benchcamp.campaign.CampaignResult``."""
    return Execution(
        str(campaign.execution_id),
        str(campaign.fingerprint),
        str(campaign.workload_digest),
        str(campaign.started_at or ""),
        str(campaign.finished_at or ""),
    )


def statistics(values: Iterable[float] | np.ndarray, units: str) -> dict[str, Any] | None:
    """The schema's ``Statistics`` of the finite values (None when there are none)."""
    a = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    a = a[np.isfinite(a)]
    if not a.size:
        return None
    qs = np.percentile(a, list(QUANTILES.values()))
    return {"units": units, "mean": float(a.mean()), "stddev": float(a.std()), "min": float(a.min()),
            "max": float(a.max()), **{k: float(v) for k, v in zip(QUANTILES, qs)}}  # fmt: skip


def _rate(value: Any, units: str) -> dict[str, Any] | None:
    return {"units": units, "mean": float(value)} if _finite(value) else None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _strict(x: Any) -> Any:
    """JSON-compliant: NaN and infinities become None (the report is strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    return x


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _stack(cfg: Config) -> list[dict[str, Any]]:
    from benchcamp.config import topology_of
    from benchcamp.secrets.redaction import safe_params
    from benchcamp.topology.candidates import topology_params

    flat = topology_params(topology_of(cfg))
    tool = "vllm" if cfg.engine.kind == "vllm" else "benchcamp-simulated-vllm"
    engine_args = {k.removeprefix("engine."): v for k, v in safe_params(cfg.flat()).items() if k.startswith("engine.")}
    out = []
    for role in ROLES:
        if f"topology.{role}.instances" not in flat:
            continue

        def n(field: str, role: str = role) -> int:
            return int(flat.get(f"topology.{role}.{field}", "1") or 1)

        out.append({
            "metadata": {"label": role, "cfg_id": cfg.fingerprint()[:16]},
            "standardized": {
                "kind": "inference_engine", "tool": tool, "tool_version": str(cfg.engine.version),
                "role": ROLES[role], "replicas": n("instances"), "model": {"name": cfg.engine.model},
                "accelerator": {"model": cfg.hardware.gpu, "count": n("gpus"),
                                "parallelism": {"tp": n("tp"), "dp": n("dp"), "ep": n("ep")}},
            },
            "native": {"args": engine_args},
        })  # fmt: skip
    return out


def _benchcamp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("benchcamp")
    except PackageNotFoundError:
        return "unknown"


def point_report(
    cfg: Config, execution: Execution, point: PointOutcome, run: RunPointer | None = None, records: Any = None
) -> Any:
    """The point as a validated ``BenchmarkReportV02`` (llmd_benchmark_report); ``records``: the point's records
    frame when already read (else read from ``point.records_path``)."""
    from llmd_benchmark_report import BenchmarkReportV02

    from benchcamp.metrics import _ok, in_window, request_samples
    from benchcamp.results.records import read_records

    s = point.summary
    t0, t1 = (float(x) for x in (point.window or (0.0, 0.0)))
    window = (t0, t1) if t1 > t0 else None
    frame = records if records is not None else read_records(point.records_path)
    samples = request_samples(frame, window)
    ok = samples["ok"].to_numpy()
    in_w = frame[in_window(frame, window)]
    gaps = [np.asarray(x, dtype=float) for x in in_w[_ok(in_w)]["itl_s"] if x is not None and len(x)]
    itl = np.concatenate(gaps) if gaps else np.array([])
    prompt = (samples["cached"] + samples["uncached"]).to_numpy()[ok]
    output = samples["output"].to_numpy()[ok]
    W = float(s.get("window_s") or (window[1] - window[0] if window else math.nan))

    def per_window(key: str) -> float | None:
        v = s.get(key)
        return float(v) / W if isinstance(v, (int, float)) and _finite(v) and W > 0 else None

    level = float(point.level)
    bench = {
        "execution_id": execution.execution_id,
        "point": point.label,
        "fingerprint": execution.fingerprint,
        "workload": cfg.workload.name,
        "workload_digest": execution.workload_digest,
        "clock": cfg.load.clock,
        "mode": cfg.load.mode,
        "level": level,
        "window_s": W,
        "gpus": int(s.get("gpus") or cfg.hardware.gpu_count),
        "valid": bool(point.valid),
        "reasons": list(point.reasons),
        "throughput_definition": THROUGHPUT_HEADLINE,
        "throughput_definitions": dict(THROUGHPUT_DEFINITION_WORDS),
        "interactivity_definition": INTERACTIVITY_HEADLINE,
        "interactivity_definitions": dict(INTERACTIVITY_DEFINITION_WORDS),
        "headline": {str(m): s.get(str(m)) for m in (
            Metric.THROUGHPUT_PER_GPU, Metric.THROUGHPUT_PER_GPU_SPAN, Metric.P90_USER_RATE,
            Metric.E2E_INTERACTIVITY_P90, Metric.TTFT_P90, Metric.REVENUE_PER_GPU_HOUR, Metric.ERROR_RATE,
            Metric.CACHE_HIT_RATE_CLIENT)},
        "pricing_profile": s.get("pricing_profile"),
        **({"mlflow": {"tracking_uri": _public_uri(run.tracking_uri), "run_id": run.run_id}} if run else {}),
    }  # fmt: skip
    closed = cfg.load.mode in ("closed", "capacity")
    load = {
        "metadata": {"cfg_id": execution.fingerprint, "description": f"{cfg.workload.name} ({execution.workload_digest})",
                     "treatment": point.label},
        "standardized": _drop_none({
            "tool": "benchcamp", "tool_version": _benchcamp_version(), "source": "sampled",
            "input_seq_len": _length(prompt), "output_seq_len": _length(output),
            "multi_turn": {"enabled": True},
            "concurrency": max(1, int(round(level))) if closed else None,
            "rate_qps": level if cfg.load.mode == "open" and level > 0 else None,
        }),
        "native": {"config": {"benchcamp": bench}},
    }  # fmt: skip
    failures = int(s.get("requests_failed", 0) or 0) - int(s.get("requests_incomplete", 0) or 0)
    aggregate = {
        "requests": _drop_none({
            "total": int(s.get(Metric.REQUESTS, len(samples)) or 0), "failures": max(failures, 0),
            "incomplete": int(s.get("requests_incomplete", 0) or 0),
            "input_length": statistics(prompt, "count"), "output_length": statistics(output, "count"),
        }),
        "latency": _drop_none({
            "time_to_first_token": statistics(samples["ttft"].to_numpy(), "s"),
            "time_per_output_token": statistics(samples["tpot"].to_numpy(), "s/token"),
            "inter_token_latency": statistics(itl, "s/token"),
            "request_latency": statistics(samples["e2e"].to_numpy(), "s"),
        }),
        "throughput": _drop_none({
            "input_token_rate": _rate(_sum_rate(s, ("cached_input_tokens", "uncached_input_tokens"), W), "tokens/s"),
            "output_token_rate": _rate(per_window("output_tokens"), "tokens/s"),
            "total_token_rate": _rate(per_window("total_tokens"), "tokens/s"),
            "request_rate": _rate(s.get("requests_per_s"), "queries/s"),
        }),
    }  # fmt: skip
    doc = {
        "version": SCHEMA_VERSION,
        "run": _drop_none({
            "uid": f"{execution.execution_id}/{point.label}", "eid": execution.execution_id,
            "time": _drop_none({"start": execution.started_at or None, "end": execution.finished_at or None}),
            "description": f"benchcamp {cfg.campaign.name} {point.label}: {cfg.engine.model} on "
                           f"{cfg.hardware.gpu_count} x {cfg.hardware.gpu} ({cfg.engine.kind})",
            "keywords": ["benchcamp", cfg.engine.kind, f"{cfg.load.clock}-clock"],
        }),
        "scenario": {"stack": _stack(cfg), "load": load},
        "results": {"request_performance": {"aggregate": aggregate}},
    }  # fmt: skip
    with contextlib.redirect_stderr(io.StringIO()):
        return BenchmarkReportV02(**_strict(doc))


def _sum_rate(s: dict[str, Any], keys: tuple[str, ...], W: float) -> float | None:
    vals = [s.get(k) for k in keys]
    nums = [float(v) for v in vals if isinstance(v, (int, float)) and _finite(v)]
    return sum(nums) / W if W > 0 and len(nums) == len(vals) else None


def _length(values: np.ndarray) -> dict[str, Any] | None:
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if not a.size:
        return None
    return {"distribution": "other", "value": float(a.mean()), "std_dev": float(a.std()), "min": int(a.min()),
            "max": max(1, int(a.max()))}  # fmt: skip


def _public_uri(uri: str) -> str:
    from benchcamp.tracking.store import describe_uri

    return describe_uri(uri)


def write_reports(
    cfg: Config,
    execution: Execution,
    points: Iterable[PointOutcome],
    out_dir: str | Path,
    run: RunPointer | None = None,
) -> list[Path]:
    """One ``<point>.br.json`` per point (atomic writes, strict JSON) in ``out_dir``; a point without records
    on this machine is skipped. Returns the files written."""
    out = Path(out_dir)
    written = []
    for p in points:
        if not Path(p.records_path).is_file():
            continue
        br = point_report(cfg, execution, p, run)
        written.append(atomic.write_json(out / f"{p.label}.br.json", br.dump()))
    return written
