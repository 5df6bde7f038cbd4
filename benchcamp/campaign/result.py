"""What an execution produced: per-point outcomes and the campaign result, and
their files (campaign.json: everything, reloadable; summary.json: headline + points).

Files are written atomically (benchcamp.results.atomic): a reader never sees half a summary.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchcamp.campaign import kinds
from benchcamp.campaign.layout import LATEST
from benchcamp.config import Config
from benchcamp.results import atomic
from benchcamp.results.jsonsafe import strict_json as strict_json  # re-exported: benchcamp.campaign names it
from benchcamp.results.outcome import PointOutcome
from benchcamp.results.outcome import summarize_point as summarize_point  # re-exported: steps.py imports it here
from benchcamp.results.trials import TRIALS_KEY, PointTrials

if TYPE_CHECKING:
    from benchcamp.tracking.history import TrackedRun


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
    status: str = kinds.Status.OK.value
    interrupted: bool = False
    missing_points: list[str] = field(default_factory=list)
    capacity: dict[str, Any] | None = None  # load.mode=capacity: benchcamp.planning.capacity.CapacityResult.to_dict()

    @classmethod
    def load(cls, results_dir: str | Path, records_dir: str | Path | None = None) -> CampaignResult:
        """The campaign written by :func:`write_campaign_files` into ``results_dir`` (an
        execution's folder, or a campaign's folder: then its ``latest`` execution), wherever
        that folder is now; ``records_dir/<point>/records.parquet`` when the points' records
        were fetched elsewhere."""
        from benchcamp.config import from_dict

        here = resolve_execution_dir(results_dir)
        path = here / "campaign.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; run `benchcamp run` or `benchcamp bench run` first")
        data = json.loads(path.read_text())

        def records_of(p: dict[str, Any]) -> Path:
            if records_dir:
                return Path(records_dir) / p["label"] / "records.parquet"
            logged = Path(p["records_path"])
            return logged if logged.is_absolute() else here / logged

        points = [
            PointOutcome(**(p | {"records_path": records_of(p), "window": tuple(p["window"])} | _trials_of(p)))
            for p in data.pop("points")
        ]
        cfg = from_dict(data.pop("config"), str(path))
        logged_log = data.pop("engine_log")
        engine_log = (
            here / "engine.log" if (here / "engine.log").exists() else (Path(logged_log) if logged_log else None)
        )
        data.pop("results_dir")
        known = set(cls.__dataclass_fields__)
        return cls(
            config=cfg,
            points=points,
            results_dir=here,
            engine_log=engine_log,
            **({k: v for k, v in data.items() if k in known} | {"workload_path": Path(data["workload_path"])}),
        )

    def to_json(self) -> dict[str, Any]:
        from benchcamp.secrets.redaction import scrub

        out = {k: v for k, v in asdict(self).items() if k not in ("config", "points")}
        out["config"] = scrub(self.config.to_dict())  # e.g. an --hf-token in engine.extra_args
        out["points"] = [_point_json(p) | {"records_path": self._relative(p.records_path)} for p in self.points]
        return strict_json(out)

    def _relative(self, path: Path) -> str:
        """Records inside the execution's folder are logged relative to it, so the folder can move."""
        try:
            return Path(path).resolve().relative_to(Path(self.results_dir).resolve()).as_posix()
        except ValueError:
            return str(path)


def _point_json(p: PointOutcome) -> dict[str, Any]:
    """A point in campaign.json; a point without trials (load.trials=1) has no ``trials`` key, as before."""
    doc = asdict(p)
    if p.trials is None:
        doc.pop(TRIALS_KEY, None)
    return doc


def _trials_of(p: dict[str, Any]) -> dict[str, Any]:
    """A point's trials block read back from campaign.json, as a PointTrials."""
    block = p.get(TRIALS_KEY)
    return {TRIALS_KEY: PointTrials.from_dict(block) if block else None}


def resolve_execution_dir(folder: str | Path) -> Path:
    """``folder`` itself when it holds campaign.json, else the execution its ``latest`` names."""
    here = Path(folder)
    pointer = here / LATEST
    if not (here / "campaign.json").exists() and pointer.is_file():
        return here / pointer.read_text().strip()
    return here


def new_execution_id(campaign: str, now: dt.datetime | None = None) -> str:
    """``<campaign>-<UTC time to the microsecond>Z-<6 hex>``: unique even for two runs started
    in the same microsecond on two machines."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{campaign}-{now:%Y%m%dT%H%M%S.%fZ}-{secrets.token_hex(3)}"


def utcnow() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def point_summary_doc(p: PointOutcome) -> dict[str, Any]:
    """A point's summary.json: its figures, and (load.trials > 1) under ``trials`` each trial's headline
    figures and the point's intervals over them (benchcamp.results.trials.PointTrials)."""
    doc = {"point": p.label, "level": p.level, "valid": p.valid, "reasons": p.reasons, **p.summary}
    if p.trials is not None:
        doc[TRIALS_KEY] = p.trials.to_dict()
    return doc


def summary_doc(result: CampaignResult) -> dict[str, Any]:
    return strict_json(
        {
            "campaign": result.config.campaign.name,
            "execution_id": result.execution_id,
            "fingerprint": result.fingerprint,
            "workload_digest": result.workload_digest,
            "engine": result.config.engine.kind,
            kinds.HEADLINE: result.headline,
            kinds.ERROR: result.error,
            kinds.STATUS: result.status,
            kinds.INTERRUPTED: result.interrupted,
            kinds.MISSING: result.missing_points,
            kinds.POINTS: [point_summary_doc(p) for p in result.points],
            "clock": result.config.load.clock,
            "capacity": result.capacity,
        }
    )


def headline_doc(result: CampaignResult) -> dict[str, Any]:
    """The headline figures alone (benchcamp.metrics.HEADLINE, in its order): the DVC stage's metrics file, so
    ``dvc exp show`` and ``dvc metrics diff`` lead with them. No valid point: each is null (strict JSON)."""
    from benchcamp.metrics import HEADLINE

    head = result.headline or {}
    return strict_json({name: head.get(name) for name in HEADLINE})


def outcome_doc(result: CampaignResult) -> dict[str, Any]:
    """How the execution ended, beside :func:`headline_doc` in a file of its own (not a DVC metrics file: DVC
    drops a metrics file's nulls, so a failed experiment's row would bring these columns ahead of the headline's,
    and a diff orders two files' rows at random)."""
    return strict_json(
        {
            kinds.STATUS: result.status,
            "point": (result.headline or {}).get("point"),
            "valid_points": sum(1 for p in result.points if p.valid),
            "points": len(result.points),
        }
    )


def write_campaign_files(result: CampaignResult) -> None:
    """campaign.json (everything, reloadable with CampaignResult.load), summary.json
    (headline, status + every point, valid or not) and each point's summary.json beside its records."""
    d = Path(result.results_dir)
    for p in result.points:
        atomic.write_json(p.folder / "summary.json", strict_json(point_summary_doc(p)))
    atomic.write_json(d / "campaign.json", result.to_json())
    atomic.write_json(d / "summary.json", summary_doc(result))


def to_campaign_result(run: TrackedRun, dst: str | Path) -> CampaignResult:
    """Rebuild a :class:`CampaignResult` from MLflow (config, capacity search, every point's
    records under ``dst``)."""
    from benchcamp.config import from_dict
    from benchcamp.errors import TrackingError

    cfg = from_dict(run.config(), f"config.json of run {run.run_id}")
    points = []
    for p in run.points():
        try:
            records = run.records_path(p.label, dst)
        except TrackingError:
            records = Path(dst) / p.label / "records.parquet"  # missing: the report shows no CDF for it
        points.append(
            PointOutcome(p.label, p.level, dict(p.summary), records, p.valid, p.reasons, window=p.window or (0.0, 0.0))
        )
    headline: dict[str, Any] = dict(run.headline)
    headline["point"] = run.headline_point
    return CampaignResult(
        execution_id=run.execution_id,
        config=cfg,
        fingerprint=run.tag("fingerprint"),
        workload_path=Path(cfg.workload.data),
        workload_digest=run.tag("workload_digest"),
        points=points,
        results_dir=Path(dst),
        headline=headline,
        started_at=run.tag("started_at"),
        finished_at=run.tag("finished_at"),
        error=run.tag("error") or None,
        # compare and report judge and show the search too
        capacity=run.capacity() if cfg.load.mode == "capacity" else None,
    )
