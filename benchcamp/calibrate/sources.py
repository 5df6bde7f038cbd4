"""Measured points for ``benchcamp calibrate``: from results folders and from MLflow campaign runs (IO).

A results folder is a store (``results/``), a campaign folder (``results/<campaign>``) or an execution folder
(``results/<campaign>/<execution>``, the one with ``campaign.json``): every execution under it is read. Each sweep
point folder holds ``records.parquet`` and ``point.json`` (load spec, window, the /metrics delta); the point's
engine flags and workload come from the execution's ``campaign.json`` (resolved config, workload path).

An MLflow run id names a campaign's parent run (a point's run resolves to its campaign): its ``config.json`` and
each point's ``records.parquet`` are downloaded; MLflow keeps no /metrics delta, so those points use the client's
figures. The workload is ``workload.data`` of the logged config, which must exist on this machine.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from benchcamp.calibrate.fit import MeasuredPoint, figures_of, server_figures
from benchcamp.config import from_dict
from benchcamp.errors import BenchcampError
from benchcamp.profiles import ProfileError, model_profile_for
from benchcamp.sim.engine.settings import EngineSettings

LOAD_KEYS = ("mode", "level", "warmup_s", "duration_s", "drain_s", "seed", "arrival", "gamma_shape", "max_requests")


class CalibrateError(BenchcampError):
    """Nothing usable to calibrate on; the message says which input and why."""


def executions(folder: str | Path) -> list[Path]:
    """Execution folders (holding campaign.json) at, or up to two levels under, ``folder``."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    found = [root] if (root / "campaign.json").exists() else []
    for pattern in ("*/campaign.json", "*/*/campaign.json"):
        found += sorted(p.parent for p in root.glob(pattern))
    if not found:
        raise CalibrateError(f"{root}: no execution folder (one with campaign.json) at or under it")
    return found


def settings_for(config: dict[str, Any], overrides: dict[str, Any]) -> EngineSettings:
    cfg = from_dict(config, "campaign.json config")
    picked = {k: v for k, v in overrides.items() if v}
    if "model_profile" not in picked:
        try:  # a profile that lists the served model by name beats the config's default profile
            picked["model_profile"] = model_profile_for(cfg.engine.model)
        except ProfileError:
            pass
    return EngineSettings.from_config(cfg, **picked)


def _workload(path: str | Path, cache: dict[str, Any]) -> Any:
    from benchcamp.workload.model import read_workload

    key = str(path)
    if key not in cache:
        if not Path(key).exists():
            raise CalibrateError(f"workload {key} is missing on this machine; rebuild it (`benchcamp workload build`)")
        cache[key] = read_workload(key)
    return cache[key]


def _load_of(spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The point's load: its spec's figures, the config's (defaults filled in) where the spec has none."""
    cfg_load = from_dict(config, "campaign config").load.model_dump()
    out: dict[str, Any] = {k: spec[k] if spec.get(k) is not None else cfg_load.get(k) for k in LOAD_KEYS}
    out["level"] = float(out["level"])
    if out["mode"] == "closed":
        out["level"] = int(out["level"])
    return out


def _point(
    label: str,
    source: str,
    records: Path,
    window: tuple[float, float],
    load: dict[str, Any],
    delta: dict[str, float],
    settings: EngineSettings,
    workload: Any,
    use_server: bool,
) -> MeasuredPoint:
    from benchcamp.results.records import read_records

    df = read_records(records)
    server = server_figures(delta) if use_server else {}
    use = use_server and {"tpot", "ttft"} <= set(server)
    measured = figures_of(df, window, server=False)
    if use:
        measured.update(server)
    return MeasuredPoint(label, source, settings, workload, load, measured, bool(use))


def from_results(
    folder: str | Path,
    overrides: dict[str, Any],
    include_invalid: bool = False,
    use_server: bool = True,
    cache: dict[str, Any] | None = None,
) -> list[MeasuredPoint]:
    cache = {} if cache is None else cache
    out = []
    for ex in executions(folder):
        camp = json.loads((ex / "campaign.json").read_text())
        config = camp["config"]
        settings = settings_for(config, overrides)
        workload = _workload(camp.get("workload_path") or config["workload"]["data"], cache)
        for p in camp.get("points") or []:
            label = p["label"]
            pdir = ex / label
            doc_path, records = pdir / "point.json", pdir / "records.parquet"
            if not (doc_path.exists() and records.exists()):
                warnings.warn(f"{pdir}: no point.json or records.parquet; skipped", stacklevel=2)
                continue
            if not p.get("valid", True) and not include_invalid:
                warnings.warn(
                    f"{pdir}: invalid point ({'; '.join(p.get('reasons') or [])}); skipped "
                    "(--include-invalid keeps it)",
                    stacklevel=2,
                )
                continue
            doc = json.loads(doc_path.read_text())
            if doc.get("clock") == "virtual":
                warnings.warn(f"{pdir}: measured by the simulator (virtual clock), not a real engine", stacklevel=2)
            load = _load_of(doc.get("spec") or {}, config)
            w0, w1 = doc["window"]
            out.append(
                _point(
                    label,
                    str(pdir),
                    records,
                    (float(w0), float(w1)),
                    load,
                    doc.get("server_metrics_delta") or {},
                    settings,
                    workload,
                    use_server,
                )
            )
    return out


def from_mlflow(
    uri: str,
    run_id: str,
    overrides: dict[str, Any],
    include_invalid: bool = False,
    cache: dict[str, Any] | None = None,
) -> list[MeasuredPoint]:
    import tempfile

    from benchcamp.tracking.history import get_run

    cache = {} if cache is None else cache
    run = get_run(uri, run_id)
    config = run.config()
    settings = settings_for(config, overrides)
    workload = _workload(config["workload"]["data"], cache)
    out = []
    with tempfile.TemporaryDirectory(prefix="benchcamp-calibrate-") as tmp:
        for p in run.points():
            if not p.valid and not include_invalid:
                warnings.warn(
                    f"run {run.run_id} point {p.label}: invalid ({'; '.join(p.reasons)}); skipped", stacklevel=2
                )
                continue
            load = _load_of({"level": p.level}, config)
            window = p.window or (float(load["warmup_s"]), float(load["warmup_s"] + load["duration_s"]))
            records = run.records_path(p.label, tmp)
            out.append(
                _point(
                    p.label,
                    f"mlflow:{run.run_id}/{p.label}",
                    records,
                    window,
                    load,
                    {},
                    settings,
                    workload,
                    use_server=False,
                )
            )
    return out
