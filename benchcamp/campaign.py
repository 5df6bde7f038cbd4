"""One campaign end to end, in-process: the same steps the Airflow DAG runs.

workload (build or reuse) -> provision -> deploy -> sweep -> stop -> deprovision
-> per-point summaries. Teardown always runs; a failure after some points were
measured keeps those points (their records are on disk) and is reported on the
result instead of being raised, so tracking and the report still happen.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchcamp.config import Config

log = logging.getLogger(__name__)


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


@dataclass
class CampaignResult:
    execution_id: str
    config: Config
    fingerprint: str
    workload_path: Path
    workload_digest: str
    points: list[PointOutcome]
    results_dir: Path
    headline: dict[str, Any]
    started_at: str
    finished_at: str
    engine_log: Path | None = None
    workload_stats: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    endpoint: str = ""

    @classmethod
    def load(cls, results_dir: str | Path, records_dir: str | Path | None = None) -> "CampaignResult":
        """The campaign written by :func:`write_campaign_files` into ``results_dir``,
        wherever that folder is now; ``records_dir/<point>/records.parquet`` when the
        points' records were fetched elsewhere (e.g. from a results store)."""
        from benchcamp.config import from_dict

        here = Path(results_dir)
        path = here / "campaign.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; run `benchcamp run` or `benchcamp bench run` first")
        data = json.loads(path.read_text())
        records_root = Path(records_dir) if records_dir else None

        def records_of(p: dict[str, Any]) -> Path:
            return records_root / p["label"] / "records.parquet" if records_root else Path(p["records_path"])

        points = [PointOutcome(**(p | {"records_path": records_of(p), "window": tuple(p["window"])}))
                  for p in data.pop("points")]
        cfg = from_dict(data.pop("config"), str(path))
        logged = data.pop("engine_log")
        engine_log = here / "engine.log" if (here / "engine.log").exists() else (Path(logged) if logged else None)
        data.pop("results_dir")
        return cls(config=cfg, points=points, results_dir=here, engine_log=engine_log,
                   **(data | {"workload_path": Path(data["workload_path"])}))

    def to_json(self) -> dict[str, Any]:
        from benchcamp.tracking.redact import scrub

        out = {k: v for k, v in asdict(self).items() if k not in ("config", "points")}
        out["config"] = scrub(self.config.to_dict())  # e.g. an --hf-token in engine.extra_args
        out["points"] = [asdict(p) for p in self.points]
        return strict_json(out)


def new_execution_id(cfg: Config, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{cfg.campaign.name}-{now:%Y%m%dT%H%M%SZ}-{cfg.fingerprint()[:8]}"


def safe_label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def utcnow() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def summarize_point(cfg: Config, result: Any, theoretical_hit_rate: float | None) -> PointOutcome:
    """A loadgen PointResult -> PointOutcome with the summary and validity verdict."""
    from benchcamp.metrics import summarize, validity
    from benchcamp.pricing import prices_for
    from benchcamp.records import read_records

    records = read_records(result.records_path)
    summary = summarize(
        records, window=tuple(result.window), gpus=cfg.hardware.gpu_count, prices=prices_for(cfg),
        usd_per_gpu_hour=cfg.hardware.usd_per_gpu_hour, slo=cfg.slo,
        server_delta=result.server_metrics_delta, theoretical_hit_rate=theoretical_hit_rate,
        client_health=result.client_health,
    )
    verdict = validity(summary, result.client_health, cfg.load)
    reasons = list(verdict["reasons"])
    if result.aborted:
        reasons.insert(0, f"point aborted: {result.aborted}")
    return PointOutcome(
        label=result.label, level=float(getattr(result, "level", 0.0)), summary=summary,
        records_path=Path(result.records_path), valid=bool(verdict["valid"]) and not result.aborted,
        reasons=reasons, window=tuple(result.window), client_health=dict(result.client_health),
        server_metrics_delta=dict(result.server_metrics_delta or {}), aborted=result.aborted,
    )


def run_campaign(cfg: Config, execution_id: str | None = None, progress: bool = True,
                 results_dir: str | Path | None = None) -> CampaignResult:
    """Run the campaign; teardown always runs. An engine that never becomes
    ready, rejects the key or serves another model raises ``EngineError``
    (nothing was measured); any later failure is kept on ``result.error`` with
    the points measured so far."""
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.loadgen import run_sweep
    from benchcamp.metrics import pick_headline
    from benchcamp.provision import get_provider
    from benchcamp.workload import ensure_workload
    from benchcamp.workload.stats import workload_stats

    from benchcamp.deploy import effective_config

    cfg = effective_config(cfg)
    execution_id = execution_id or new_execution_id(cfg)
    started = utcnow()
    results_dir = Path(results_dir) if results_dir else Path(cfg.results.store) / safe_label(cfg.campaign.name)
    results_dir.mkdir(parents=True, exist_ok=True)

    workload, workload_path, digest = ensure_workload(cfg)
    stats = workload_stats(workload)
    theoretical = stats.get("theoretical_hit_rate")
    hit = f", theoretical prefix-cache hit rate {theoretical:.1%}" if theoretical is not None else ""
    _say(progress, f"workload {workload.name}: {len(workload.sessions)} sessions, digest {digest[:12]}{hit}")

    provider = get_provider(cfg)
    points: list[PointOutcome] = []
    error: str | None = None
    engine_log: Path | None = None
    endpoint = ""
    node = provider.provision(execution_id)
    try:
        # Before the sweep nothing is measured yet: failures here (EngineError)
        # propagate, after tearing down what was started.
        deployment = deploy(node, cfg, log_dir=results_dir)
        engine_log = Path(deployment.log_path) if deployment.log_path else None
        endpoint = deployment.endpoint
        try:
            wait_ready(deployment, startup_timeout(cfg))  # also checks the key and the served model
            _say(progress, f"engine ready at {deployment.endpoint} ({cfg.engine.kind}); "
                           f"sweep {cfg.load.mode} levels {cfg.load.levels}")
            try:
                results = run_sweep(cfg, workload, deployment.endpoint, deployment.api_key, results_dir,
                                    progress=progress, execution_id=execution_id)
                points.extend(summarize_point(cfg, r, theoretical) for r in results)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # keep what was measured; the caller reports it
                error = f"{type(exc).__name__}: {exc}"
                log.exception("campaign %s failed during the sweep", execution_id)
                points.extend(summarize_point(cfg, r, theoretical) for r in measured_points(cfg, results_dir))
        finally:
            stop(deployment)
    finally:
        provider.deprovision(node)

    result = CampaignResult(
        execution_id=execution_id, config=cfg, fingerprint=cfg.fingerprint(),
        workload_path=Path(workload_path), workload_digest=digest, points=points,
        results_dir=results_dir, headline=pick_headline(
            [p.summary | {"valid": p.valid, "point": p.label} for p in points], slo=cfg.slo) if points else {},
        started_at=started, finished_at=utcnow(), engine_log=engine_log, workload_stats=stats,
        error=error, endpoint=endpoint,
    )
    write_campaign_files(result)
    return result


def measured_points(cfg: Config, results_dir: Path) -> list[Any]:
    """The PointResults that ``run_point`` left on disk (point.json), in sweep order."""
    from benchcamp.loadgen import PointSpec, PointResult

    dirs = [results_dir / PointSpec.from_config(cfg, level).label for level in cfg.load.levels]
    return [PointResult.load(d) for d in dirs if (d / "point.json").exists()]


def startup_timeout(cfg: Config) -> float:
    p = cfg.provider
    return {"local": p.local.startup_timeout_s, "ec2": p.ec2.startup_timeout_s}.get(p.kind, 60.0)


def point_summary_doc(p: PointOutcome) -> dict[str, Any]:
    return {"point": p.label, "level": p.level, "valid": p.valid, "reasons": p.reasons, **p.summary}


def write_campaign_files(result: CampaignResult) -> None:
    """campaign.json (everything, reloadable with CampaignResult.load), summary.json
    (headline + every point, valid or not) and each point's summary.json beside its records."""
    d = result.results_dir
    dump = lambda data: json.dumps(strict_json(data), indent=2, sort_keys=True)  # noqa: E731
    (d / "campaign.json").write_text(dump(result.to_json()))
    for p in result.points:
        (Path(p.records_path).parent / "summary.json").write_text(dump(point_summary_doc(p)))
    (d / "summary.json").write_text(dump({
        "campaign": result.config.campaign.name, "execution_id": result.execution_id,
        "fingerprint": result.fingerprint, "workload_digest": result.workload_digest,
        "engine": result.config.engine.kind, "headline": result.headline, "error": result.error,
        "points": [point_summary_doc(p) for p in result.points],
    }))


def strict_json(data: Any) -> Any:
    """NaN/inf -> None and non-JSON values -> str, so the files are strict JSON
    (browsers, `dvc metrics` and jq all read them)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    if data is None or isinstance(data, (str, int, bool)):
        return data
    return str(data)


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"[benchcamp] {text}", flush=True)
