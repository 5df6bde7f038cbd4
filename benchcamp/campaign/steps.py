"""The steps of one campaign execution, shared by `benchcamp run` and the Airflow tasks.

Each step takes the config, the results store with the execution's
:class:`StoreLayout`, and what earlier steps returned (the small frozen objects of
benchcamp.campaign.handoff, which an Airflow task hands on as their JSON), and
returns one: any step can run on any worker, because everything it needs is in
the store and everything it makes goes there. Per engine configuration:

prepare_workload -> provision -> deploy_engine -> sweep -> stop_engine -> deprovision
-> summarize -> track -> evaluate; :func:`judge` turns the result into an exit code.

A failing step records its reason under ``errors/<step>`` (a retry that succeeds
deletes it), so summarize reports it even when the step ran on another machine.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from benchcamp.campaign import kinds
from benchcamp.campaign.handoff import Deployment, EngineHandle, Evaluation, Judgement, Node, Summary, WorkloadRef
from benchcamp.campaign.interrupt import sigterm_as_interrupt
from benchcamp.campaign.kinds import PointAborted, Status, Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.result import (
    CampaignResult,
    point_summary_doc,
    summarize_point,
    utcnow,
    write_campaign_files,
)
from benchcamp.config import Config
from benchcamp.errors import ExitCode
from benchcamp.results import atomic
from benchcamp.results.jsonsafe import dumps, strict_json
from benchcamp.results.outcome import PointOutcome
from benchcamp.results.store import ResultsStore
from benchcamp.secrets import redaction

if TYPE_CHECKING:
    from benchcamp.loadgen.spec import PointSpec
    from benchcamp.verdicts.compare import Verdict

log = logging.getLogger(__name__)


# -- helpers ------------------------------------------------------------------


@contextmanager
def _workdir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"benchcamp-{prefix}-") as tmp:
        yield Path(tmp)


def record_error(store: ResultsStore, layout: StoreLayout, step: Step, exc: BaseException) -> None:
    """Keep a failed step's reason in the store (redacted), for summarize and the verdict.

    A store that cannot take the record (full, read-only) most likely caused the failure: the
    caller raises the step's own error, which names the file that could not be written, instead
    of this one about ``errors/<step>.json``."""
    doc = {"step": step.value, "kind": type(exc).__name__, "message": redaction.redact(str(exc)), "at": utcnow()}
    try:
        store.put_text(layout.error(step), json.dumps(doc, indent=2))
    except Exception as unrecorded:  # noqa: BLE001  (any store failure: the step's error goes on)
        log.info("the %s failure could not be recorded in the store: %s", step.value, unrecorded)


def clear_error(store: ResultsStore, layout: StoreLayout, step: Step) -> None:
    """A retried step that succeeded: an earlier attempt's failure is not this execution's."""
    if store.exists(layout.error(step)):
        store.delete(layout.error(step))


BEFORE_SUMMARY = tuple(Step)[: tuple(Step).index(Step.SUMMARIZE)]  # the errors a summary reports


@contextmanager
def recorded(store: ResultsStore, layout: StoreLayout, step: Step) -> Iterator[None]:
    """Record the step's failure in the store (and raise it); clear an earlier attempt's on success.
    A teardown that failed (a node left running) then fails the execution's summary and verdict."""
    try:
        yield
    except BaseException as exc:
        record_error(store, layout, step, exc)
        raise
    clear_error(store, layout, step)


def recorded_errors(store: ResultsStore, layout: StoreLayout, only: tuple[Step, ...] = tuple(Step)) -> list[str]:
    """'<step>: <message>' for every recorded step error (of the steps ``only``), in step order."""
    out = []
    for step in only:
        if store.exists(layout.error(step)):
            doc = json.loads(store.get_text(layout.error(step)))
            out.append(f"{step.value}: {doc['message']}")
    return out


def startup_timeout(cfg: Config) -> float:
    p = cfg.provider
    return {"local": p.local.startup_timeout_s, "ec2": p.ec2.startup_timeout_s, "slurm": p.slurm.startup_timeout_s}.get(
        p.kind, 60.0
    )


def point_labels(cfg: Config, store: ResultsStore | None = None, layout: StoreLayout | None = None) -> list[str]:
    """The execution's points: the sweep's levels, or (load.mode=capacity) the probes the search ran."""
    if cfg.load.mode == "capacity":
        if store is None or layout is None or not store.exists(layout.capacity):
            return []
        return [p["label"] for p in json.loads(store.get_text(layout.capacity))["probes"]]
    from benchcamp.loadgen import point_label

    return [point_label(cfg.load.mode, level) for level in cfg.load.levels]


def virtual(cfg: Config) -> bool:
    """load.clock=virtual: every point runs in the simulator in this process, no engine to deploy."""
    return cfg.load.clock == "virtual"


def measurements(cfg: Config) -> list[tuple[int, float]]:
    """(trial, level) in the order the sweep measures them: every level once per trial, trial after trial
    (c4 c8 c4 c8 ... for load.trials=2), so a drift of the machine over the sweep spreads over every point's
    trials instead of moving one point against another."""
    return [(k, level) for k in range(1, cfg.load.trials + 1) for level in cfg.load.levels]


def measurement_name(cfg: Config, label: str, trial: int) -> str:
    """``c8`` (load.trials=1), or ``c8/trial-2``: the measurement's folder under the execution."""
    from benchcamp.results.trials import trial_name

    return f"{label}/{trial_name(trial)}" if cfg.load.trials > 1 else label


def trial_spec(spec: PointSpec, trial: int) -> PointSpec:
    """Trial ``trial`` of a point's PointSpec: the same requests (seed, plan) with a prompt salt of its own from
    trial 2 on, so that on an engine shared by the trials (the wall clock) no trial finds another's prompts in
    the prefix cache; trial 1 keeps the point's salt (a one-trial sweep sends what it always sent)."""
    from dataclasses import replace

    from benchcamp.loadgen.spec import point_salt
    from benchcamp.results.trials import trial_name

    if trial <= 1:
        return spec
    salt = point_salt(f"{spec.label}/{trial_name(trial)}", f"{spec.salt:016x}")
    agentx = None if spec.agentx is None else {**spec.agentx, "benchmark_id": f"{salt:016x}"}
    return replace(spec, salt=salt, agentx=agentx)


# -- setup --------------------------------------------------------------------


def prepare_workload(
    cfg: Config, store: ResultsStore, layout: StoreLayout, publish: bool = True, check: bool = False
) -> WorkloadRef:
    """Build (or reuse) the workload; ``publish``: put it in the store by digest for other workers; ``check``:
    refuse a campaign this workload makes infeasible (benchcamp.campaign.feasible.check_workload), as both drivers
    do before provisioning."""
    from benchcamp.campaign.feasible import check_workload
    from benchcamp.workload import ensure_workload
    from benchcamp.workload.stats import workload_stats

    workload, path, digest = ensure_workload(cfg.workload)
    if check:
        check_workload(cfg, workload)  # before provision: a context the model cannot hold, a window too short
    key = None
    if publish:
        key = layout.workload(digest)
        if not store.exists(key):
            store.put_file(path, key)
    stats = strict_json(workload_stats(workload))
    return WorkloadRef(
        key=key, digest=digest, path=str(path), name=workload.name, sessions=len(workload.sessions), stats=stats
    )


def provision(cfg: Config, execution_id: str) -> Node:
    """Idempotent per execution id: a retry finds the node it already made. A provider that launches machines
    boots them with what deploy says runs there (``benchcamp.deploy.remote``)."""
    from benchcamp.deploy.remote import node_boot
    from benchcamp.provision import get_provider

    return Node.of_provider(get_provider(cfg, boot=node_boot(cfg)).provision(execution_id))


def poll_node(cfg: Config, execution_id: str) -> Node | None:
    """One look at the node, for a wait that holds no worker (the DAG's sensor in reschedule mode): a provider
    that queues (slurm) answers None while its job waits; the others provision at once, as :func:`provision`."""
    from benchcamp.deploy.remote import node_boot
    from benchcamp.provision import get_provider

    if cfg.provider.kind != "slurm":
        return provision(cfg, execution_id)
    node = get_provider(cfg, boot=node_boot(cfg)).poll(execution_id)  # type: ignore[attr-defined]
    return Node.of_provider(node) if node is not None else None


def release_queued(cfg: Config, execution_id: str) -> None:
    """Cancel what a provision that failed for good left queued (a failed setup gets no teardown)."""
    if cfg.provider.kind == "slurm":
        from benchcamp.deploy.slurm_job import SlurmEngineJob
        from benchcamp.provision.slurm import SlurmProvider

        SlurmProvider(cfg, boot=SlurmEngineJob(cfg)).release(execution_id)


def deploy_engine(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    node: Node,
    api_key: str | None = None,
    die_with_parent: bool = False,
    log_dir: str | Path | None = None,
    api_key_ref: str | None = None,
) -> Deployment:
    """Start the engine and wait until it serves the model; on failure it records why, keeps the
    engine log and stops the engine (a teardown does not run after a failed setup)."""
    from benchcamp.deploy import deploy, engine_folder, stop, wait_ready

    if virtual(cfg):  # the sweep drives the simulator in-process: nothing to start
        return Deployment(
            endpoint="",
            api_key_ref=None,
            log_path=None,
            model=cfg.served_model_name,
            handle=EngineHandle(kind="virtual", engine="simulated"),
        )
    log_dir = engine_folder(log_dir, layout.execution_id)
    dep = deploy(
        node.provider_node(),
        cfg,
        log_dir=log_dir,
        api_key=api_key,
        api_key_ref=api_key_ref,
        die_with_parent=die_with_parent,
        results_root=store.local_path(""),
    )
    try:
        wait_ready(dep, startup_timeout(cfg))  # also checks the key and the served model
    except BaseException as exc:
        record_error(store, layout, Step.DEPLOY, exc)
        _upload_engine_log(store, layout, Deployment.of_engine(dep), key=dep.api_key)
        stop(dep)
        raise
    clear_error(store, layout, Step.DEPLOY)
    return Deployment.of_engine(dep)  # the key's reference (api_key_ref), never the key: this may become an XCom


# -- measure ------------------------------------------------------------------


@contextmanager
def _loadgen_host() -> Iterator[None]:
    """Let the load generator start its worker processes from any host process.

    - Hides ``__main__``'s file: the workers re-run the parent's ``__main__``, which in a host
      such as an Airflow or Celery worker is its launcher, and that fails inside a child
      ("Could not parse SQLAlchemy URL").
    - In a Celery prefork worker (billiard), tasks run in a daemonic process, which
      multiprocessing forbids to have children, and whose authkey is billiard's type, which
      multiprocessing refuses to hand to a child: both are set to what a plain process has
      while the workers start (the load generator stops its workers itself).
    - A host forked from a process that had started multiprocessing's forkserver (a Celery
      prefork child of a parent that ran the load generator; a test runner) inherits a handle
      to a forkserver that is not its child: it is forgotten, so this process starts its own.
    """
    import multiprocessing
    from multiprocessing.process import AuthenticationString  # type: ignore[attr-defined]

    _forget_inherited_forkserver()

    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__
    }
    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    saved_config = dict(config)
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        config["daemon"] = False
        config["authkey"] = AuthenticationString(bytes(config["authkey"]))
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)
        config.clear()
        config.update(saved_config)


def _forget_inherited_forkserver() -> None:
    """multiprocessing's forkserver state is per process but survives fork(): in a forked child,
    the recorded server is the parent's, and starting a process through it fails
    (``os.waitpid``: "No child processes"). Reset it so that the next start makes our own."""
    import os
    from multiprocessing import forkserver

    fs = forkserver._forkserver  # type: ignore[attr-defined]
    pid = getattr(fs, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: inherited across a fork
        for name in ("_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd"):
            setattr(fs, name, None)


def measured_any(cfg: Config, store: ResultsStore, layout: StoreLayout) -> bool:
    return any(
        store.exists(layout.point_json(lb))
        or store.exists(layout.records(lb))
        or _trials_measured(cfg, store, layout, lb)
        for lb in point_labels(cfg, store, layout)
    )


def _trials_measured(cfg: Config, store: ResultsStore, layout: StoreLayout, label: str) -> list[int]:
    """The trials of point ``label`` in the store (load.trials > 1), each with its point.json or its records."""
    if cfg.load.trials <= 1:
        return []
    keys = [(k, layout.measurement(label, k, cfg.load.trials)) for k in range(1, cfg.load.trials + 1)]
    return [k for k, key in keys if store.exists(f"{key}/point.json") or store.exists(f"{key}/records.parquet")]


def _workload_file(store: ResultsStore, key: str | None, path: str, tmp: Path) -> Path:
    """The workload file on this machine: its store copy (``key``) when published, else ``path``."""
    if not key:
        return Path(path)
    return store.local_path(key) or store.get_file(key, tmp / "workload.parquet")


def _log_point_line(cfg: Config, result: Any, workload: WorkloadRef, first: bool, name: str = "") -> None:
    """The point just measured as one table line of the sweep's log (tokens/s/GPU, P90 per-user rate, TTFT
    P90, cache hit, valid); the summary proper is summarize's (this one is for a person watching)."""
    from benchcamp.results.outcome import summarize_point
    from benchcamp.results.table import POINT_LINE_LEGEND, point_line, point_line_header

    try:
        outcome = summarize_point(cfg, result, workload.theoretical_hit_rate)
    except Exception as exc:  # noqa: BLE001  (the log line is not worth failing the sweep for)
        log.info("point %s: %d requests (no summary: %s)", result.label, result.requests, type(exc).__name__)
        return
    if first:
        log.info("%s", POINT_LINE_LEGEND)
        log.info("%s", point_line_header())
    log.info("%s", point_line(outcome, name or outcome.label))


def verdict_lines(store: ResultsStore, layout: StoreLayout) -> list[str]:
    """The execution's verdicts as a readable table, its notes and the report's location (the DAG's
    verdict task logs them); empty when evaluate stored none."""
    from benchcamp.verdicts.compare import Verdict, format_table

    if not store.exists(layout.verdicts):
        return []
    doc = json.loads(store.get_text(layout.verdicts))
    lines = [f"note: {n}" for n in doc.get("notes") or []]
    if doc.get(kinds.VERDICTS):
        lines += format_table([Verdict.from_dict(v) for v in doc[kinds.VERDICTS]]).splitlines()
    if doc.get("report"):
        lines.append(f"report: {doc['report']}")
    if doc.get("trend"):
        lines.append(f"trend: {doc['trend']}")
    return lines


def sweep(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    deployment: Deployment,
    workload: WorkloadRef,
    progress: Any = None,
    shard: int | None = None,
    host: str = "",
) -> list[str]:
    """Measure every level in order on this engine; each point goes to the store as it completes.

    ``load.shards`` > 1: this call runs shard ``shard`` of every point (one per load-generator host: the
    DAG's sweep shard tasks; ``host``: this one's name, in the shard's meta), into the point's ``shard-<k>/``
    folder; :func:`summarize` merges the shards.

    Points already in the store (an earlier attempt of this execution) are skipped. A point
    that ends early (engine died, stalled, interrupted) raises after its records are stored:
    :class:`PointAborted`, or KeyboardInterrupt for SIGINT/SIGTERM (also when an Airflow task
    kill sends the SIGTERM: the same path as `benchcamp run`).
    """
    from benchcamp.deploy.keys import deployment_api_key
    from benchcamp.errors import ConfigError
    from benchcamp.loadgen import PointSpec, point_label, run_point
    from benchcamp.loadgen.preflight import probe
    from benchcamp.workload.model import read_workload

    if cfg.load.shards > 1 and shard is None:
        raise ConfigError(
            f"load.shards={cfg.load.shards} runs one sweep per load-generator host (the Airflow DAG's sweep shard "
            "tasks); `benchcamp run` drives one host: set load.shards=1"
        )
    if shard is not None and not 0 <= shard < cfg.load.shards:
        raise ConfigError(f"sweep shard {shard}: load.shards={cfg.load.shards} has shards 0..{cfg.load.shards - 1}")
    shard = shard if cfg.load.shards > 1 else None
    if shard is not None and store.exists(layout.shard_quit(shard)):
        store.delete(layout.shard_quit(shard))  # an earlier attempt's: this one takes part again
    with _quit_said(store, layout, shard), sigterm_as_interrupt():
        if cfg.load.mode == "capacity":
            return search(cfg, store, layout, deployment, workload, progress)
        done: list[str] = []
        measured_here: list[str] = []  # by this attempt: the first one's log line comes with the header
        with _workdir("sweep") as tmp:
            wl = caps = api_key = None
            for trial, level in measurements(cfg):
                label = point_label(cfg.load.mode, level)
                name = measurement_name(cfg, label, trial)
                key = layout.measurement(label, trial, cfg.load.trials)
                mine = f"{key}/point.json" if shard is None else f"{layout.shard(label, shard)}/point.json"
                if store.exists(mine) or (shard is not None and store.exists(layout.point_json(label))):
                    log.info("point %s already measured (earlier attempt); skipping", name)
                    done.append(name)
                    continue
                if wl is None:  # something to measure: probe the endpoint once, load the workload once
                    try:
                        if not virtual(cfg):  # what it accepts: the requests adapt (benchcamp.readiness)
                            # from its reference, in this process
                            api_key = deployment_api_key(cfg, deployment.to_dict())
                            caps = probe(deployment.endpoint, api_key, cfg.served_model_name)
                    except Exception as exc:
                        record_error(store, layout, Step.SWEEP, exc)
                        raise
                    wl = read_workload(_workload_file(store, workload.key, workload.path, tmp))
                spec = trial_spec(PointSpec.from_load(cfg.load, level, layout.execution_id, capabilities=caps), trial)
                key = key if shard is None else layout.shard(spec.label, shard)
                rel = key[len(layout.execution) :].lstrip("/")
                out = store.local_path(key) or tmp / rel
                try:
                    if virtual(cfg):
                        from benchcamp.sim.clock.virtual_point import run_point_virtual

                        result = run_point_virtual(cfg, wl, spec, out)
                    else:
                        with _loadgen_host():
                            result = run_point(
                                deployment.endpoint,
                                api_key,
                                cfg.served_model_name,
                                wl,
                                spec,
                                out,
                                progress=progress if shard is None else _synced(progress, store, out, key),
                                shard=None
                                if shard is None
                                else _store_barrier(cfg, store, layout, spec.label, shard, host),
                                why_dead=_why_dead(deployment),
                            )
                except KeyboardInterrupt:
                    record_error(store, layout, Step.SWEEP, RuntimeError(f"interrupted during point {name}"))
                    raise
                except Exception as exc:
                    record_error(store, layout, Step.SWEEP, exc)
                    raise
                finally:
                    if out.exists():
                        store.put_dir(out, key)  # keep whatever was measured, crash or not
                done.append(name)
                _log_point_line(cfg, result, workload, first=not measured_here, name=name)
                measured_here.append(name)
                if result.aborted:
                    aborted = PointAborted(
                        f"sweep point {name} aborted: {result.aborted}; "
                        f"{result.requests} records kept at {store.url(key)}"
                    )
                    record_error(store, layout, Step.SWEEP, aborted)
                    raise aborted
        clear_error(store, layout, Step.SWEEP)
        return done


@contextmanager
def _quit_said(store: ResultsStore, layout: StoreLayout, shard: int | None) -> Iterator[None]:
    """Whatever ends a sweep shard early goes to its ``shard_quit`` key: the other shards stop waiting for this
    one at the next barrier."""
    try:
        yield
    except BaseException as exc:
        if shard is not None:
            _say_quit(store, layout, shard, exc)
        raise


def _say_quit(store: ResultsStore, layout: StoreLayout, shard: int, exc: BaseException) -> None:
    try:
        store.put_text(layout.shard_quit(shard), redaction.redact(f"shard {shard}: {type(exc).__name__}: {exc}"))
    except Exception as unsaid:  # noqa: BLE001  (the step's own error goes on; the others time out instead)
        log.info("shard %d could not tell the others it quit: %s", shard, unsaid)


SHARD_SYNC_S = 5.0  # a shard's records reach a remote store at least this often while its point runs


def _synced(progress: Any, store: ResultsStore, out: Path, key: str) -> Any:
    """A shard on a remote store (S3) uploads its folder every SHARD_SYNC_S while its point runs: a host that
    dies (kill -9, lost machine) leaves its records flushed up to then, which the merge keeps. A local (shared)
    store has them as they are flushed already. ``progress``: as run_point takes it, None or a callable here."""
    if store.local_path(key) is not None or not (progress is None or callable(progress)):
        return progress
    import time

    last = [time.monotonic()]

    def sync(state: dict[str, Any]) -> None:  # the load generator's progress state
        if progress is not None:
            progress(state)
        if time.monotonic() - last[0] >= SHARD_SYNC_S:
            try:
                store.put_dir(out, key)
            except Exception as exc:  # noqa: BLE001  (the next sync, or the point's end, tries again)
                log.info("shard records not synced to %s: %s", store.url(key), exc)
            last[0] = time.monotonic()

    return sync


def _store_barrier(
    cfg: Config, store: ResultsStore, layout: StoreLayout, label: str, shard: int, host: str = ""
) -> Any:
    """The shards' barrier of one point through the results store (benchcamp.loadgen.shards.rendezvous)."""
    from benchcamp.loadgen.shards import Shard, rendezvous

    count = cfg.load.shards

    def peek(k: int) -> str | None:
        key = layout.shard_ready(label, k)
        return store.get_text(key) if store.exists(key) else None

    def quit_reason() -> str | None:
        gone = [k for k in range(count) if k != shard and store.exists(layout.shard_quit(k))]
        return store.get_text(layout.shard_quit(gone[0])) if gone else None

    def barrier(meta: dict[str, Any], tick: Any) -> float:  # benchcamp.loadgen.shards.Shard.barrier's
        start, metas = rendezvous(
            shard,
            count,
            meta,
            lambda k, text: store.put_text(layout.shard_ready(label, k), text),
            peek,
            cfg.load.shard_barrier_timeout_s,
            tick,
            quit_reason,
        )
        log.info("point %s: %d shards meet, start at %.3f: %s", label, count, start, json.dumps(metas))
        return start

    return Shard(shard, count, barrier, host)


def _why_dead(deployment: Deployment) -> Callable[[], str | None] | None:
    """What can tell why the engine stopped answering: a Slurm job's end (its time limit, a scancel), else None."""
    handle = deployment.handle
    if handle.kind != "slurm" or not handle.job_id:
        return None
    from benchcamp.provision.slurm import job_end

    return functools.partial(job_end, handle.job_id)


def search(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    deployment: Deployment,
    workload: WorkloadRef,
    progress: Any = None,
) -> list[str]:
    """load.mode=capacity: for each service tier, the most concurrent agents that meet it
    (benchcamp.planning.capacity: bracket, then bisect; invalid probes retried or reported, never used).
    Every probe is a point of this execution (records, summary, MLflow child run); the search's
    result goes to ``capacity.json``. In virtual time with load.clock=virtual, else over HTTP
    against the deployed engine."""
    from benchcamp.planning.capacity import SearchSettings, format_capacity, search_capacity
    from benchcamp.profiles import load_gpu
    from benchcamp.workload.model import read_workload

    gpu = load_gpu(cfg.hardware.gpu)
    theoretical = workload.theoretical_hit_rate
    with _workdir("search") as tmp:
        wl = read_workload(_workload_file(store, workload.key, workload.path, tmp))
        out_root = store.local_path(layout.execution) or tmp / "probes"

        def keep(probe: Any) -> None:  # each probe goes to the store as it completes
            if store.local_path(layout.execution) is None and (out_root / probe.label).exists():
                store.put_dir(out_root / probe.label, layout.point(probe.label))
            if progress:
                print(
                    f"[benchcamp] probe {probe.label}: {'valid' if probe.valid else 'INVALID'}, P90 "
                    f"{probe.p90_user_tokens_per_s:.1f} tok/s/user, TTFT P90 {probe.ttft_p90_s:.2f} s",
                    flush=True,
                )

        try:
            if virtual(cfg):
                from benchcamp.sim.clock.virtual_point import virtual_measure

                measure = virtual_measure(
                    cfg, wl, out_root, execution_id=layout.execution_id, theoretical_hit_rate=theoretical
                )
            else:
                from benchcamp.deploy.keys import deployment_api_key
                from benchcamp.loadgen.capacity_probe import wall_measure

                measure = wall_measure(
                    cfg,
                    wl,
                    deployment.endpoint,
                    deployment_api_key(cfg, deployment.to_dict()),
                    out_root,
                    execution_id=layout.execution_id,
                    theoretical_hit_rate=theoretical,
                    progress=progress,
                    why_dead=_why_dead(deployment),
                )
            with _loadgen_host():
                result = search_capacity(
                    measure,
                    cfg.load.tiers,
                    SearchSettings.of(cfg.load.capacity),
                    cfg.hardware.gpu_count,
                    gpu.board_power_w,
                    gpu.node_overhead_factor,
                    clock=cfg.load.clock,
                    on_probe=keep,
                )
        except KeyboardInterrupt:
            record_error(store, layout, Step.SWEEP, RuntimeError("interrupted during the capacity search"))
            raise
        except Exception as exc:
            record_error(store, layout, Step.SWEEP, exc)
            raise

        store.put_text(layout.capacity, dumps(result.to_dict(), indent=2))
    if progress:
        print(format_capacity(result), flush=True)
    clear_error(store, layout, Step.SWEEP)
    return [p.label for p in result.probes]


# -- teardown -------------------------------------------------------------------


def _open_engine_log(deployment: Deployment) -> IO[str] | None:
    """The engine's log, opened before the engine stops (an open file stays readable after).

    Its path is on the machine of the worker that deployed it, under that worker's TMPDIR;
    a teardown on another worker of the same machine reads the same file through the
    engine's stdout instead (Linux /proc), rather than silently losing the log."""
    from benchcamp.deploy import is_running

    path = deployment.log_path
    if path and Path(path).exists():
        return open(path, errors="replace")
    handle = deployment.handle
    if path and handle.kind == "local" and is_running(deployment.engine_deployment()):
        try:
            return open(f"/proc/{handle.pid}/fd/1", errors="replace")
        except OSError:
            log.warning("engine log %s is not on this machine: not kept", path)
    return None


def _upload_engine_log(
    store: ResultsStore,
    layout: StoreLayout,
    deployment: Deployment,
    log_file: IO[str] | None = None,
    key: str | None = None,
) -> None:
    log_file = log_file or _open_engine_log(deployment)
    if log_file is None:
        return
    with log_file:
        text = log_file.read()
    handle = deployment.handle
    if handle.topology:  # every process of a topology, one after the other, each under its name
        text = f"==> {handle.name or 'front'} ({handle.role or ''}) <==\n{text}"
        for peer in handle.peers or ():
            path = peer.log_path
            if path and Path(path).exists():
                text += f"\n==> {peer.name} ({peer.role}) <==\n" + Path(path).read_text(errors="replace")
    # a Deployment that left its process carries no key: only ``key``, when the caller still has it
    store.put_text(layout.engine_log, redaction.redact(text, [key]))


def _key_for_redaction(cfg: Config | None, deployment: Deployment) -> str | None:
    """The deployment's key while its engine still runs, to redact it from the log (best effort:
    a key that cannot be found here was never in this process, nor in its log records)."""
    from benchcamp.deploy.keys import deployment_api_key

    if deployment.handle.kind != "local":
        return None  # remote engines' logs stay on their node; an endpoint's key is not ours to fetch again
    try:
        return deployment_api_key(cfg, deployment.to_dict())
    except Exception as exc:  # noqa: BLE001  (the engine is stopped anyway)
        log.info("engine key not readable for redaction: %s", redaction.redact(str(exc)))
        return None


def stop_engine(cfg: Config | None, store: ResultsStore, layout: StoreLayout, deployment: Deployment) -> None:
    """Stop the engine (idempotent) and keep its log, secrets redacted."""
    from benchcamp.deploy import stop

    with recorded(store, layout, Step.STOP_ENGINE):
        log_file = _open_engine_log(deployment)
        key = _key_for_redaction(cfg, deployment)
        stop(deployment.engine_deployment())
        _upload_engine_log(store, layout, deployment, log_file, key)


def deprovision(cfg: Config, store: ResultsStore, layout: StoreLayout, node: Node) -> None:
    """Release the node; on this machine first kill any engine process still running for the execution (the
    safety net behind ``stop_engine``, e.g. when the stop task failed or the deployment's handle was lost)."""
    from benchcamp.deploy import kill_execution_engines
    from benchcamp.provision import get_provider

    with recorded(store, layout, Step.DEPROVISION):
        n = node.provider_node()
        if node.kind == "local" and node.execution_id:
            kill_execution_engines(node.execution_id)
        if n.kind == "slurm":  # scancel, then the engine processes that left the job (the job boot finds them)
            from benchcamp.deploy.slurm_job import SlurmEngineJob

            get_provider(cfg, boot=SlurmEngineJob(cfg)).deprovision(n)
            return
        get_provider(cfg).deprovision(n)


# -- results --------------------------------------------------------------------


def _fetch_execution(
    cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path, with_points: bool = True
) -> Path:
    """The execution's folder on this machine: the store's own, or a copy under ``tmp``."""
    local = store.local_path(layout.execution)
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
        return local
    here = tmp / "execution"
    here.mkdir(parents=True, exist_ok=True)
    for key, name in (
        (layout.campaign_json, "campaign.json"),
        (layout.summary_json, "summary.json"),
        (layout.engine_log, "engine.log"),
    ):
        if store.exists(key):
            store.get_file(key, here / name)
    if store.exists(layout.capacity):
        store.get_file(layout.capacity, here / "capacity.json")
    for label in point_labels(cfg, store, layout) if with_points else []:
        if store.exists(layout.point_json(label)) or _trials_measured(cfg, store, layout, label):
            store.get_dir(layout.point(label), here / label)
    return here


def summarize(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    workload: WorkloadRef | None,
    started_at: str,
    interrupted: bool = False,
    endpoint: str = "",
) -> Summary:
    """THE place that assembles the CampaignResult and picks the headline: every point in the
    store (measured before any failure included), recorded step errors, points not measured,
    and the status. Writes campaign.json and summary.json; points ``latest`` at this execution."""
    from benchcamp.metrics import pick_headline

    stats = workload.stats if workload is not None else {}
    with _workdir("summary") as tmp:
        if cfg.load.shards > 1:
            merge_shards(cfg, store, layout, tmp / "shards")
        here = _fetch_execution(cfg, store, layout, tmp)
        labels = point_labels(cfg, store, layout)
        capacity = json.loads(store.get_text(layout.capacity)) if store.exists(layout.capacity) else None
        if cfg.load.mode == "capacity" and capacity is None and not recorded_errors(store, layout, BEFORE_SUMMARY):
            labels = ["capacity search"]  # reported as not measured
        theoretical = workload.theoretical_hit_rate if workload is not None else None
        outcomes, missing = _point_outcomes(cfg, here, labels, theoretical)
        recorded = recorded_errors(store, layout, BEFORE_SUMMARY)
        aborted = [f"point {p.label}: {p.aborted}" for p in outcomes if p.aborted]
        errors = recorded + [a for a in aborted if not any(a.split(": ", 1)[-1] in r for r in recorded)]
        if missing:
            errors.append(f"not measured: {', '.join(missing)}")
        headline = (
            pick_headline([p.summary | {"valid": p.valid, "point": p.label} for p in outcomes], cfg.slo)
            if outcomes
            else {}
        )
        if interrupted:
            status = Status.INTERRUPTED
        elif errors:
            status = Status.FAILED
        elif not any(p.valid for p in outcomes):
            status = Status.NO_VALID_POINT
            errors.append("no valid point: " + "; ".join(f"{p.label}: {', '.join(p.reasons)}" for p in outcomes))
        else:
            status = Status.OK
        engine_log = here / "engine.log"
        result = CampaignResult(
            execution_id=layout.execution_id,
            config=cfg,
            fingerprint=cfg.fingerprint(),
            workload_path=Path(workload.path if workload is not None and workload.path else cfg.workload.data),
            workload_digest=workload.digest if workload is not None else "",
            points=outcomes,
            results_dir=here,
            headline=headline,
            started_at=started_at,
            finished_at=utcnow(),
            engine_log=engine_log if engine_log.exists() else None,
            workload_stats=stats,
            error="; ".join(errors) or None,
            endpoint=endpoint,
            status=status.value,
            interrupted=interrupted,
            missing_points=missing,
            capacity=capacity,
        )
        write_campaign_files(result)
        if store.local_path(layout.execution) is None:
            store.put_file(here / "campaign.json", layout.campaign_json)
            store.put_file(here / "summary.json", layout.summary_json)
            for p in outcomes:
                store.put_file(p.folder / "summary.json", f"{layout.point(p.label)}/summary.json")
                for t in p.trials.trials if p.trials is not None else ():
                    store.put_file(
                        p.folder / t.folder / "summary.json", f"{layout.point(p.label)}/{t.folder}/summary.json"
                    )
        if layout.latest:
            store.put_text(layout.latest, layout.execution.rsplit("/", 1)[-1])
    return Summary(
        status=status,
        error=result.error,
        headline=result.headline,
        points=tuple(p.label for p in outcomes),
        missing_points=tuple(missing),
        interrupted=interrupted,
    )


def _point_outcomes(
    cfg: Config, here: Path, labels: list[str], theoretical_hit_rate: float | None
) -> tuple[list[PointOutcome], list[str]]:
    """The measured points under ``here`` and what was not measured (a point, or with load.trials > 1 a trial:
    ``c8/trial-3``). A point of trials is their combination (benchcamp.results.outcome.combine_trials); each
    trial's own summary.json goes beside its records first."""
    from benchcamp.loadgen import PointResult
    from benchcamp.results.outcome import combine_trials
    from benchcamp.results.trials import trial_name

    outcomes: list[PointOutcome] = []
    missing: list[str] = []
    for lb in labels:
        if cfg.load.trials <= 1:
            if (here / lb / "point.json").exists():
                outcomes.append(summarize_point(cfg, PointResult.load(here / lb), theoretical_hit_rate))
            else:
                missing.append(lb)
            continue
        trials = []
        for k in range(1, cfg.load.trials + 1):
            folder = here / lb / trial_name(k)
            if not (folder / "point.json").exists():
                missing.append(f"{lb}/{trial_name(k)}")
                continue
            trial = summarize_point(cfg, PointResult.load(folder), theoretical_hit_rate)
            atomic.write_json(folder / "summary.json", strict_json(point_summary_doc(trial)))
            trials.append((k, trial))
        if trials:
            outcomes.append(combine_trials(trials, cfg.load.trials, cfg.regression.confidence))
    return outcomes, missing


def merge_shards(cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path) -> list[str]:
    """Every point its load-generator shards measured, merged into the point's records.parquet and point.json
    (benchcamp.loadgen.shards.merge_shard_points); a point merged already is left as it is. Returns the labels
    merged. A shard that wrote no result makes its point incomplete; its flushed records are merged all the same."""
    from benchcamp.loadgen import PointSpec, point_label
    from benchcamp.loadgen.shards import merge_shard_points

    merged = []
    for level in cfg.load.levels:
        label = point_label(cfg.load.mode, level)
        shards = [layout.shard(label, k) for k in range(cfg.load.shards)]
        if store.exists(layout.point_json(label)) or not any(store.exists(k) for k in shards):
            continue
        local = store.local_path(layout.point(label))
        folder = local if local is not None else store.get_dir(layout.point(label), tmp / label)
        spec = PointSpec.from_load(cfg.load, level, layout.execution_id)
        doc = merge_shard_points(
            [folder / f"shard-{k}" for k in range(cfg.load.shards)],
            folder,
            label,
            spec.level,
            (spec.warmup_s, spec.window_end_s),
        )
        if local is None:
            store.put_file(folder / "records.parquet", layout.records(label))
            store.put_file(folder / "point.json", layout.point_json(label))
        log.info(
            "point %s: %d shards merged, %d records%s",
            label,
            cfg.load.shards,
            doc["requests"],
            f" ({doc['aborted']})" if doc["aborted"] else "",
        )
        merged.append(label)
    return merged


def load_campaign(cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path) -> CampaignResult:
    """The CampaignResult written by :func:`summarize`, with its files on this machine (under ``tmp``)."""
    here = _fetch_execution(cfg, store, layout, tmp)
    return CampaignResult.load(here)


def track(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    airflow: dict[str, str] | None = None,
    last_attempt: bool = False,
) -> str | None:
    """MLflow: a parent run per execution, a child run per point (idempotent per execution id).

    A failure is recorded in the store; on the ``last_attempt`` it is not raised (None): evaluate
    still renders the report against the published baselines and the verdict fails naming it,
    as `benchcamp run` does. An Airflow task raises on earlier attempts, to be retried."""
    try:
        return _track(cfg, store, layout, airflow)
    except Exception as exc:
        if not last_attempt:
            raise
        log.error("not tracked: %s", redaction.redact(str(exc)))
        return None


def _track(cfg: Config, store: ResultsStore, layout: StoreLayout, airflow: dict[str, str] | None) -> str:
    from benchcamp.tracking import log_campaign

    with recorded(store, layout, Step.TRACK), _workdir("track") as tmp:
        campaign = load_campaign(cfg, store, layout, tmp)
        workload = None
        key = layout.workload(campaign.workload_digest) if campaign.workload_digest else None
        if not Path(campaign.workload_path).is_file() and key and store.exists(key):
            # built on another worker: the dataset comes from the store's copy, named by its URL
            workload = (_workload_file(store, key, "", tmp), store.url(key))
        run_id = str(log_campaign(campaign.config, campaign, airflow=airflow, workload=workload))
        if cfg.tracking.benchmark_report:
            export_benchmark_reports(campaign, store, layout, tmp / "benchmark_report", run_id)
    log.info("%s", mlflow_location(cfg, run_id))
    return run_id


def mlflow_location(cfg: Config, run_id: str) -> str:
    """Where the campaign's MLflow run is, one line: run id, experiment, tracking URI (no password), and the
    run's page: a link where the URI is a server, else the `mlflow ui` command that serves the store."""
    from benchcamp.tracking.store import client, describe_uri

    uri = cfg.tracking.mlflow_uri
    try:
        exp = client(uri).get_run(run_id).info.experiment_id
    except Exception as exc:  # noqa: BLE001  (the line is a pointer; the run exists, tracking said so)
        return (
            f"MLflow: run {run_id} in experiment {cfg.experiment_name!r} at {describe_uri(uri)} ({type(exc).__name__})"
        )
    page = f"#/experiments/{exp}/runs/{run_id}"
    where = (
        f"open {describe_uri(uri).rstrip('/')}/{page}"
        if uri.startswith(("http://", "https://"))
        else f"see it with `mlflow ui --backend-store-uri {describe_uri(uri)}`, then {page}"
    )
    return f"MLflow: run {run_id} in experiment {cfg.experiment_name!r} (id {exp}) at {describe_uri(uri)}; {where}"


def export_benchmark_reports(
    campaign: CampaignResult, store: ResultsStore, layout: StoreLayout, out: Path, run_id: str | None
) -> list[Path]:
    """Each point as llm-d's Benchmark Report v0.2.1 (benchcamp.interop.br_export) into the execution's
    ``benchmark_report/`` in the store and, when tracked, the campaign run's artifacts."""
    from benchcamp.interop.br_export import RunPointer, execution_of, write_reports

    uri = campaign.config.tracking.mlflow_uri
    files = write_reports(
        campaign.config, execution_of(campaign), campaign.points, out, RunPointer(uri, run_id) if run_id else None
    )
    if files:
        store.put_dir(out, layout.benchmark_reports)
    if run_id and files:
        from benchcamp.tracking.store import client

        client(uri).log_artifacts(run_id, str(out), "benchmark_report")
    return files


def evaluate(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    run_id: str | None,
    reports: str | Path | None = None,
    track: bool = True,
) -> Evaluation:
    """Compare with the baselines and render the report (benchcamp.report.flow.finish) into the
    execution's report folder in the store (each execution owns its report), verdicts.json next
    to it; ``reports``: also publish it there (the latest rendered: `benchcamp run --reports`)."""
    from benchcamp.report.flow import TREND_PAGE, finish

    with _workdir("evaluate") as tmp:
        campaign = load_campaign(cfg, store, layout, tmp)
        out = tmp / "report"
        outcome = finish(campaign.config, campaign, out, run_id=run_id, track=track and run_id is not None)
        store.put_dir(out, layout.report)
        assert outcome.report is not None  # finish always renders
        page = outcome.report.relative_to(out)
        if reports:
            publish_report(out, Path(reports))
        report = str(Path(reports) / page) if reports else store.url(f"{layout.report}/{page.as_posix()}")
        doc = {
            kinds.VERDICTS: [v.to_dict() for v in outcome.verdicts],
            kinds.REGRESSED: outcome.regressed,
            "notes": outcome.notes,
            "report": report,
        }
        trend = page.parent / TREND_PAGE
        if (out / trend).is_file():  # the nightly series' page (benchcamp.report.trend), beside the report
            doc["trend"] = str(Path(reports) / trend) if reports else store.url(f"{layout.report}/{trend.as_posix()}")
        store.put_text(layout.verdicts, dumps(doc, indent=2))
    return Evaluation(
        regressed=outcome.regressed,
        verdict_count=len(outcome.verdicts),
        notes=tuple(outcome.notes),
        report=report,
        mlflow_run_id=run_id,
    )


def publish_report(rendered: Path, reports: Path) -> None:
    """Copy a rendered report over ``reports`` whole, one run at a time (a lock file there): two
    runs at once never leave one's page with the other's data; the last to finish is shown."""
    import fcntl

    reports.mkdir(parents=True, exist_ok=True)
    with open(reports / ".benchcamp-publish.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.copytree(rendered, reports, dirs_exist_ok=True)


def judge(
    summary: Summary,
    verdicts: Sequence[Verdict] | None,
    fail_on_regression: bool = True,
    need_verdicts: bool = False,
    trend: str | None = None,
) -> tuple[ExitCode, list[str]]:
    """One outcome table for the CLI and the DAG: (exit code, problems). ``verdicts``: the comparison's (None:
    not evaluated); ``trend``: the nightly series' page, named beside a regression."""
    problems: list[str] = []
    status = summary.status
    if summary.error:
        problems.append(summary.error)
    elif status is not Status.OK:
        problems.append(status.value)
    if status is not Status.OK:
        return status.exit_code, problems
    # a regression the nightly guard alarmed on an earlier night is not failed on again (said once)
    regressed = [v for v in verdicts or () if v.verdict == "regressed" and v.alarm != "open"]
    if regressed and fail_on_regression:
        problems.append("REGRESSION in " + ", ".join(_regression_words(v) for v in regressed))
        if trend:
            problems.append(f"trend: {trend}")
        return ExitCode.REGRESSION, problems
    if need_verdicts and verdicts is None:
        problems.append("not evaluated (see the evaluate step's log)")
        return ExitCode.FAILED, problems
    return ExitCode.OK, problems


def _regression_words(v: Verdict) -> str:
    """metric, size, interval, the night it began and the diff across it (what the notification says)."""
    delta = v.delta_rel
    words = f"{v.metric} {delta:+.1%}" if isinstance(delta, float) and math.isfinite(delta) else str(v.metric)
    lo, hi = v.ci_low, v.ci_high
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        words += f" [95% CI {lo:+.1%}, {hi:+.1%}]"
    words += f" vs {v.baseline}"
    if v.began:
        diff = "; ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in (v.diff or {}).items())
        words += f", began on night {v.began} ({diff or 'no configuration change across it'})"
    return words


def judge_stored(store: ResultsStore, layout: StoreLayout) -> tuple[list[str], Judgement]:
    """:func:`judge` of an execution from what the store holds (the DAG's verdict): (problems, judgement)."""
    from benchcamp.verdicts.compare import Verdict

    if not store.exists(layout.summary_json):
        return [f"no results at {store.url(layout.summary_json)}"], Judgement(ExitCode.FAILED)
    summary = Summary.from_dict(json.loads(store.get_text(layout.summary_json)))
    stored = json.loads(store.get_text(layout.verdicts)) if store.exists(layout.verdicts) else None
    verdicts = None if stored is None else [Verdict.from_dict(v) for v in stored.get(kinds.VERDICTS) or []]
    trend = None if stored is None else stored.get("trend")
    code, problems = judge(summary, verdicts, need_verdicts=True, trend=trend)
    untracked = recorded_errors(store, layout, only=(Step.TRACK,))
    if untracked:
        problems.insert(0, f"{untracked[0]} (results kept at {store.url(layout.execution)}: rerun the track task)")
        code = code if code != ExitCode.OK else ExitCode.FAILED
    return problems, Judgement(code, status=summary.status.value, headline=summary.headline)
