"""The campaign's Airflow tasks: thin adapters over benchcamp.

Setup/teardown roles are assigned in tasks/graph.py (``as_setup``/``as_teardown``):
the ``@teardown`` decorator cannot be called twice in one process in Airflow
3.3 (it stores its trigger rule on the decorator), and both DAGs call it.

Per matrix entry (one engine configuration = one node), the DAG runs:
prepare_workload -> provision_node (setup) -> deploy_engine (setup) -> sweep
-> stop_engine (teardown) -> deprovision_node (teardown), then summarize ->
track -> evaluate (compare + report); ``verdict`` fails the run on a failed
sweep or a regression and notifies.

Everything between tasks goes through the results store (``results.store``:
a folder by default, ``s3://`` in production) or small XComs, never through
one worker's disk. The deployment XCom carries the engine's API key (the
sweep needs it): every task that receives it registers it with Airflow's
secrets masker first, and the XCom field is named ``api_key``, which Airflow
masks when rendering. The key dies with the deployment.

Airflow retries: provision reuses the node of the execution (ec2: tag lookup),
deploy kills a previous attempt's engine, the sweep skips points already in
the store, and tracking is idempotent per execution id.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.sdk import get_current_context, task

from tasks.form import FIELDS, PARAMS_FILE, PROJECT_DIR

log = logging.getLogger(__name__)

GPU_POOL = "gpu_nodes"


# -- helpers (no airflow state) ---------------------------------------------

def _mask(secret: str | None, name: str | None = "api_key") -> None:
    """Hide ``secret`` in this task's log (Airflow's masker) and in benchcamp's redaction.
    ``name`` None masks unconditionally (Airflow only masks a named secret whose name looks sensitive)."""
    if not secret:
        return
    from airflow.sdk.log import mask_secret

    from benchcamp import secrets
    mask_secret(secret, name)
    secrets.register(secret)


def _mask_config_secrets(data: Any) -> None:
    """Mask the secrets a config (or a run's params) carries, in this task's log: values after
    secret flags in lists (``engine.extra_args: [--hf-token, hf_...]``, as argv_secrets finds
    them for campaign files and MLflow) and values of secret-named keys. Every task runs in its
    own process, so each task that builds the config registers them again."""
    from benchcamp.secrets import MIN_SECRET_LEN
    from benchcamp.tracking.redact import argv_secrets, is_secret_key

    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, str) and is_secret_key(str(k)):
                if len(v) >= MIN_SECRET_LEN:  # a short value ("none") would mask ordinary words
                    _mask(v, None)
            else:
                _mask_config_secrets(v)
    elif isinstance(data, (list, tuple)):
        for value in argv_secrets(list(data)):
            _mask(value, None)
        for v in data:
            _mask_config_secrets(v)


def _abs(path: str) -> str:
    return str(path if Path(path).is_absolute() else PROJECT_DIR / path)


def _abs_mlflow(uri: str) -> str:
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + _abs(uri[len(prefix):])
    return uri


def form_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """The trigger form's values as dotted overrides (empty values keep params.yaml's)."""
    out: dict[str, Any] = {}
    for name, dotted in FIELDS.items():
        value = params.get(name)
        if value is None or value == "":
            continue
        if name == "workload":
            out.update({"workload.name": value, "workload.spec": f"workloads/{value}.yaml",
                        "workload.data": f"workloads/data/{value}.parquet"})
        else:
            out[dotted] = value
    out.update(params.get("overrides") or {})
    return out


def resolve_items(params: dict[str, Any], dag_id: str, run_id: str,
                  params_file: str | Path = PARAMS_FILE) -> list[dict[str, Any]]:
    """params.yaml + form + each matrix entry -> one resolved config per engine configuration."""
    from benchcamp.config import ConfigError, load_config
    from benchcamp.deploy import effective_config
    from benchcamp.provision.base import safe_name

    matrix = params.get("matrix") or [{}]
    if not isinstance(matrix, list) or not all(isinstance(m, dict) for m in matrix):
        raise ConfigError("matrix: expected a list of override dicts, e.g. [{}, {\"engine.max_num_seqs\": 128}]")
    items = []
    for i, entry in enumerate(matrix):
        overrides = {**form_overrides(params), **entry}
        try:
            cfg = effective_config(load_config(params_file, overrides))
        except ConfigError as exc:
            raise ConfigError(f"matrix[{i}] {entry or '(base)'}: {exc}") from None
        data = cfg.to_dict()
        # Workers may run in another directory: anchor relative paths at the project.
        data["workload"]["spec"] = _abs(data["workload"]["spec"])
        data["workload"]["data"] = _abs(data["workload"]["data"])
        data["results"]["store"] = data["results"]["store"] if "://" in data["results"]["store"] else _abs(data["results"]["store"])
        data["tracking"]["mlflow_uri"] = _abs_mlflow(data["tracking"]["mlflow_uri"])
        execution_id = safe_name(f"{dag_id}.{run_id}.m{i}")
        items.append({"index": i, "execution_id": execution_id, "config": data, "fingerprint": cfg.fingerprint(),
                      "overrides": entry, "store_key": f"{safe_name(cfg.campaign.name)}/{execution_id}"})
    return items


@contextmanager
def _plain_main():
    """Hide ``__main__``'s file while the load generator starts its worker processes.

    multiprocessing's spawn/forkserver children re-run the parent's ``__main__``;
    in an Airflow worker that is the ``airflow`` launcher, which fails to
    initialise inside a task's child ("Could not parse SQLAlchemy URL").
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _cfg(item: dict[str, Any]):
    from benchcamp.config import from_dict
    _mask_config_secrets(item["config"])
    return from_dict(item["config"], f"config of {item['execution_id']}")


def _store(item: dict[str, Any]):
    from benchcamp.results_store import open_store
    return open_store(item["config"]["results"]["store"], base=PROJECT_DIR)


def _airflow_ids() -> dict[str, str]:
    ctx = get_current_context()
    return {"dag_id": ctx["dag"].dag_id, "run_id": ctx["run_id"]}


def load_campaign(item: dict[str, Any], workdir: Path):
    """The CampaignResult written by ``summarize``, with paths under ``workdir``."""
    from benchcamp.campaign import CampaignResult

    store = _store(item)
    store.get_dir(f"{item['store_key']}/campaign", workdir / "campaign")
    points_dir = workdir / "points"
    if store.exists(f"{item['store_key']}/points"):
        store.get_dir(f"{item['store_key']}/points", points_dir)
    return CampaignResult.load(workdir / "campaign", records_dir=points_dir)


# -- tasks ---------------------------------------------------------------------

@task(retries=0)
def resolve_config() -> list[dict[str, Any]]:
    """The trigger form (or dag_run conf) on top of params.yaml, one entry per matrix row."""
    ctx = get_current_context()
    _mask_config_secrets(dict(ctx["params"]))  # the matrix and overrides, logged below and in config errors
    items = resolve_items(dict(ctx["params"]), ctx["dag"].dag_id, ctx["run_id"])
    for it in items:
        _mask_config_secrets(it["config"])
    for it in items:
        log.info("matrix[%d] %s: fingerprint %s, execution %s", it["index"], it["overrides"] or "(base)",
                 it["fingerprint"], it["execution_id"])
    return items


@task
def prepare_workload(item: dict[str, Any]) -> dict[str, Any]:
    """Build (or reuse) the workload, and publish it in the store by digest."""
    from benchcamp.workload import ensure_workload
    from benchcamp.workload.stats import workload_stats

    cfg = _cfg(item)
    workload, path, digest = ensure_workload(cfg)
    store = _store(item)
    key = f"workloads/{digest}.parquet"
    if not store.exists(key):
        store.put_file(path, key)
    stats = workload_stats(workload)
    log.info("workload %s: %d sessions, digest %s", workload.name, len(workload.sessions), digest[:12])
    return {"key": key, "digest": digest, "path": str(path),
            "stats": json.loads(json.dumps(stats, default=float))}


@task(pool=GPU_POOL, retries=2)
def provision_node(item: dict[str, Any]) -> dict[str, Any]:
    """Idempotent per execution id: a retry finds the node it already made."""
    from benchcamp.provision import get_provider
    node = get_provider(_cfg(item)).provision(item["execution_id"])
    log.info("node %s (%s) at %s", node.node_id, node.kind, node.host)
    return node.to_dict()


def _endpoint_key(cfg) -> str | None:
    conn_id = cfg.provider.endpoint.airflow_conn_id
    if cfg.provider.kind != "endpoint" or not conn_id:
        return None
    from airflow.sdk import Connection
    conn = Connection.get(conn_id)
    return conn.password or None


@task(pool=GPU_POOL, retries=1)
def deploy_engine(item: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Start the engine, wait until it serves the model; cleans up after itself on failure
    (Airflow skips a teardown whose setup failed)."""
    from benchcamp.campaign import startup_timeout
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.provision import Node

    cfg = _cfg(item)
    key = _endpoint_key(cfg)
    _mask(key)
    log_dir = Path(tempfile.gettempdir()) / "benchcamp-engines" / item["execution_id"]
    dep = deploy(Node.from_dict(node), cfg, log_dir=log_dir, api_key=key)
    _mask(dep.api_key)
    try:
        wait_ready(dep, startup_timeout(cfg))  # also checks the key and the served model
    except Exception as exc:
        _record_error(item, "deploy", exc)
        _upload_engine_log(item, dep)
        stop(dep)
        raise
    _clear_error(item, "deploy")  # an earlier attempt's failure is not this run's
    log.info("engine ready at %s (%s)", dep.endpoint, dep.handle.get("engine"))
    return dep.to_dict()


@task(pool=GPU_POOL, retries=0, max_active_tis_per_dagrun=1)
def sweep(item: dict[str, Any], deployment: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    """Measure every level in order on this engine, uploading each point as it completes.

    Points already in the store (an earlier attempt) are skipped. A point that
    ends early (engine died) fails the task after its records are uploaded.
    ``max_active_tis_per_dagrun=1``: two matrix entries never measure at once,
    so they do not compete for this machine's client CPUs.
    """
    from benchcamp.loadgen import PointSpec, run_point
    from benchcamp.workload.model import read_workload

    _mask(deployment.get("api_key"))
    cfg = _cfg(item)
    store = _store(item)
    done: list[str] = []
    with tempfile.TemporaryDirectory(prefix="benchcamp-sweep-") as tmp:
        wl_path = store.get_file(workload["key"], Path(tmp) / "workload.parquet")
        wl = read_workload(wl_path)
        for level in cfg.load.levels:
            spec = PointSpec.from_config(cfg, level, item["execution_id"])
            key = f"{item['store_key']}/points/{spec.label}"
            if store.exists(f"{key}/point.json"):
                log.info("point %s already measured (earlier attempt); skipping", spec.label)
                done.append(spec.label)
                continue
            out = Path(tmp) / spec.label
            try:
                with _plain_main():
                    result = run_point(deployment["endpoint"], deployment.get("api_key"), cfg.served_model_name,
                                       wl, spec, out, progress=None)
            except Exception as exc:
                _record_error(item, "sweep", exc)
                raise
            finally:
                if out.exists():
                    store.put_dir(out, key)  # keep whatever was measured, crash or not
            done.append(spec.label)
            log.info("point %s: %d requests, window %s", spec.label, result.requests, result.window)
            if result.aborted:
                exc = RuntimeError(f"sweep point {spec.label} aborted: {result.aborted}; "
                                   f"{result.requests} records kept at {store.url(key)}")
                _record_error(item, "sweep", exc)
                raise exc
    _clear_error(item, "sweep")
    return done


def _upload_engine_log(item: dict[str, Any], dep) -> None:
    from benchcamp import secrets
    from benchcamp.deploy import Deployment

    dep = dep if isinstance(dep, Deployment) else Deployment.from_dict(dep)
    if not dep.log_path or not Path(dep.log_path).exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "engine.log"
        clean.write_text(secrets.redact(Path(dep.log_path).read_text(errors="replace"), [dep.api_key]))
        _store(item).put_file(clean, f"{item['store_key']}/engine.log")


@task(retries=3)
def stop_engine(item: dict[str, Any], deployment: dict[str, Any]) -> None:
    from benchcamp.deploy import Deployment, stop

    _mask(deployment.get("api_key"))
    _mask_config_secrets(item["config"])
    dep = Deployment.from_dict(deployment)
    stop(dep)
    _upload_engine_log(item, dep)


@task(retries=3)
def deprovision_node(item: dict[str, Any], node: dict[str, Any]) -> None:
    from benchcamp.provision import Node, get_provider
    get_provider(_cfg(item)).deprovision(Node.from_dict(node))
    log.info("node %s released", node["node_id"])


@task(trigger_rule="all_done", retries=1)
def summarize(item: dict[str, Any], workload: dict[str, Any] | None) -> dict[str, Any]:
    """Summaries of every point in the store, measured before any failure included."""
    from benchcamp.campaign import CampaignResult, measured_points, summarize_point, utcnow, write_campaign_files
    from benchcamp.loadgen import PointSpec
    from benchcamp.metrics import pick_headline

    cfg = _cfg(item)
    store = _store(item)
    ctx = get_current_context()
    with tempfile.TemporaryDirectory(prefix="benchcamp-summary-") as tmp:
        tmp = Path(tmp)
        points_dir = tmp / "points"
        if store.exists(f"{item['store_key']}/points"):
            store.get_dir(f"{item['store_key']}/points", points_dir)
        stats = (workload or {}).get("stats") or {}
        measured = measured_points(cfg, points_dir)
        outcomes = [summarize_point(cfg, r, stats.get("theoretical_hit_rate")) for r in measured]
        missing = sorted({PointSpec.from_config(cfg, lv).label for lv in cfg.load.levels} - {r.label for r in measured})
        aborted = [f"point {p.label}: {p.aborted}" for p in outcomes if p.aborted]
        recorded = _recorded_errors(item, tmp)
        errors = recorded + [a for a in aborted if not any(a.split(": ", 1)[-1] in r for r in recorded)]
        if missing:
            errors.append(f"not measured: {', '.join(missing)}")
        campaign_dir = tmp / "campaign"
        campaign_dir.mkdir()
        if store.exists(f"{item['store_key']}/engine.log"):
            store.get_file(f"{item['store_key']}/engine.log", campaign_dir / "engine.log")
        result = CampaignResult(
            execution_id=item["execution_id"], config=cfg, fingerprint=item["fingerprint"],
            workload_path=Path((workload or {}).get("path") or cfg.workload.data),
            workload_digest=(workload or {}).get("digest", ""), points=outcomes, results_dir=campaign_dir,
            headline=pick_headline([p.summary | {"valid": p.valid, "point": p.label} for p in outcomes],
                                   cfg.slo) if outcomes else {},
            started_at=str(ctx["dag_run"].start_date.isoformat() if ctx["dag_run"].start_date else utcnow()),
            finished_at=utcnow(), engine_log=campaign_dir / "engine.log" if (campaign_dir / "engine.log").exists() else None,
            workload_stats=stats, error="; ".join(errors) or None)
        write_campaign_files(result)
        store.put_dir(campaign_dir, f"{item['store_key']}/campaign")
    log.info("matrix[%d]: %d point(s) summarized%s", item["index"], len(outcomes),
             f"; errors: {result.error}" if result.error else "")
    return {"points": [p.label for p in outcomes], "error": result.error, "headline": result.headline}


def _record_error(item: dict[str, Any], step: str, exc: BaseException) -> None:
    """Keep a failed step's reason in the store, for the summary and the verdict."""
    from benchcamp import secrets
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / f"{step}.txt"
        f.write_text(secrets.redact(f"{type(exc).__name__}: {exc}"))
        _store(item).put_file(f, f"{item['store_key']}/errors/{step}.txt")


def _clear_error(item: dict[str, Any], step: str) -> None:
    """A retried step that succeeded: blank its recorded failure (the store has no delete)."""
    store = _store(item)
    key = f"{item['store_key']}/errors/{step}.txt"
    if store.exists(key):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "blank.txt").write_text("")
            store.put_file(Path(tmp) / "blank.txt", key)


def _recorded_errors(item: dict[str, Any], tmp: Path) -> list[str]:
    store = _store(item)
    if not store.exists(f"{item['store_key']}/errors"):
        return []
    d = store.get_dir(f"{item['store_key']}/errors", tmp / "errors")
    texts = ((f.stem, f.read_text().strip()) for f in sorted(d.glob("*.txt")))
    return [f"{step}: {text}" for step, text in texts if text]


@task(retries=2)
def track(item: dict[str, Any], summary: dict[str, Any]) -> str:
    """MLflow: parent run per execution, child run per point (idempotent)."""
    from benchcamp.tracking import log_campaign

    _mask_config_secrets(item["config"])
    with tempfile.TemporaryDirectory(prefix="benchcamp-track-") as tmp:
        campaign = load_campaign(item, Path(tmp))
        run_id = log_campaign(campaign.config, campaign, airflow=_airflow_ids())
    log.info("MLflow run %s at %s", run_id, item["config"]["tracking"]["mlflow_uri"])
    return run_id


@task(retries=1)
def evaluate(item: dict[str, Any], mlflow_run_id: str) -> dict[str, Any]:
    """Compare with the baselines and render the report (benchcamp.report.flow, as `benchcamp run`),
    tag the verdicts on the MLflow run; verdicts.json goes to the store beside the report."""
    from benchcamp.report.flow import finish

    _mask_config_secrets(item["config"])
    with tempfile.TemporaryDirectory(prefix="benchcamp-eval-") as tmp:
        campaign = load_campaign(item, Path(tmp))
        report_dir = Path(tmp) / "report"
        outcome = finish(campaign.config, campaign, report_dir, run_id=mlflow_run_id)
        for note in outcome.notes:
            log.info("compare: %s", note)
        (report_dir / "verdicts.json").write_text(json.dumps(
            {"verdicts": [v.to_dict() for v in outcome.verdicts], "regressed": outcome.regressed,
             "notes": outcome.notes}, indent=2, default=str))
        _store(item).put_dir(report_dir, f"{item['store_key']}/report")
    return {"regressed": outcome.regressed, "verdicts": len(outcome.verdicts),
            "report_url": _store(item).url(f"{item['store_key']}/report"), "mlflow_run_id": mlflow_run_id}


@task(trigger_rule="all_done", retries=0)
def verdict(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Fail the run on a failed sweep or a regression, after notifying."""
    from benchcamp.results_store import StoreError

    problems, summary = [], {}
    for item in items:
        _mask_config_secrets(item["config"])  # the problems name each item by its matrix overrides
        store = _store(item)
        name = f"matrix[{item['index']}] {item['overrides'] or '(base)'}"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                doc = json.loads(store.get_file(f"{item['store_key']}/campaign/summary.json",
                                                Path(tmp) / "s.json").read_text())
                verdicts_doc = {}
                if store.exists(f"{item['store_key']}/report/verdicts.json"):
                    verdicts_doc = json.loads(store.get_file(f"{item['store_key']}/report/verdicts.json",
                                                             Path(tmp) / "v.json").read_text())
        except StoreError as exc:
            problems.append(f"{name}: no results ({exc})")
            continue
        if doc.get("error"):
            problems.append(f"{name}: {doc['error']}")
        regressed = [v for v in verdicts_doc.get("verdicts", []) if v.get("verdict") == "regressed"]
        if regressed:
            problems.append(f"{name}: REGRESSION in " + ", ".join(
                f"{v['metric']} {v['delta_rel']:+.1%} vs {v['baseline']}" for v in regressed))
        if not verdicts_doc and not doc.get("error"):
            problems.append(f"{name}: not evaluated (see the evaluate task's log)")
        summary[item["execution_id"]] = {"headline": doc.get("headline"), "error": doc.get("error"),
                                         "regressed": [v["metric"] for v in regressed]}
    if problems:
        from tasks.notifiers import CampaignNotifier
        ctx = get_current_context()
        CampaignNotifier(target=ctx["params"].get("notify", "log"), problems=problems).notify(ctx)
        raise RuntimeError("campaign failed:\n  " + "\n  ".join(problems))
    return summary


@task(retries=1)
def reap_expired(region: str | None = None) -> list[str]:
    """Terminate expired benchcamp EC2 nodes (the safety net behind every teardown)."""
    import boto3

    from benchcamp.config import load_config
    from benchcamp.provision.reaper import reap

    cfg = load_config(PARAMS_FILE)
    region = region or os.environ.get("BENCHCAMP_REAP_REGION") or cfg.provider.ec2.region
    if boto3.Session().get_credentials() is None:
        log.warning("no AWS credentials here: nothing to reap (set them to let the reaper guard EC2 nodes)")
        return []
    return [r.instance_id for r in reap(boto3.client("ec2", region_name=region))]
