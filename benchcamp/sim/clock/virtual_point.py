"""One sweep or search point in virtual time (``load.clock: virtual``).

``run_point_virtual`` is the virtual-clock twin of ``benchcamp.loadgen.run_point``:
the same ``PointSpec`` in, the same ``PointResult`` out, and the same files in
``out_dir`` (``records.parquet`` in ``benchcamp.results.records.SCHEMA``, written as the
load generator's merge writes it, and ``point.json``), so summaries, MLflow,
verdicts and the report read either. The point runs through
``benchcamp.sim.clock.simulate.simulate`` on a fresh engine, so points share no
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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchcamp.loadgen.spec import PointResult, PointSpec
from benchcamp.results.outcome import PointOutcome, summarize_point
from benchcamp.results.records import SCHEMA

if TYPE_CHECKING:
    from benchcamp.config import Config
    from benchcamp.sim.engine.settings import EngineSettings
    from benchcamp.workload.model import Workload

CLOCK = "virtual"


def run_point_virtual(
    cfg: Config, workload: Workload, spec: PointSpec, out_dir: str | Path, settings: EngineSettings | None = None
) -> PointResult:
    """Simulate ``spec`` against the engine of ``cfg`` (or ``settings``, an EngineSettings
    that overrides it, e.g. one configuration of ``benchcamp plan``) and write its files."""
    from benchcamp.sim.clock.fleet import simulation_plan
    from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate
    from benchcamp.sim.engine.frontend import prompt_kind

    topology = per_role = None
    if settings is None:  # the config's deployment: one engine, or a topology's roles (benchcamp.topology)
        settings, topology, per_role, _gpus = simulation_plan(cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = simulate(
        workload,
        settings,
        SimLoad(
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
            agentx=spec.lane_rules,
            session_affinity=bool(spec.session_header),
            prompt=prompt_kind(spec.api, spec.prompt),
        ),
        SimRun(topology=topology, role_settings=per_role),
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
    if "deployment" in attrs:  # per-role figures of a topology (benchcamp.sim.clock.fleet.Fleet.summary)
        doc["deployment"] = attrs["deployment"]
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
        "idle_shifts": int(attrs.get("idle_shifts", 0)),
        "idle_skipped_s": float(attrs.get("idle_skipped_s", 0.0)),
        # when the last lane primer was answered (None: no barrier), and the workload's distinct top-level sessions
        "barrier_s": None if attrs.get("barrier_s") is None else float(attrs["barrier_s"]),
        "sessions_distinct": int(attrs.get("sessions_distinct", 0)),
        "late_window": bool(attrs.get("late_window", False)),
    }


def virtual_measure(
    cfg: Config,
    workload: Workload,
    out_root: str | Path,
    settings: EngineSettings | None = None,
    execution_id: str = "",
    theoretical_hit_rate: float | None = None,
) -> Callable[[int, int], Any]:  # Any: planning.capacity.Outcome declares summary a Mapping, PointOutcome a dict
    """``measure(level, attempt)`` for ``benchcamp.planning.capacity.search_capacity``: a closed-loop
    point of ``level`` agents in virtual time, written under ``out_root/<label>``. The
    simulator is deterministic, so a retry (attempt k >= 1) would repeat the same answer:
    it runs a window 2^k times as long instead (label ``c<level>.retry<k>``), the fix that
    validity names for too few requests in the window."""
    from benchcamp.loadgen.spec import probe_spec
    from benchcamp.sim.clock.fleet import simulation_plan

    out_root = Path(out_root)
    gpus = settings.gpus if settings is not None else simulation_plan(cfg)[3]  # every GPU of every role
    gpu = settings.gpu if settings is not None else simulation_plan(cfg)[0].gpu

    def measure(level: int, attempt: int = 0) -> PointOutcome:
        spec = probe_spec(cfg.load, level, attempt, execution_id)
        res = run_point_virtual(cfg, workload, spec, out_root / spec.label, settings=settings)
        return summarize_point(cfg, res, theoretical_hit_rate, gpus=gpus, gpu=gpu)

    return measure
