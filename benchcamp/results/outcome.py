"""A measured point's records -> its summary and validity verdict: one path for sweep points,
capacity probes, wall clock and virtual clock alike.

Below both ``benchcamp.campaign`` (sweep points) and ``benchcamp.sim.engine`` /
``benchcamp.loadgen`` (capacity probes), so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchcamp.results.trials import PointTrials, aggregate_summary, point_trials, trial_figures, trial_name

if TYPE_CHECKING:
    from benchcamp.config import Config


@dataclass
class PointOutcome:
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
    # load.trials > 1: the point's trials (benchcamp.results.trials); its summary is their aggregate
    trials: PointTrials | None = None

    @property
    def folder(self) -> Path:
        """The point's own folder: its records' folder, or (trials) the one above its first trial's."""
        folder = Path(self.records_path).parent
        return folder.parent if self.trials is not None else folder


def combine_trials(outcomes: Sequence[tuple[int, PointOutcome]], asked: int, confidence: float) -> PointOutcome:
    """One point from its measured trials ``(k, outcome)``: the aggregate summary
    (:func:`benchcamp.results.trials.aggregate_summary`), valid when every trial is, each invalid trial's
    reasons named by trial, and the trials block. The point's records, window and health are its first
    trial's (the report's CDFs show that trial; every trial's records stay in its own folder)."""
    ordered = sorted(outcomes, key=lambda ko: ko[0])
    first = ordered[0][1]
    return replace(
        first,
        summary=aggregate_summary([o.summary for _, o in ordered]),
        valid=all(o.valid for _, o in ordered),
        reasons=_trial_reasons(ordered),
        aborted=next((f"{trial_name(k)}: {o.aborted}" for k, o in ordered if o.aborted), None),
        trials=point_trials(
            [trial_figures(k, o.valid, o.reasons, o.summary, o.aborted) for k, o in ordered], asked, confidence
        ),
    )


def _trial_reasons(ordered: Sequence[tuple[int, PointOutcome]]) -> list[str]:
    """Each invalid trial's reasons, a reason shared by several trials once: ``trial-1, trial-3: <reason>``."""
    by_reason: dict[str, list[str]] = {}
    for k, o in ordered:
        for r in o.reasons if not o.valid else ():
            by_reason.setdefault(str(r), []).append(trial_name(k))
    return [f"{', '.join(names)}: {r}" for r, names in by_reason.items()]


def summarize_point(
    cfg: Config,
    result: Any,
    theoretical_hit_rate: float | None = None,
    *,
    gpus: int | None = None,
    gpu: str | None = None,
) -> PointOutcome:
    """A loadgen PointResult -> PointOutcome: the summary (+ power metrics of the GPU profile,
    and the clock that measured it) and the validity verdict; an aborted point is invalid.
    ``gpus``/``gpu``: the GPU count and profile served (default: ``cfg.hardware``; a what-if
    engine of ``benchcamp plan`` names its own)."""
    from benchcamp.metrics import power_metrics, summarize, validity
    from benchcamp.pricing import prices_for
    from benchcamp.profiles import load_gpu
    from benchcamp.results.records import read_records

    health = result.client_health or {}
    records = read_records(result.records_path)
    summary = summarize(
        records,
        window=tuple(result.window),
        gpus=gpus or cfg.hardware.gpu_count,
        prices=prices_for(cfg.pricing),
        usd_per_gpu_hour=cfg.hardware.usd_per_gpu_hour,
        slo=cfg.slo,
        server_delta=result.server_metrics_delta,
        theoretical_hit_rate=theoretical_hit_rate,
        client_health=result.client_health,
    )
    profile = load_gpu(gpu or cfg.hardware.gpu)
    summary.update(
        power_metrics(summary, profile.board_power_w, profile.node_overhead_factor),
        clock=str(health.get("clock", "wall")),
    )
    if cfg.load.agentx is not None:  # AgentX's own verdict, shown beside benchcamp's checks
        from benchcamp.metrics import (
            agentx_submission,
            context_overflows,
            failure_abort,
            metric_coverage,
            warmup_failures,
        )
        from benchcamp.workload.agentx.scenarios import corpus_verdict
        from benchcamp.workload.model import read_meta

        ax, window = cfg.load.agentx, (float(result.window[0]), float(result.window[1]))
        overflows, n = context_overflows(records, window)
        cancelled = result.aborted or next(
            (str(e) for e in health.get("worker_errors") or () if "interrupt" in str(e)), None
        )
        # the harness checks coverage only for windows at or above its floor (records_manager.py)
        length = window[1] - window[0]
        coverage = metric_coverage(records, window, length) if length >= ax.min_duration_s else None
        threshold = ax.failed_request_threshold
        failure = None if threshold is None else failure_abort(records, window, result.level, threshold)
        summary.update(
            agentx_submission(
                overflows,
                n,
                ax,
                cancelled,
                ignore_eos_sent=_spec_of(result).get("vllm_sampling", True) is not False,
                corpus=corpus_verdict(_workload_source(cfg), cfg.workload.spec, read_meta(cfg.workload.data)),
                coverage=coverage,
                failure=failure,
                warmup_failed=warmup_failures(records, window),
                api=str(_spec_of(result).get("api") or cfg.load.api),  # the form on the wire (the probe's plan)
            )
        )
    if _workload_source(cfg) == "agentx":  # the harness's model map: what each trace model was sent to
        from benchcamp.workload.agentx.models import model_summary

        served = [cfg.served_model_name]
        summary.update(
            model_summary(records, (float(result.window[0]), float(result.window[1])), cfg.workload.data, served)
        )
    from benchcamp.metrics import replay_note, steadiness

    st = cfg.load.steady
    G = gpus or cfg.hardware.gpu_count
    summary.update(steadiness(records, tuple(result.window), G, st.tolerance, st.hit_tolerance))
    distinct = health.get("sessions_distinct")
    if distinct:
        summary["sessions_distinct"] = int(distinct)
    if health.get("barrier_s") is not None:  # the last lane primer's answer (the window opened then at the earliest)
        summary["primer_barrier_s"] = float(health["barrier_s"])
    summary["window_start_s"] = float(result.window[0])
    if health.get("late_window"):  # load.steady.window_opens' condition had not held by max_warmup_s
        late = (
            f"the window opened at load.warmup_s + load.steady.max_warmup_s={st.max_warmup_s:g} s, before "
            f"load.steady.window_opens={st.window_opens} held; raise max_warmup_s"
        )
        summary["steady"] = 0
        summary["steady_reasons"] = "; ".join(x for x in (late, summary["steady_reasons"]) if x)
    bust = bool(cfg.load.agentx.cache_bust) if cfg.load.agentx is not None else st.replay_salt
    mode = "closed" if cfg.load.mode == "capacity" else cfg.load.mode
    note = replay_note(float(getattr(result, "level", 0.0)), mode, distinct, bust)
    if note:
        summary["replay_note"] = note
    verdict = validity(summary, result.client_health, cfg.load)
    reasons = list(verdict["reasons"])
    aborted = result.aborted
    if not aborted and "trajectory_warmup_failed" in str(summary.get("agentx_submission_reasons") or ""):
        # the harness aborts a run whose warm-up failed (TrajectoryWarmupFailedError): so does the point
        aborted = "a warm-up request failed before the window (load.agentx: the harness aborts the run)"
    if aborted:
        # The abort is the reason: the window's checks that follow from it (too few requests,
        # requests still running, connection errors) would only advise lengthening the window.
        reasons = [f"point aborted: {aborted}"]
    return PointOutcome(
        label=result.label,
        level=float(getattr(result, "level", 0.0)),
        summary=summary,
        records_path=Path(result.records_path),
        valid=bool(verdict["valid"]) and not aborted,
        reasons=reasons,
        window=tuple(result.window),
        client_health=dict(health),
        server_metrics_delta=dict(result.server_metrics_delta or {}),
        aborted=aborted,
    )


def _spec_of(result: Any) -> dict[str, Any]:
    """The PointSpec the point ran (its point.json beside the records), {} when not written."""
    import json

    try:
        return dict(json.loads((Path(result.records_path).parent / "point.json").read_text()).get("spec") or {})
    except (OSError, ValueError):
        return {}


def _workload_source(cfg: Config) -> str:
    """``agentx`` when workload.spec is an AgentX trace (a .json file or a folder), else its kind."""
    from benchcamp.workload import _is_agentx

    spec = Path(cfg.workload.spec)
    if _is_agentx(spec):
        return "agentx"
    return "mooncake" if spec.suffix == ".jsonl" else "generated"
