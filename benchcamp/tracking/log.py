"""Log a campaign to MLflow: a parent run per execution, a child run per point.

Runs are addressed by explicit ids through ``MlflowClient`` (never the global
"active run"), and found again by their tags, so logging the same execution
twice updates its runs instead of creating duplicates.
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchcamp.results.jsonsafe import dumps
from benchcamp.secrets.redaction import redact, safe_params, scrub
from benchcamp.tracking.store import (
    ROLE_CAMPAIGN,
    ROLE_POINT,
    TAG,
    TrackingError,
    airflow_ids,
    client,
    experiment_id,
    git_commit,
    headline_name,
    mlflow_time,
)

# Tags that decide whether two campaigns measured the same thing.
COMPARABILITY_TAGS = (
    "workload_digest",
    "model",
    "gpu",
    "gpu_count",
    "engine_kind",
    # the headline point measured (benchcamp.verdicts.baselines.POINT_FIELDS): history is kept per point
    "point",
    "load_mode",
    "window_rule",
    "clock",
)
# MLflow caps dataset digests at 36 characters; the full sha256 is the
# benchcamp.workload_digest tag, its first 32 hex digits the dataset digest.
DATASET_DIGEST_LEN = 32
# How many workload rows go into the MLflow dataset (its profile is computed eagerly).
DATASET_MAX_ROWS = 20_000


def comparability_key(cfg, workload_digest: str, point: str | None = None) -> dict[str, str]:
    """:func:`benchcamp.verdicts.compare.comparability_key` as tag strings."""
    from benchcamp.verdicts.compare import comparability_key as key

    return {k: str(v) for k, v in key(cfg, workload_digest, point).items()}


def _throughput_headline() -> str:
    from benchcamp.metrics import THROUGHPUT_HEADLINE

    return THROUGHPUT_HEADLINE


def headline_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """Each headline metric (benchcamp.metrics.HEADLINE) the summary has, again under
    :func:`benchcamp.tracking.store.headline_name` (``Headline/1_total_tokens_per_s_per_gpu``, ...)."""
    from benchcamp.metrics import HEADLINE

    found = numeric_metrics(summary)
    return {headline_name(k): found[k] for k in HEADLINE if k in found}


def run_name(cfg, campaign) -> str:
    """``<campaign>/<model>/<gpu>/<start time>``: what the run measured, readable in MLflow's run list
    (the execution id stays the benchcamp.execution_id tag)."""
    model = cfg.engine.model.rstrip("/").rsplit("/", 1)[-1]
    when = str(campaign.started_at or "")[:16].replace("T", " ")
    return f"{cfg.campaign.name}/{model}/{cfg.hardware.gpu}/{when or campaign.execution_id}"


def numeric_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """Every finite number of a summary (bools as 0/1), keyed as in the summary."""
    out = {}
    for k, v in summary.items():
        if isinstance(v, bool):
            out[k] = float(v)
        elif isinstance(v, (int, float)) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


def capacity_metrics(capacity: dict[str, Any] | None) -> dict[str, float]:
    """``capacity.<tier>.max_agents`` (and per GPU, per MW) of a capacity search, for MLflow's
    run table; the whole search (probes, brackets) is in the run's summary.json."""
    out: dict[str, float] = {}
    for t in (capacity or {}).get("tiers", []):
        for field in ("max_agents", "agents_per_gpu", "agents_per_mw"):
            value = t.get(field)
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[f"capacity.{t['tier']}.{field}"] = float(value)
    return out


def campaign_valid(campaign) -> bool:
    """Usable as a baseline: no campaign error, and a valid headline point."""
    if campaign.error or not campaign.points:
        return False
    head = campaign.headline.get("point") if campaign.headline else None
    by_label = {p.label: p for p in campaign.points}
    if head in by_label:
        return bool(by_label[head].valid)
    return any(p.valid for p in campaign.points)


def _benchcamp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("benchcamp")
    except PackageNotFoundError:
        return "unknown"


def headline_point(campaign) -> str | None:
    """The headline point's label, the point a campaign's history is kept for; None without one."""
    return str((campaign.headline or {}).get("point") or "") or None


def campaign_status(campaign) -> str:
    """The parent run's MLflow status: FINISHED (a green tick) only when the campaign is valid
    (:func:`campaign_valid`); KILLED when interrupted (what was measured is kept); else FAILED, also when every
    point was measured and none is valid."""
    if str(getattr(campaign, "status", "")) == "interrupted":
        return "KILLED"
    return "FINISHED" if campaign_valid(campaign) else "FAILED"


def campaign_tags(cfg, campaign, airflow: dict[str, str] | None = None) -> dict[str, str]:
    commit = git_commit()
    tags = {
        "role": ROLE_CAMPAIGN,
        "execution_id": campaign.execution_id,
        "campaign": cfg.campaign.name,
        "fingerprint": campaign.fingerprint,
        "git_commit": commit,
        "workload_name": cfg.workload.name,
        "engine_version": cfg.engine.version,
        "benchcamp_version": _benchcamp_version(),
        "provider": cfg.provider.kind,
        "valid": str(campaign_valid(campaign)).lower(),
        "headline_point": str((campaign.headline or {}).get("point", "")),
        # which throughput definition total_tokens_per_s_per_gpu is (the span one is ..._span)
        "throughput_headline": _throughput_headline(),
        "started_at": campaign.started_at,
        "finished_at": campaign.finished_at,
        **comparability_key(cfg, campaign.workload_digest, headline_point(campaign)),
    }
    tags.update(_topology_tags(cfg))
    from benchcamp.sim import fidelity

    tags.update(fidelity.mlflow_tags(fidelity.for_config(cfg)))  # how far to trust a simulated headline
    if campaign.error:
        tags["error"] = redact(str(campaign.error))[:4000]
    for k, v in airflow_ids(airflow).items():
        tags[f"airflow.{k}"] = v
    out = {TAG + k: str(v) for k, v in tags.items()}
    out["mlflow.runName"] = run_name(cfg, campaign)
    if commit != "unknown":
        out["mlflow.source.git.commit"] = commit
    return out


def _topology_tags(cfg) -> dict[str, str]:
    """The deployment as tags: its diagram (``P: 1x(TP1 DP8 EP8) 8 GPU -> D: ...``) and flat ``topology.*``
    figures (shape, GPUs, per role instances / GPUs / TP / DP / EP / speculative / CPU KV tier)."""
    from benchcamp.config import topology_of
    from benchcamp.topology.candidates import diagram, topology_params

    topo = topology_of(cfg)
    return {"topology": diagram(topo, cfg.hardware.gpu), **topology_params(topo)}


def _topology_params(cfg) -> dict[str, str]:
    """The deployment's flat ``topology.*`` figures as params too (searchable, comparable across runs)."""
    from benchcamp.config import topology_of
    from benchcamp.topology.candidates import topology_params

    return topology_params(topology_of(cfg))


def _find(c, exp_id: str, filter_string: str):
    runs = c.search_runs([exp_id], filter_string=filter_string, max_results=2, order_by=["attributes.start_time ASC"])
    return runs[0] if runs else None


def _upsert(
    c,
    exp_id: str,
    filter_string: str,
    tags: dict[str, str],
    params: dict[str, str],
    metrics: dict[str, float],
    start_ms: int,
) -> str:
    """Find the run matching the filter and update it, or create it: the idempotency of logging.

    Tags, params and metrics go in as few requests as MLflow's batch limits allow
    (each request is a round trip to a remote server)."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    found = _find(c, exp_id, filter_string)
    if found is None:
        run_id, logged, new_tags = c.create_run(exp_id, start_time=start_ms, tags=tags).info.run_id, {}, []
    else:
        run_id, logged = found.info.run_id, found.data.params
        new_tags = [RunTag(k, v) for k, v in tags.items()]
    changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
    if changed:
        raise TrackingError(
            f"run {run_id} already holds other values for params {', '.join(changed[:5])}: the same "
            "execution id was logged with another config; use a new execution id for a new config"
        )
    new_params = [Param(k, v) for k, v in sorted(params.items()) if k not in logged]
    now = int(time.time() * 1000)
    new_metrics = [Metric(k, v, now, 0) for k, v in sorted(metrics.items())]
    try:
        # MLflow's log_batch limits: 100 params, 100 tags, 1000 entities in all.
        while new_params or new_tags or new_metrics:
            ps, new_params = new_params[:100], new_params[100:]
            ts, new_tags = new_tags[:100], new_tags[100:]
            room = 1000 - len(ps) - len(ts)
            ms, new_metrics = new_metrics[:room], new_metrics[room:]
            c.log_batch(run_id, metrics=ms, params=ps, tags=ts)
    except MlflowException as exc:
        raise TrackingError(f"could not log to run {run_id}: {exc}") from exc
    return run_id


def _set_tags(c, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), 100):
        c.log_batch(run_id, tags=items[i : i + 100])


def workload_dataset(campaign, workload: tuple[Path, str] | None = None):
    """The workload as an MLflow dataset: per-request shape (no token ids), digest = workload digest.

    ``workload``: (a local copy, where it came from) when the file is not at the campaign's
    path on this machine (another worker built it; the copy came from the results store)."""
    import pandas as pd
    import pyarrow.parquet as pq
    from mlflow.data.pandas_dataset import from_pandas

    cols = ["session_id", "parent", "turn", "prompt_len", "output_len", "think_s"]
    path, source = workload or (Path(campaign.workload_path), str(campaign.workload_path))
    try:
        df = pq.read_table(path, columns=cols).slice(0, DATASET_MAX_ROWS).to_pandas()
    except (OSError, ValueError, KeyError):
        # No workload file here (e.g. an endpoint run fed elsewhere): its stats stand in for it.
        df = pd.DataFrame(
            [{k: v for k, v in (campaign.workload_stats or {}).items() if isinstance(v, (int, float, str))}]
            or [{"digest": campaign.workload_digest}]
        )
    with warnings.catch_warnings():  # source-kind guess and integer-schema hints: noise here
        warnings.simplefilter("ignore")
        return from_pandas(
            df, source=source, name=campaign.config.workload.name, digest=dataset_digest(campaign.workload_digest)
        )


def dataset_digest(workload_digest: str) -> str:
    return workload_digest[:DATASET_DIGEST_LEN]


# How SQLite, MySQL and PostgreSQL word a unique-constraint failure (MLflow passes the DB's message on).
_UNIQUE_VIOLATION = ("UNIQUE constraint failed", "Duplicate entry", "duplicate key value")


def _log_dataset(c, run_id: str, campaign, workload: tuple[Path, str] | None) -> None:
    """Log the workload dataset as the run's input. Executions of one workload tracked at once (a
    matrix's track tasks on two workers) race to create its dataset row: MLflow looks the row up,
    then inserts it, and the other's insert can land in between (``UNIQUE constraint failed:
    datasets...``). The row then exists: the same call again finds it (it cost the DAG a task retry)."""
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.exceptions import MlflowException

    ds = workload_dataset(campaign, workload)
    with warnings.catch_warnings():  # MLflow's schema-inference hints about integer columns
        warnings.simplefilter("ignore")
        entity = ds._to_mlflow_entity()
    inputs = [DatasetInput(entity, tags=[InputTag("mlflow.data.context", "workload")])]
    try:
        c.log_inputs(run_id, inputs)
    except MlflowException as exc:
        if "datasets" not in str(exc) or not any(s in str(exc) for s in _UNIQUE_VIOLATION):
            raise
        c.log_inputs(run_id, inputs)


def _upload(c, run_id: str, files: Iterable[tuple[Path | None, str | None]]) -> None:
    for path, artifact_path in files:
        if path is not None and Path(path).is_file():
            c.log_artifact(run_id, str(path), artifact_path)


def _json_file(tmp: Path, name: str, data: Any) -> Path:
    p = tmp / name
    p.write_text(dumps(data, indent=2, sort_keys=True))  # NaN as null: benchcamp.results.jsonsafe
    return p


def _sim_error_metrics(cfg) -> dict[str, float]:
    from benchcamp.sim import fidelity

    return fidelity.mlflow_metrics(fidelity.for_config(cfg))


def log_campaign(
    cfg,
    campaign,
    airflow: dict[str, str] | None = None,
    uri: str | None = None,
    workload: tuple[Path, str] | None = None,
) -> str:
    """Log ``campaign`` (a :class:`benchcamp.campaign.CampaignResult`); returns the parent run id.

    Idempotent per ``campaign.execution_id``: parent and child runs are found by
    their tags and updated. ``airflow`` = {"dag_id", "run_id"} when not in the env;
    ``workload``: see :func:`workload_dataset`.
    """
    uri = uri or cfg.tracking.mlflow_uri
    c = client(uri)
    exp_id = experiment_id(c, cfg.experiment_name, uri)
    ex = campaign.execution_id
    if "'" in ex:
        raise TrackingError(f"execution id {ex!r}: quotes are not allowed; use letters, digits, - _ .")
    parent_id = _upsert(
        c,
        exp_id,
        f"tags.`{TAG}role` = '{ROLE_CAMPAIGN}' AND tags.`{TAG}execution_id` = '{ex}'",
        campaign_tags(cfg, campaign, airflow),
        {**safe_params(cfg.flat()), **_topology_params(cfg)},
        numeric_metrics(campaign.headline or {}) | headline_metrics(campaign.headline or {}) | _sim_error_metrics(cfg),
        mlflow_time(campaign.started_at),
    )
    _log_dataset(c, parent_id, campaign, workload)
    for name, value in capacity_metrics(getattr(campaign, "capacity", None)).items():
        c.log_metric(parent_id, name, value)

    with tempfile.TemporaryDirectory(prefix="benchcamp-mlflow-") as d:
        tmp = Path(d)
        config_json = _json_file(tmp, "config.json", scrub(cfg.to_dict()))
        summary = Path(campaign.results_dir) / "summary.json"
        if not summary.is_file():
            summary = _json_file(
                tmp,
                "summary.json",
                {
                    "headline": campaign.headline,
                    "points": {p.label: {"valid": p.valid, "reasons": p.reasons, **p.summary} for p in campaign.points},
                },
            )
        engine_log = None
        if campaign.engine_log and Path(campaign.engine_log).is_file():
            # A copy with every registered secret (the deployment's API key) removed.
            engine_log = tmp / Path(campaign.engine_log).name
            engine_log.write_text(redact(Path(campaign.engine_log).read_text(errors="replace")))
        _upload(c, parent_id, [(config_json, None), (summary, None), (engine_log, "logs")])

        for p in campaign.points:
            child_id = _log_point(c, exp_id, parent_id, campaign, p, tmp)
            _upload(c, child_id, _point_files(p))
        _drop_stale_points(c, exp_id, parent_id, {p.label for p in campaign.points})

    c.set_terminated(parent_id, status=campaign_status(campaign), end_time=mlflow_time(campaign.finished_at))
    return parent_id


def point_tags(cfg, campaign) -> dict[str, str]:
    """What identifies a point's run on its own (filter or group children across campaigns): GPU, engine
    kind and version, model, clock, topology, fingerprint."""
    return {
        f"{TAG}gpu": cfg.hardware.gpu,
        f"{TAG}gpu_count": str(cfg.hardware.gpu_count),
        f"{TAG}engine_kind": cfg.engine.kind,
        f"{TAG}engine_version": cfg.engine.version,
        f"{TAG}model": cfg.engine.model,
        f"{TAG}clock": cfg.load.clock,
        f"{TAG}topology": _topology_tags(cfg)["topology"],
        f"{TAG}fingerprint": campaign.fingerprint,
        f"{TAG}campaign": cfg.campaign.name,
    }


def _agentx_tags(summary: dict[str, Any]) -> dict[str, str]:
    """load.agentx's verdict as tags: the scenario, submission_valid, and the overrides that made it invalid."""
    if "agentx_submission_valid" not in summary:
        return {}
    return {
        f"{TAG}agentx_scenario": str(summary.get("agentx_scenario") or "agentx"),
        f"{TAG}agentx_prompt": str(summary.get("agentx_prompt") or "-"),
        f"{TAG}agentx_submission_valid": str(bool(summary["agentx_submission_valid"])).lower(),
        f"{TAG}agentx_submission_reasons": redact(str(summary.get("agentx_submission_reasons") or ""))[:4000] or "-",
        f"{TAG}agentx_overrides": redact(str(summary.get("agentx_overrides") or ""))[:4000] or "-",
        **(
            {f"{TAG}agentx_model_map": str(summary["agentx_model_map"])[:4000]} if "agentx_model_map" in summary else {}
        ),
    }


def _log_point(c, exp_id: str, parent_id: str, campaign, p, tmp: Path) -> str:
    tags = {
        **point_tags(campaign.config, campaign),
        "mlflow.parentRunId": parent_id,
        "mlflow.runName": p.label,
        f"{TAG}role": ROLE_POINT,
        f"{TAG}execution_id": campaign.execution_id,
        f"{TAG}point": p.label,
        f"{TAG}level": str(p.level),
        f"{TAG}valid": str(bool(p.valid)).lower(),
        f"{TAG}reasons": redact("; ".join(map(str, p.reasons)))[:4000] or "-",
        # the window's steadiness (benchcamp.metrics.steadiness; the figures are metrics) and a replay note
        f"{TAG}steady": "-" if p.summary.get("steady") is None else str(bool(p.summary["steady"])).lower(),
        f"{TAG}steady_reasons": redact(str(p.summary.get("steady_reasons") or ""))[:4000] or "-",
        f"{TAG}replay_note": str(p.summary.get("replay_note") or "")[:4000] or "-",
        **_agentx_tags(p.summary),
        # the measurement window, so records read back from MLflow are windowed the same way
        f"{TAG}window": ",".join(repr(float(t)) for t in (getattr(p, "window", None) or (0.0, 0.0))),
    }
    child_id = _upsert(
        c,
        exp_id,
        f"tags.mlflow.parentRunId = '{parent_id}' AND tags.`{TAG}point` = '{p.label}'",
        tags,
        {"point": p.label, "level": str(p.level)},
        numeric_metrics(p.summary) | headline_metrics(p.summary),
        mlflow_time(campaign.started_at),
    )
    trials = getattr(p, "trials", None)
    if trials is not None:
        _log_trials(c, child_id, trials)
    point_dir = tmp / p.label
    point_dir.mkdir(exist_ok=True)
    doc = {"label": p.label, "level": p.level, "valid": p.valid, "reasons": p.reasons, **p.summary}
    if trials is not None:  # every value finite or None (benchcamp.results.trials)
        from benchcamp.results.trials import TRIALS_KEY

        doc[TRIALS_KEY] = trials.to_dict()
    _upload(c, child_id, [(_json_file(point_dir, "summary.json", doc), None)])
    # an invalid point is no figure to read: not the green tick of a finished run
    c.set_terminated(child_id, status="FINISHED" if p.valid else "FAILED", end_time=mlflow_time(campaign.finished_at))
    return child_id


# A point's trials in its child run (load.trials > 1): each trial's figure under ``trial/<metric>`` at step k
# (MLflow charts a metric's steps as a line), the interval over them under ``ci_low/`` and ``ci_high/``.
TRIAL_PREFIX = "trial/"
CI_LOW_PREFIX = "ci_low/"
CI_HIGH_PREFIX = "ci_high/"


def trial_metrics(trials) -> tuple[list[tuple[str, float, int]], dict[str, float]]:
    """(``trial/<metric>``, value, step = trial number) per trial and figure, and the point's interval
    ``ci_low/<metric>`` / ``ci_high/<metric>`` (finite values only)."""
    steps = [
        (TRIAL_PREFIX + m, float(v), t.trial)
        for t in trials.trials
        for m, v in t.figures.items()
        if v is not None and math.isfinite(v)
    ]
    bounds = {}
    for m, f in trials.figures.items():
        if f.ci_low is not None and f.ci_high is not None:
            bounds[CI_LOW_PREFIX + m] = float(f.ci_low)
            bounds[CI_HIGH_PREFIX + m] = float(f.ci_high)
    return steps, bounds


def _log_trials(c, run_id: str, trials) -> None:
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    steps, bounds = trial_metrics(trials)
    entities = [Metric(k, v, now, step) for k, v, step in steps] + [Metric(k, v, now, 0) for k, v in bounds.items()]
    tags = [RunTag(f"{TAG}trials", str(trials.measured)), RunTag(f"{TAG}trials_asked", str(trials.asked))]
    for i in range(0, len(entities), 1000):
        c.log_batch(run_id, metrics=entities[i : i + 1000], tags=tags if i == 0 else [])


def _point_files(p) -> list[tuple[Path | None, str | None]]:
    """A point's records and point.json for its child run; with trials, every trial's under ``trial-<k>/``."""
    trials = getattr(p, "trials", None)
    if trials is None:
        return [(Path(p.records_path), None), (Path(p.records_path).parent / "point.json", None)]
    return [
        (p.folder / t.folder / name, t.folder)
        for t in trials.trials
        for name in ("records.parquet", "point.json", "summary.json")
    ]


def _drop_stale_points(c, exp_id: str, parent_id: str, labels: set[str]) -> None:
    """A re-run with fewer points: the children it no longer has are deleted, not left as ghosts."""
    for run in c.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=1000):
        if run.data.tags.get(f"{TAG}point") not in labels:
            c.delete_run(run.info.run_id)


def log_verdicts(uri: str, run_id: str, verdicts: list) -> bool:
    """Verdicts as tags ``benchcamp.verdict.<metric>``; returns whether any regressed."""
    from benchcamp.tracking.verdicts import verdict_tags

    tags, regressed = verdict_tags(verdicts)
    c = client(uri)
    _set_tags(c, run_id, tags)
    return regressed


def log_report(uri: str, run_id: str, report_dir: str | Path, figures: dict | None = None) -> None:
    """The rendered report directory under ``report/`` and each figure as an image artifact."""
    c = client(uri)
    report_dir = Path(report_dir)
    if report_dir.is_dir():
        c.log_artifacts(run_id, str(report_dir), "report")
    for name, fig in (figures or {}).items():
        c.log_figure(run_id, fig, f"figures/{name}.png")
