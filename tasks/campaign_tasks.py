"""The campaign's Airflow tasks: each a thin wrapper around one step of
benchcamp.campaign.steps (the steps `benchcamp run` runs in one process).

Between tasks travel only small JSON and store keys (benchcamp.campaign.layout),
so any task may run on any worker: a step's typed result (benchcamp.campaign.handoff)
leaves its task as ``to_dict()`` and the next task reads it back with ``from_dict``. No secret travels: XCom (and so the rendered
template fields, which show the tasks' arguments) carries references
(benchcamp.secrets.refs) that each task resolves in its own process:
``engine.hf_token_ref``, the deployment's ``api_key_ref``, an endpoint's Airflow
connection. resolve_config refuses a secret typed as a value (conf, form,
``engine.extra_args``) before anything stores it beyond the run's conf. Every
value resolved is handed to Airflow's masker, and every task registers the
secrets its config could still carry first (:func:`masked`).
The tasks whose log ends with a table or a summary line do not log their return value (Airflow's "Done.
Returned value was: {...}"): it is in XCom, and JSON-compliant (benchcamp.results.jsonsafe).
Airflow retries: provision reuses the execution's node, deploy kills a previous
attempt's engine, the sweep skips points already stored, tracking is idempotent.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import PokeReturnValue, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

from benchcamp.campaign.form import PARAMS_FILE, PROJECT_DIR, resolve_items
from benchcamp.campaign.handoff import JsonValue, MatrixItem

if TYPE_CHECKING:
    from benchcamp.campaign.layout import StoreLayout
    from benchcamp.config import Config
    from benchcamp.results.store import ResultsStore

log = logging.getLogger(__name__)
GPU_POOL = "gpu_nodes"
LOADGEN_POOL = "loadgen_hosts"
# How often provision_node looks at a queued Slurm job (a reschedule: no worker slot held in between).
QUEUE_POKE_S = float(os.environ.get("BENCHCAMP_QUEUE_POKE_S", "30"))
# Celery: route sweeps to workers that run one task at a time (`airflow celery worker -q loadgen -c 1`).
SWEEP_QUEUE = os.environ.get("BENCHCAMP_SWEEP_QUEUE")
SWEEP_ROUTE: dict[str, Any] = {"queue": SWEEP_QUEUE} if SWEEP_QUEUE else {}  # else Airflow's default queue
# One point from several load-generator hosts: the DAG has this many sweep tasks per engine (read when it is
# parsed: Airflow 3.3 cannot map a task inside the mapped engine group); a campaign uses load.shards of them.
SWEEP_SHARDS = max(1, int(os.environ.get("BENCHCAMP_LOADGEN_SHARDS") or 1))
Doc = dict[str, JsonValue]  # a matrix item or a step's result as XCom holds it (benchcamp.campaign.handoff's to_dict)
# resolve_config's failure, one line, as XCom: the tasks after it (verdict) end with it, not a traceback.
ERROR_KEY = "error"
SKIPPED_KEY = "skipped"
DELETE_RUN = (
    "this run's conf holds it (Details -> Conf, and the audit log): rotate the secret, then delete the run "
    "(the run's Delete Dag Run button, or DELETE /api/v2/dags/{dag_id}/dagRuns/{run_id}) and the audit log's "
    "entry (`airflow db clean --tables log`)"
)


# A scheduled run that starts this much after its cron point is the one Airflow creates on unpause for the
# latest missed point (catchup=False still schedules it: CronTriggerTimetable.next_dagrun_info takes the most
# recent past point, apache-airflow 3.3.2, read 2026-12-02); it is skipped, not run (issue 34).
MISSED_RUN_GRACE = timedelta(minutes=int(os.environ.get("BENCHCAMP_MISSED_RUN_GRACE_MIN", "60")))


def run_type_value(run_type: object) -> str:
    """A run type as its value: inside a task the task SDK hands ``dag_run.run_type`` as its own DagRunType
    (a str Enum whose ``str()`` is ``DagRunType.SCHEDULED``, unlike airflow.utils.types'), so compare values."""
    return str(getattr(run_type, "value", run_type))


def missed_run(run_type: object, run_after: datetime | None, now: datetime, grace: timedelta = MISSED_RUN_GRACE) -> str:
    """Why a run is a missed interval to skip ('' to run it): a scheduled run more than ``grace`` late."""
    if run_type_value(run_type) != "scheduled" or run_after is None or now - run_after <= grace:
        return ""
    late = now - run_after
    return (
        f"scheduled for {run_after:%Y-%m-%d %H:%M} UTC, {late.total_seconds() / 3600:.1f} h ago: a missed run "
        f"(Airflow creates one on unpause); skipped, the next one runs on schedule; trigger the DAG to run now"
    )


class TaskFailed(SystemExit):
    """A task's failure as one readable line and no traceback: Airflow's task runner logs a SystemExit as
    "Task exited" (no retry past the task's own retries; the failure callback gets it as the exception)."""


def one_line(exc: BaseException) -> str:
    """An error as one line (a multi-line config error's lines joined), secrets redacted."""
    from benchcamp.secrets.redaction import redact

    return redact("; ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__)


def _airflow_variable(key: str) -> str | None:
    from airflow.sdk import Variable

    value = Variable.get(key, default=None)
    return None if value is None else str(value)


def _airflow_conn_password(conn_id: str) -> str | None:
    from airflow.sdk import Connection

    try:
        return Connection.get(conn_id).password or None
    except Exception as exc:  # the SDK raises its own "not found" error
        from benchcamp.errors import ConfigError

        raise ConfigError(
            f"Airflow connection {conn_id!r}: {type(exc).__name__}; create it (its password holds the secret)"
        ) from None


def _mask_one(value: str) -> None:
    from airflow.sdk.log import mask_secret

    mask_secret(value)


def _install_secret_refs() -> None:
    """References resolve through Airflow (its secrets backends first) inside tasks; each value is masked."""
    from benchcamp.secrets import refs as secret_refs

    secret_refs.install_resolver("airflow-variable", _airflow_variable)
    secret_refs.install_resolver("airflow-conn", _airflow_conn_password)
    secret_refs.add_sink(_mask_one)


_install_secret_refs()


def _mask(values: Sequence[str | None]) -> None:
    from airflow.sdk.log import mask_secret

    from benchcamp.secrets import redaction

    for value in filter(None, values):
        mask_secret(value)
        redaction.register(value)


def masked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Register the secrets of the task's ``item`` config before it runs (the deployment's key is
    resolved, and masked, by the step that needs it: benchcamp.secrets.refs)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from benchcamp.secrets.redaction import register_config

        bound = sig.bind_partial(*args, **kwargs).arguments
        # items is None when resolve_config failed (verdict runs all the same: it says so)
        for item in [bound["item"]] if "item" in bound else bound.get("items") or []:
            _mask(register_config(MatrixItem.from_dict(item).config))
        try:
            return fn(*args, **kwargs)
        except (Exception, TaskFailed) as exc:  # its one line for the verdict, which names the first failed task
            if "item" in bound:
                line, ti = one_line(exc), get_current_context()["ti"]
                ti.xcom_push(key=ERROR_KEY, value=line)
                if ti.try_number > ti.max_tries:  # failed for good: a retry that succeeds keeps no failure label
                    _show_on_run_page(f"matrix[{bound['item']['index']}] failed: {line}")
            raise

    wrapper.masks_secrets = True  # type: ignore[attr-defined]
    return wrapper


# Airflow 3 shows a mapped task instance's rendered map index as its name on the run page (grid, task list,
# header); the column holds 250 characters.
MAP_INDEX_CHARS = 250


def _show_on_run_page(line: str) -> None:
    """A failed engine-group task's one line as its mapped instance's name, where the run page lists it. The task
    runner re-renders the map index after an Exception only, not after TaskFailed (a SystemExit), and sends the
    task instance's rendered_map_index with its final state (None would overwrite a value sent alone): so it is
    set on the task instance, and sent now as the runner sends it. Without that channel (another Airflow) the
    line stays in the log and XCom."""
    try:
        from airflow.sdk.execution_time.comms import SetRenderedMapIndex
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

        text = line if len(line) <= MAP_INDEX_CHARS else line[: MAP_INDEX_CHARS - 3] + "..."
        get_current_context()["ti"].rendered_map_index = text
        SUPERVISOR_COMMS.send(msg=SetRenderedMapIndex(rendered_map_index=text))
    except Exception as exc:  # noqa: BLE001  (a display nicety: never the task's failure)
        log.info("run page label not set: %s", type(exc).__name__)


def _mlflow_logs_at_their_level() -> None:
    """MLflow gives its loggers a handler of their own on stderr (mlflow.utils.logging_utils), which the
    task log shows as errors, INFO lines in red; handed to Airflow's handlers instead, INFO is INFO."""
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # for an MLflow not imported yet in this process
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [], True


def _ctx(item: Doc) -> tuple[Config, ResultsStore, StoreLayout]:
    """(config, store, layout) of a matrix item as XCom holds it."""
    from benchcamp.results.store import open_store

    m = MatrixItem.from_dict(item)
    cfg = m.resolved()
    return cfg, open_store(cfg.results.store, base=PROJECT_DIR), m.layout


@task(retries=0)
def resolve_config() -> list[Doc]:
    """The trigger form (or dag_run conf) on top of params.yaml, one entry per matrix row.

    A secret given as a value (``engine.extra_args: [--hf-token, hf_...]``, a password in a URL, a
    secret-named key) is refused here, naming the reference field that takes it: the items this
    returns become XCom and every task's rendered arguments. Airflow stored the run's conf before
    this ran; the refusal fails the run before anything else stores the value."""
    from benchcamp.errors import BenchcampError, ConfigError
    from benchcamp.secrets.redaction import literal_secrets, register_config

    ctx = get_current_context()
    dag_run = ctx["dag_run"]
    skip = missed_run(dag_run.run_type, getattr(dag_run, "run_after", None), datetime.now(UTC))
    if skip:  # the nightly unpaused: nothing is provisioned for an old interval
        ctx["ti"].xcom_push(key=SKIPPED_KEY, value=skip)
        raise AirflowSkipException(skip)
    params = dict(ctx["params"])
    _mask(register_config(params))  # the matrix and overrides, logged in config errors
    try:
        refused = literal_secrets(params)
        if refused:
            delete = DELETE_RUN.format(dag_id=ctx["dag"].dag_id, run_id=ctx["run_id"])
            raise ConfigError(f"secret given as a value, which Airflow would store: {refused[0]}; {delete}")
        items = resolve_items(params, ctx["dag"].dag_id, ctx["run_id"])
        for it in items:
            _mask(register_config(it.config))
            refused = literal_secrets(it.config)
            if refused:  # params.yaml itself holds one
                raise ConfigError(f"matrix[{it.index}]: secret given as a value in the config: {refused[0]}")
    except BenchcampError as exc:  # bad input, a profile or spec error: one line, no traceback
        line = one_line(exc)
        ctx["ti"].xcom_push(key=ERROR_KEY, value=line)
        log.error("%s", line)
        raise TaskFailed(line) from None
    for it in items:
        log.info("%s: fingerprint %s, execution %s", it.label, it.fingerprint, it.execution_id)
    return [it.to_dict() for it in items]


@task(show_return_value_in_logs=False)
@masked
def prepare_workload(item: Doc) -> Doc:
    """Before provision_node: a workload the campaign cannot measure (a context longer than the model's, a window
    too short for load.min_requests) fails here, in one line with the form's labels, and no node starts."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.form import labelled
    from benchcamp.errors import ConfigError

    try:
        return steps.prepare_workload(*_ctx(item), check=True).to_dict()
    except ConfigError as exc:
        line = labelled(one_line(exc))
        log.error("%s", line)
        raise TaskFailed(line) from None


@task.sensor(pool=GPU_POOL, retries=2, mode="reschedule", poke_interval=QUEUE_POKE_S, timeout=7 * 24 * 3600)
@masked
def provision_node(item: Doc) -> PokeReturnValue:
    """A sensor in reschedule mode: a provider that queues (slurm) is looked at every ``QUEUE_POKE_S`` with no
    worker slot held in between; local, ec2 and endpoint provision in the first poke, as a plain task would."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.interrupt import sigterm_as_interrupt

    cfg, execution_id = _ctx(item)[0], MatrixItem.from_dict(item).execution_id
    try:
        with sigterm_as_interrupt():  # an Airflow task kill mid-look: the release below still runs
            node = steps.poll_node(cfg, execution_id)
    except BaseException:
        ti = get_current_context()["ti"]
        if ti.try_number > ti.max_tries:  # failed for good: no teardown follows a failed setup
            steps.release_queued(cfg, execution_id)
        raise
    return PokeReturnValue(is_done=node is not None, xcom_value=None if node is None else node.to_dict())


@task(pool=GPU_POOL, retries=1)
@masked
def deploy_engine(item: Doc, node: Doc) -> Doc:
    """The engine outlives this task; stop_engine (a teardown) ends it."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Node

    cfg, store, layout = _ctx(item)
    conn_id = cfg.provider.endpoint.airflow_conn_id
    ref = f"airflow-conn:{conn_id}" if cfg.provider.kind == "endpoint" and conn_id else None
    # XCom gets the key's reference: the sweep resolves it again in its own process
    return steps.deploy_engine(cfg, store, layout, Node.from_dict(node), api_key_ref=ref).to_dict()


@task(pool=LOADGEN_POOL, retries=0, show_return_value_in_logs=False, **SWEEP_ROUTE)
@masked
def sweep(item: Doc, deployment: Doc, workload: Doc, shard: int = 0) -> list[str]:
    """In the ``loadgen_hosts`` pool: sweeps of every run and matrix entry share its slots, one per
    machine that can drive a load generator, so two never compete for one client's CPUs. With
    ``load.shards`` > 1, this task runs shard ``shard`` of every point (the shards meet at each point's start);
    a shard task beyond ``load.shards`` has nothing to run and skips."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Deployment, WorkloadRef

    cfg, store, layout = _ctx(item)
    if shard >= cfg.load.shards:
        raise AirflowSkipException(f"load.shards={cfg.load.shards}: shard {shard} has nothing to run")
    if cfg.load.shards > SWEEP_SHARDS:
        line = (
            f"load.shards={cfg.load.shards} but the DAG has {SWEEP_SHARDS} sweep shard task(s): set "
            f"BENCHCAMP_LOADGEN_SHARDS={cfg.load.shards} (or more) where the DAG is parsed, or lower load.shards"
        )
        log.error("%s", line)
        raise TaskFailed(line)
    dep, wl = Deployment.from_dict(deployment), WorkloadRef.from_dict(workload)
    if cfg.load.shards == 1:
        return steps.sweep(cfg, store, layout, dep, wl)
    host = str(getattr(get_current_context()["ti"], "hostname", "") or "")  # the worker's name, in the shard's meta
    return steps.sweep(cfg, store, layout, dep, wl, shard=shard, host=host)


@task(retries=3)
@masked
def stop_engine(item: Doc, deployment: Doc) -> None:
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Deployment

    steps.stop_engine(*_ctx(item), Deployment.from_dict(deployment))


@task(retries=3)
@masked
def deprovision_node(item: Doc, node: Doc) -> None:
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Node

    steps.deprovision(*_ctx(item), Node.from_dict(node))


@task(trigger_rule="all_done", retries=1, show_return_value_in_logs=False)
@masked
def summarize(item: Doc, workload: Doc | None) -> Doc:
    from benchcamp.campaign import steps, utcnow
    from benchcamp.campaign.handoff import WorkloadRef

    start = get_current_context()["dag_run"].start_date
    ref = None if workload is None else WorkloadRef.from_dict(workload)  # None: prepare_workload failed
    return steps.summarize(*_ctx(item), ref, start.isoformat() if start else utcnow()).to_dict()


@task(retries=2)
@masked
def track(item: Doc, summary: Doc) -> str | None:
    """Retried; after the last attempt evaluate runs untracked and the verdict names the failure."""
    from benchcamp.campaign import steps

    _mlflow_logs_at_their_level()
    ctx = get_current_context()
    ti = ctx["ti"]
    airflow = {"dag_id": ctx["dag"].dag_id, "run_id": ctx["run_id"]}
    return steps.track(*_ctx(item), airflow=airflow, last_attempt=ti.try_number > ti.max_tries)


@task(retries=1, show_return_value_in_logs=False)
@masked
def evaluate(item: Doc, mlflow_run_id: str | None) -> Doc:
    from benchcamp.campaign import steps

    _mlflow_logs_at_their_level()
    out = steps.evaluate(*_ctx(item), mlflow_run_id)
    log.info("report: %s", _link(out.report))
    return out.to_dict()


def _link(location: str) -> str:
    """A local report path as a file:// URL (one the log view and a browser can open); others as they are."""
    from pathlib import Path

    return Path(location).as_uri() if location.startswith("/") else location


@task(trigger_rule="all_done", retries=0, show_return_value_in_logs=False)
@masked
def verdict(items: list[Doc] | None) -> dict[str, Doc]:
    """Fail the run on a failed or interrupted execution, no valid point, or a regression
    (the same table as `benchcamp run`); the DAG's on_failure_callback notifies."""
    from benchcamp.campaign import steps

    if items is None:  # resolve_config failed or skipped a missed run: nothing ran; say why, once
        ti = get_current_context()["ti"]
        skipped = ti.xcom_pull(task_ids="resolve_config", key=SKIPPED_KEY)
        if skipped:
            raise AirflowSkipException(skipped)
        line = f"resolve_config failed: {ti.xcom_pull(task_ids='resolve_config', key=ERROR_KEY) or 'see its log'}"
        log.error("%s", line)
        raise TaskFailed(line)
    problems: list[str] = []
    outcome: dict[str, Doc] = {}
    for item in items:
        _, store, layout = _ctx(item)
        m = MatrixItem.from_dict(item)
        log.info("%s: verdicts", m.label)
        for line in steps.verdict_lines(store, layout):
            log.info("%s", line.replace("report: /", "report: file:///", 1).replace("trend: /", "trend: file:///", 1))
        found, judgement = steps.judge_stored(store, layout)
        outcome[m.execution_id] = judgement.to_dict()
        failed = first_failed_task(m.index)
        if failed:  # the task that failed first and its one line, not "see the evaluate step's log"
            found = [failed] + [p for p in found if "see the evaluate step's log" not in p]
        problems += [f"{m.label}: {p}" for p in found]
    if problems:
        raise RuntimeError("campaign failed:\n  " + "\n  ".join(problems))
    return outcome


# The engine group's tasks in the order they run: the first failed one is the cause of what follows.
GROUP_ORDER = (
    "prepare_workload",
    "provision_node",
    "deploy_engine",
    "sweep",
    "stop_engine",
    "deprovision_node",
    "summarize",
    "track",
    "evaluate",
)


def first_failed_task(map_index: int) -> str:
    """``engine_config.<task> failed: <its one line>`` of the first task of matrix entry ``map_index`` that failed
    in this run ('' when none did): what a task after it (upstream_failed, or the verdict) is missing, and why."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    ctx = get_current_context()
    states = RuntimeTaskInstance.get_task_states(
        dag_id=ctx["dag"].dag_id, map_index=map_index, task_group_id="engine_config", run_ids=[ctx["run_id"]]
    ).get(ctx["run_id"], {})
    for name in GROUP_ORDER:
        task_id = f"engine_config.{name}"
        state = states.get(f"{task_id}_{map_index}", states.get(task_id))  # a mapped instance: <task>_<index>
        if run_type_value(state) == "failed":
            line = ctx["ti"].xcom_pull(task_ids=task_id, key=ERROR_KEY, map_indexes=map_index)
            return f"{task_id} failed: {line or 'see its log'}"
    return ""


@task(retries=1)
def reap_expired(region: str | None = None) -> list[str]:
    """Terminate expired benchcamp EC2 nodes (the safety net behind every teardown); with params.yaml's
    provider.kind=slurm, cancel its executions' expired Slurm jobs instead."""
    import boto3

    from benchcamp.config import load_config
    from benchcamp.provision.reaper import reap

    cfg = load_config(PARAMS_FILE)
    if cfg.provider.kind == "slurm":  # the executions' expired Slurm jobs, and what they left behind
        from benchcamp.deploy.slurm_job import SlurmEngineJob
        from benchcamp.provision.slurm import reap as reap_slurm

        return [f"slurm:{r.job_id}" for r in reap_slurm(cfg, boot=SlurmEngineJob(cfg))]
    region = region or os.environ.get("BENCHCAMP_REAP_REGION") or cfg.provider.ec2.region
    if boto3.Session().get_credentials() is None:
        log.warning("no AWS credentials here: nothing to reap (set them to let the reaper guard EC2 nodes)")
        return []
    return [r.instance_id for r in reap(boto3.client("ec2", region_name=region))]
