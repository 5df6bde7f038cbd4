"""One sweep or search point in virtual time (``load.clock: virtual``).

``run_point_virtual`` is the virtual-clock twin of ``benchcamp.loadgen.run_point``:
the same ``PointSpec`` in, the same ``PointResult`` out, and the same files in
``out_dir`` (``records.parquet`` in ``benchcamp.records.SCHEMA``, written as the
load generator's merge writes it, and ``point.json``), so summaries, MLflow,
verdicts and the report read either. The point runs through
``benchcamp.engine.simulate.simulate`` on a fresh engine, so points share no
prefix cache and the prompt salt is not needed (it is still recorded in the spec).

Determinism: the records of one (config, workload, spec) are byte-identical run
after run (the simulator is deterministic; the Parquet is written without the
DataFrame's run statistics, which hold wall times).

Client health says ``clock: virtual``: there is no client process, so no client
CPU or scheduling lag (sent = scheduled); validity's client checks pass by
construction and the other rules (requests, errors, incomplete) apply as usual.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchcamp.loadgen.spec import PointResult, PointSpec
from benchcamp.records import SCHEMA

CLOCK = "virtual"


def run_point_virtual(
    cfg: Any, workload: Any, spec: PointSpec, out_dir: str | Path, settings: Any = None
) -> PointResult:
    """Simulate ``spec`` against the engine of ``cfg`` (or ``settings``, an EngineSettings
    that overrides it, e.g. one configuration of ``benchcamp plan``) and write its files."""
    from benchcamp.engine.settings import EngineSettings
    from benchcamp.engine.simulate import simulate

    settings = settings or EngineSettings.from_config(cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = simulate(
        workload,
        settings,
        mode=spec.mode,
        level=spec.level,
        warmup_s=spec.warmup_s,
        duration_s=spec.duration_s,
        drain_s=spec.drain_s,
        seed=spec.seed,
        point=spec.label,
        max_requests=spec.max_requests,
        arrival=spec.arrival,
        gamma_shape=spec.gamma_shape,
    )
    attrs = {str(k): v for k, v in df.attrs.items()}
    df.attrs.clear()  # wall_s / cpu_s would otherwise reach the Parquet's pandas metadata
    records_path = out_dir / "records.parquet"
    table = pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False)
    tmp = records_path.with_name(f".{records_path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(records_path)

    w0, w1 = attrs["window"]
    window = (float(w0), max(float(w0) + 1e-3, float(w1)))
    health = virtual_health(attrs)
    result = PointResult(
        label=spec.label,
        records_path=records_path,
        window=window,
        client_health=health,
        server_metrics_delta=dict(attrs.get("server_delta") or {}),
        aborted=None,
        level=float(spec.level),
        requests=len(df),
    )
    doc = dict(result.to_dict(), clock=CLOCK, epoch_monotonic=0.0, spec=spec.__dict__, server_metrics_available=True)
    (out_dir / "point.json").write_text(json.dumps(doc, indent=2, default=str))
    return result


def virtual_health(attrs: dict[str, Any]) -> dict[str, Any]:
    """The client-health dict of a virtual point: no client, so nothing that can bottleneck."""
    return {
        "clock": CLOCK,
        "workers": 0,
        "cpu_max": None,
        "loop_lag_p99_ms": None,
        "sched_lag_p50_ms": 0.0,
        "sched_lag_p99_ms": 0.0,
        "sched_lag_max_ms": 0.0,
        "worker_crashes": [],
        "worker_errors": [],
        "simulated_s": float(attrs.get("simulated_s", 0.0)),
        "steps": int(attrs.get("steps", 0)),
        "sim_wall_s": round(float(attrs.get("wall_s", 0.0)), 3),
    }


@dataclass
class VirtualOutcome:
    """A summarized point (virtual or wall): the fields of ``benchcamp.campaign.PointOutcome``."""

    label: str
    level: float
    summary: dict[str, Any]
    records_path: Path
    valid: bool
    reasons: list[str]
    window: tuple[float, float] = (0.0, 0.0)
    client_health: dict[str, Any] = field(default_factory=dict)
    server_metrics_delta: dict[str, Any] = field(default_factory=dict)
    aborted: str | None = None


def summarize_probe(
    cfg: Any, result: PointResult, settings: Any = None, theoretical_hit_rate: float | None = None
) -> VirtualOutcome:
    """A point's records -> summary (+ power metrics of the GPU profile, and the clock that
    measured it) and validity, as a sweep point's; for virtual and wall-clock points alike."""
    from benchcamp.engine.settings import EngineSettings
    from benchcamp.metrics import power_metrics, summarize, validity
    from benchcamp.pricing import prices_for
    from benchcamp.records import read_records

    settings = settings or EngineSettings.from_config(cfg)
    gpu = settings.gpu_profile()
    summary = summarize(
        read_records(result.records_path),
        window=result.window,
        gpus=settings.gpus,
        prices=prices_for(cfg),
        usd_per_gpu_hour=cfg.hardware.usd_per_gpu_hour,
        slo=cfg.slo,
        server_delta=result.server_metrics_delta,
        theoretical_hit_rate=theoretical_hit_rate,
        client_health=result.client_health,
    )
    summary.update(
        power_metrics(summary, gpu.board_power_w, gpu.node_overhead_factor),
        clock=str((result.client_health or {}).get("clock", "wall")),
    )
    verdict = validity(summary, result.client_health, cfg.load)
    w0, w1 = result.window
    return VirtualOutcome(
        result.label,
        float(result.level),
        summary,
        Path(result.records_path),
        bool(verdict["valid"]),
        list(verdict["reasons"]),
        (float(w0), float(w1)),
        dict(result.client_health),
        dict(result.server_metrics_delta),
    )


def virtual_measure(
    cfg: Any,
    workload: Any,
    out_root: str | Path,
    settings: Any = None,
    execution_id: str = "",
    theoretical_hit_rate: float | None = None,
):
    """``measure(level, attempt)`` for ``benchcamp.capacity.search_capacity``: a closed-loop
    point of ``level`` agents in virtual time, written under ``out_root/<label>``. The
    simulator is deterministic, so a retry (attempt k >= 1) would repeat the same answer:
    it runs a window 2^k times as long instead (label ``c<level>.retry<k>``), the fix that
    validity names for too few requests in the window."""
    from benchcamp.capacity import probe_spec

    out_root = Path(out_root)

    def measure(level: int, attempt: int = 0) -> VirtualOutcome:
        spec = probe_spec(cfg, level, attempt, execution_id)
        res = run_point_virtual(cfg, workload, spec, out_root / spec.label, settings=settings)
        return summarize_probe(cfg, res, settings, theoretical_hit_rate)

    return measure
