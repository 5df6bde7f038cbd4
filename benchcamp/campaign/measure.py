"""The measuring steps: the sweep over the load levels (sharded over load-generator hosts or not) and, with
load.mode=capacity, the capacity search; each point goes to the results store as it completes."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchcamp.campaign.execution import (
    clear_error,
    measurement_name,
    measurements,
    point_labels,
    record_error,
    trial_spec,
    trials_measured,
    virtual,
    workdir,
    workload_file,
)
from benchcamp.campaign.handoff import Deployment, WorkloadRef
from benchcamp.campaign.interrupt import sigterm_as_interrupt
from benchcamp.campaign.kinds import PointAborted, Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.config import Config
from benchcamp.results.jsonsafe import dumps
from benchcamp.results.store import ResultsStore
from benchcamp.secrets import redaction

log = logging.getLogger(__name__)


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
        or trials_measured(cfg, store, layout, lb)
        for lb in point_labels(cfg, store, layout)
    )


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
        with workdir("sweep") as tmp:
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
                        if not virtual(cfg):  # what it accepts: the requests adapt (benchcamp.loadgen.readiness)
                            # from its reference, in this process
                            api_key = deployment_api_key(cfg, deployment.to_dict())
                            caps = probe(deployment.endpoint, api_key, cfg.served_model_name)
                    except Exception as exc:
                        record_error(store, layout, Step.SWEEP, exc)
                        raise
                    wl = read_workload(workload_file(store, workload.key, workload.path, tmp))
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
    with workdir("search") as tmp:
        wl = read_workload(workload_file(store, workload.key, workload.path, tmp))
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
