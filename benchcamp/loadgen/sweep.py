"""run_point: one sweep point across worker processes; run_sweep: every level.

A point: start workers, wait until all
are ready, scrape /metrics, set the shared epoch, let them run warm-up +
window (+ drain), watch for max_requests / a dead endpoint / a stalled engine
/ crashed workers / Ctrl-C, scrape again, merge the worker record files into
records.parquet and write point.json (both atomically). Records are on disk as
they arrive; the merge only concatenates, so whatever happens, measured
requests are kept. A point owns its folder while it runs and never overwrites
a measured one; its worker files carry a per-run token, so it merges and
removes only its own, and keeps (recovers) those a killed run left behind.
Why a point ended early is worded in one place: ``loadgen/outcome.py``.

Each point of a sweep gets its own prompt salt (``PointSpec.salt``, from the
campaign execution and the point label; recorded in point.json). All points
replay the same workload against ONE engine, so unsalted, point 2 would find
point 1's prompts (same block ids, same token ids) in the prefix cache and
report an inflated hit rate and throughput. The salt remaps every block id
of the point by one bijection: sharing within the point is exactly the
workload's, sharing across points is none.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from benchcamp.errors import StoreError
from benchcamp.loadgen import health as health_mod
from benchcamp.loadgen import outcome
from benchcamp.loadgen import scrape as scrape_mod
from benchcamp.loadgen.preflight import probe, reachable
from benchcamp.loadgen.progress import Progress
from benchcamp.loadgen.replay import closed_slots, open_plan, trace_plan
from benchcamp.loadgen.shards import MAX_LATE_S, BarrierTimeout, Shard, clock_offset, shard_workers
from benchcamp.loadgen.signals import interrupts_as_flag
from benchcamp.loadgen.spec import EndpointError, PointResult, PointSpec
from benchcamp.loadgen.worker import Ctrl, Stat, WorkerPlan, worker_main
from benchcamp.results import atomic
from benchcamp.results.records import (
    SCHEMA,
    merge_records,
    new_run_token,
    point_lock,
    read_records,
    recover,
    worker_records_path,
)
from benchcamp.workload.model import Workload

if TYPE_CHECKING:
    from benchcamp.config import Load

log = logging.getLogger(__name__)

POLL_S = 0.1
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 15.0  # after the drain deadline, how long workers get to flush before they are killed
# No token (and no request finished) for this long while requests are in flight: the engine
# stalled. Long enough for the slowest first token of a long prompt in a deep queue; a short
# point waits less (stall_limit), so a stall is named as one instead of showing up as "too few
# requests in the window".
STALL_S = 60.0
MIN_STALL_S = 5.0
OUTPUTS = ("records.parquet", "point.json")


def stall_limit(point: PointSpec, stall_s: float, streamed: bool, longest_pause_s: float) -> float:
    """How long the point waits, with requests in flight and no token, before calling the engine
    stalled (at most ``stall_s``, at least MIN_STALL_S).

    Before the point's first token: its warm-up and window (a first token that does not come in
    the whole window measures nothing: for this point the engine stalled). After it: half the
    window, or twice the longest pause this engine has already shown in the point, whichever is
    longer, so a slow but alive engine (long prefills, slow steps) sets its own bar and is not
    called stalled.
    """
    if not streamed:
        wait = point.warmup_s + point.duration_s
    else:
        wait = max(point.duration_s / 2, 2 * longest_pause_s)
    return round(min(stall_s, max(MIN_STALL_S, wait)), 1)


class PointExists(StoreError):
    """The point folder already holds a measured point; nothing is overwritten."""


@dataclass(frozen=True)
class PointTarget:
    """What one point measures and where its files go: the endpoint (with its API key and served model name), the
    workload it replays at the point's load, and the point's folder."""

    endpoint: str
    api_key: str | None
    model: str
    workload: Workload
    point: PointSpec
    out_dir: Path


def _plans(target: PointTarget, token: str, shard: Shard | None = None) -> list[WorkerPlan]:
    """This host's workers; with a ``shard``, its slice of the plan of every shard's workers together."""
    workload, point, out_dir = target.workload, target.point, target.out_dir
    top = workload.top_level()
    if not top:
        raise ValueError(f"workload {workload.name!r} has no top-level sessions to replay")
    n = point.n_workers(len(top))
    if shard is not None:  # load.workers per shard (fixed by config: every host builds the same plan)
        cap = int(point.level) if point.mode == "closed" else len(top)
        n = max(1, min(point.workers * shard.count, cap))
    mine = range(n) if shard is None else shard_workers(n, shard.count, shard.index)
    horizon = point.window_end_s
    if point.mode == "closed":
        per = closed_slots(int(point.level), n)
        starts: list[list] = [[] for _ in range(n)]
    elif point.mode == "open":
        per = [0] * n
        starts = open_plan(len(top), point.level, horizon, n, point.arrival, point.gamma_shape, point.seed)
    elif point.mode == "trace":
        per = [0] * n
        starts = trace_plan(top, point.level, horizon, n)
    else:
        raise ValueError(f"load.mode={point.mode!r}: use closed, open or trace")
    return [
        WorkerPlan(
            index=i - mine.start,
            workers=len(mine),
            global_index=i,
            global_workers=n,
            label=point.label,
            endpoint=target.endpoint,
            api_key=target.api_key,
            model=target.model,
            api=point.api,
            workload=workload,
            mode=point.mode,
            slots=per[i],
            starts=starts[i],
            warmup_s=point.warmup_s,
            drain_s=point.drain_s,
            request_timeout_s=point.request_timeout_s,
            records_path=str(worker_records_path(out_dir, token, i - mine.start)),
            health_path=str(out_dir / f"health.{token}.w{i - mine.start}.json"),
            salt=point.salt,
            prompt=point.prompt,
            vllm_sampling=point.vllm_sampling,
            cached_tokens_reported=point.cached_tokens_reported,
            session_header=point.session_header,
            max_requests=point.max_requests,
            agentx=point.agentx,
            replay=point.replay,
            level=int(point.level) if point.mode == "closed" else 0,
            seed=point.seed,
        )
        for i in mine
    ]


def _context() -> Any:
    """forkserver with the worker module preloaded: workers start in milliseconds (no
    per-point re-import of pyarrow/pandas), and never inherit the caller's threads
    (an Airflow task, a test server) as a plain fork would. As with spawn, a script that
    calls run_point must guard its entry point with ``if __name__ == "__main__":``."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["benchcamp.loadgen.worker"])
    return ctx


def _refuse_overwrite(out_dir: Path) -> None:
    done = [name for name in OUTPUTS if (out_dir / name).exists()]
    if done:
        raise PointExists(
            f"{out_dir} already holds a measured point ({', '.join(done)}); nothing was overwritten: "
            "give each execution its own results folder (a new execution id)"
        )


def run_point(
    endpoint: str,
    api_key: str | None,
    model: str,
    workload: Workload,
    point: PointSpec,
    out_dir: Path,
    progress: Any = None,
    stall_s: float = STALL_S,
    shard: Shard | None = None,
    why_dead: Callable[[], str | None] | None = None,
) -> PointResult:
    """Run one sweep point into ``out_dir`` (records.parquet + point.json); ``shard``: only this
    host's shard of it, started at the shards' barrier (benchcamp.loadgen.shards); ``progress``: True
    (a live line on stderr), a Progress, a callable ``f(state: dict)`` (called every poll), or
    None. Ctrl-C stops the point, keeps its records, writes point.json and re-raises
    KeyboardInterrupt. ``why_dead``: asked once the endpoint stops answering, what ended the engine
    (one line, or None when it cannot tell): the point's reason names it (a Slurm job's time limit).

    The point owns its folder while it runs (:func:`benchcamp.results.records.point_lock`) and
    refuses one that already holds a measured point. Worker files of an earlier run that
    was killed are merged into ``records.<token>.parquet`` first (kept, never deleted).
    """
    out_dir = Path(out_dir)
    with point_lock(out_dir):
        _refuse_overwrite(out_dir)
        recovered = recover(out_dir, locked=True)
        if recovered:
            log.warning(
                "%s: kept the records of an earlier, killed run as %s", out_dir, ", ".join(p.name for p in recovered)
            )
        target = PointTarget(endpoint, api_key, model, workload, point, out_dir)
        with interrupts_as_flag() as interrupt:
            result = _measure(
                target, progress, stall_s, [p.name for p in recovered], interrupt.raise_if_set, shard, why_dead
            )
        interrupt.raise_if_set()  # Ctrl-C after the window, during the merge: the point is whole, the run stops
        return result


@dataclass
class _Workers:
    """This host's worker processes of one point and what they share with it: the control block (stop time,
    epoch, cancel), their published statistics, the window's request lock, and the pipe whose closing tells them
    this process died. Held here while they run: a started Process drops its arguments, and a lock no one holds
    is gone before a worker has unpickled it."""

    plans: list[WorkerPlan]
    procs: list[Any]
    ctrl: Any
    stats: Any
    lock: Any
    alive: tuple[Any, Any]

    @classmethod
    def create(cls, plans: list[WorkerPlan], stop_at: float) -> _Workers:
        ctx = _context()
        ctrl = ctx.Array("d", Ctrl.N, lock=False)
        lock = ctx.Lock()  # Worker.claim: requests sent in the window, counted across workers
        stats = ctx.Array("d", len(plans) * Stat.N, lock=False)
        ctrl[Ctrl.STOP_AT] = stop_at
        alive_r, alive_w = ctx.Pipe(duplex=False)  # workers see EOF on alive_r if this process dies
        procs = [
            ctx.Process(
                target=worker_main, args=(p, ctrl, stats, alive_r, lock), name=f"benchcamp-loadgen-{i}", daemon=True
            )
            for i, p in enumerate(plans)
        ]
        return cls(plans, procs, ctrl, stats, lock, (alive_r, alive_w))

    def total(self, i: int) -> float:
        return sum(self.stats[w * Stat.N + i] for w in range(len(self.plans)))

    def finished(self, i: int) -> bool:
        return bool(self.stats[i * Stat.N + Stat.FINISHED])

    def stop_now(self, t: float, cancel: float) -> None:
        """End the window at ``t`` (if it has not ended) and cancel what is in flight (2: abort, 1: interrupt)."""
        self.ctrl[Ctrl.STOP_AT] = min(self.ctrl[Ctrl.STOP_AT], t)
        self.ctrl[Ctrl.CANCEL] = cancel


@dataclass
class _Run:
    """What happened to a point while its workers ran."""

    aborted: str | None = None
    interrupted: bool = False
    shard_meta: dict[str, Any] | None = None
    crashed: list[int] = field(default_factory=list)
    before: Any = None  # the server's /metrics at the start (None: the point never got that far)
    epoch: float = 0.0


@dataclass
class _Watch:
    """The poll loop's memory: connection errors and progress seen so far, and the longest pause with requests
    in flight (``stall_limit``)."""

    conn_errors: float = 0.0
    progress: tuple[float, float] = (0.0, 0.0)
    last_progress: float = field(default_factory=time.monotonic)
    longest_pause: float = 0.0


def _measure(
    target: PointTarget,
    progress: Any,
    stall_s: float,
    recovered: list[str],
    check_interrupt: Callable[[], None],
    shard: Shard | None = None,
    why_dead: Callable[[], str | None] | None = None,
) -> PointResult:
    token = new_run_token()
    point = target.point
    workers = _Workers.create(_plans(target, token, shard), point.window_end_s)
    bar = Progress(point.label) if progress is True else (progress if isinstance(progress, Progress) else None)
    callback = progress if callable(progress) and not isinstance(progress, Progress) else None
    run = _Run()
    try:
        _start(workers, check_interrupt)
        _begin(target, workers, run, shard, check_interrupt)
        _watch(target, workers, run, stall_s, why_dead, check_interrupt, bar, callback)
    except KeyboardInterrupt:
        _interrupted(workers, run, point)
    finally:
        _reap(workers)
    for i, p in enumerate(workers.procs):
        if p.pid is not None and not workers.finished(i) and i not in run.crashed and p.exitcode not in (0, None):
            run.crashed.append(i)
    after = scrape_mod.scrape(target.endpoint, target.api_key) if run.before is not None else None
    if run.crashed and run.aborted is None:
        run.aborted = outcome.worker_crashed({i: workers.procs[i].exitcode for i in run.crashed})
    result = _write_point(target, workers, run, after, token, recovered)
    if bar is not None:
        window = result.window
        bar.close(
            f"{result.requests} requests, window {window[1] - window[0]:.1f}s"
            + (f", ABORTED: {run.aborted}" if run.aborted else "")
        )
    if run.interrupted:
        raise KeyboardInterrupt
    return result


def _start(workers: _Workers, check_interrupt: Callable[[], None]) -> None:
    """Start the workers and wait until every one is ready."""
    for p in workers.procs:
        p.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while workers.total(Stat.READY) < len(workers.plans):
        check_interrupt()
        dead = [i for i, p in enumerate(workers.procs) if p.exitcode is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"load generator worker(s) {dead or 'all'} failed to start")
        time.sleep(0.01)


def _begin(
    target: PointTarget, workers: _Workers, run: _Run, shard: Shard | None, check_interrupt: Callable[[], None]
) -> None:
    """Meet the other shards, scrape the server's /metrics and set the epoch the workers' clocks start at."""
    meta = _meet(shard, target.endpoint, workers.plans, check_interrupt) if shard is not None else None
    run.before = scrape_mod.scrape(target.endpoint, target.api_key)
    run.epoch = time.monotonic() + 0.02
    if shard is not None and meta is not None:  # every shard at one agreed wall time
        run.epoch = _wait_for_start(shard, meta, check_interrupt)
    run.shard_meta = meta
    workers.ctrl[Ctrl.EPOCH] = run.epoch


def _watch(
    target: PointTarget,
    workers: _Workers,
    run: _Run,
    stall_s: float,
    why_dead: Callable[[], str | None] | None,
    check_interrupt: Callable[[], None],
    bar: Progress | None,
    callback: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Poll the workers until they have all ended: a crashed worker, a dead endpoint, a stalled engine or hung
    workers end the point early; the progress line and ``callback`` see every poll."""
    point, procs, ctrl = target.point, workers.procs, workers.ctrl
    seen = _Watch()
    while any(p.is_alive() for p in procs):
        time.sleep(POLL_S)
        check_interrupt()
        now = time.monotonic()
        t = now - run.epoch
        # load.max_requests: the workers stop the window themselves at the last request (Worker.claim)
        for i, p in enumerate(procs):
            if p.exitcode is not None and not workers.finished(i) and i not in run.crashed:
                run.crashed.append(i)
        inflight = _check_engine(target, workers, run, seen, stall_s, why_dead, now)
        if t > ctrl[Ctrl.STOP_AT] + point.drain_s + STOP_GRACE_S:
            for p in procs:
                if p.is_alive():
                    p.kill()
            run.aborted = run.aborted or outcome.workers_hung(STOP_GRACE_S)
        state = dict(
            t=t,
            warmup_s=point.warmup_s,
            stop_at=ctrl[Ctrl.STOP_AT],
            drain_s=point.drain_s,
            done=int(workers.total(Stat.DONE)),
            in_window=int(workers.total(Stat.IN_WINDOW)),
            chunks=workers.total(Stat.CHUNKS),
            errors=int(workers.total(Stat.ERRORS)),
            inflight=inflight,
        )
        if bar is not None:
            bar.update(**state)
        if callback is not None:
            callback(dict(state, pids=[p.pid for p in procs], label=point.label))


def _check_engine(
    target: PointTarget,
    workers: _Workers,
    run: _Run,
    seen: _Watch,
    stall_s: float,
    why_dead: Callable[[], str | None] | None,
    now: float,
) -> int:
    """One poll's look at the engine: new connection errors and no answer is a dead endpoint; requests in flight
    and no progress for longer than ``stall_limit`` a stalled engine. Either stops the window now. Returns the
    requests in flight."""
    t = now - run.epoch
    conn_errors = workers.total(Stat.CONN_ERRORS)
    if conn_errors > seen.conn_errors and run.aborted is None:
        seen.conn_errors = conn_errors
        if not reachable(target.endpoint):
            workers.stop_now(t, 2.0)
            run.aborted = outcome.engine_died(_cause(why_dead))
    # progress = a token streamed (workers publish chunk counts every flush) or a request ended
    inflight = int(workers.total(Stat.INFLIGHT))
    moved = (workers.total(Stat.CHUNKS), workers.total(Stat.DONE))
    if moved != seen.progress or inflight == 0:
        if moved != seen.progress:
            seen.longest_pause = max(seen.longest_pause, now - seen.last_progress)
        seen.progress, seen.last_progress = moved, now
    elif run.aborted is None and now - seen.last_progress > (
        limit := stall_limit(target.point, stall_s, any(moved), seen.longest_pause)
    ):
        run.aborted = outcome.engine_stalled(limit, inflight)
        workers.stop_now(t, 2.0)
    return inflight


def _interrupted(workers: _Workers, run: _Run, point: PointSpec) -> None:
    """Ctrl-C: end the window now (after warm-up at the earliest), cancel, and give the workers time to flush."""
    run.interrupted = True
    run.aborted = outcome.interrupted()
    t = time.monotonic() - run.epoch if run.epoch else 0.0
    workers.stop_now(max(t, point.warmup_s + 1e-3), 1.0)
    end = time.monotonic() + STOP_GRACE_S
    for p in workers.procs:
        p.join(timeout=max(0.1, end - time.monotonic()))


def _reap(workers: _Workers) -> None:
    for p in workers.procs:
        if p.pid is None:
            continue  # never started
        if p.is_alive():
            p.kill()
        p.join(timeout=5)
    for end in workers.alive:
        end.close()


def _write_point(
    target: PointTarget, workers: _Workers, run: _Run, after: Any, token: str, recovered: list[str]
) -> PointResult:
    """Merge this run's worker files into records.parquet, combine the workers' health and write point.json."""
    point, out_dir, plans = target.point, target.out_dir, workers.plans
    records_path = out_dir / "records.parquet"
    count = merge_records([p.records_path for p in plans], records_path)  # this run's files only
    window = (point.warmup_s, max(point.warmup_s + 1e-3, min(workers.ctrl[Ctrl.STOP_AT], point.window_end_s)))
    worker_health = []
    for p in plans:
        try:
            worker_health.append(json.loads(Path(p.health_path).read_text()))
            Path(p.health_path).unlink()
        except (OSError, ValueError):
            pass
    h = health_mod.combine(worker_health, len(plans), sorted(run.crashed))
    h.update(health_mod.sched_lag_ms(read_records(records_path), window))
    h["sessions_distinct"] = len(target.workload.top_level())  # a level above it replays sessions (summary note)
    result = PointResult(
        label=point.label,
        records_path=records_path,
        window=window,
        client_health=h,
        server_metrics_delta=scrape_mod.delta(run.before, after),
        aborted=run.aborted,
        level=point.level,
        requests=count,
    )
    kind = outcome.AbortKind.of(run.aborted)
    doc = dict(
        result.to_dict(),
        epoch_monotonic=run.epoch,
        spec=point.__dict__,
        server_metrics_available=run.before is not None,
        run_token=token,
        abort_kind=kind.value if kind else None,
        recovered_runs=recovered,
        shard=run.shard_meta,
    )
    atomic.write_text(out_dir / "point.json", json.dumps(doc, indent=2, default=str))
    return result


def _cause(why_dead: Callable[[], str | None] | None) -> str | None:
    """What ended the engine, if the deployment can tell; never fails the point over it."""
    if why_dead is None:
        return None
    try:
        return why_dead()
    except Exception as exc:  # noqa: BLE001  (the point's reason stays the generic one)
        log.info("could not tell what ended the engine: %s", exc)
        return None


def _meet(shard: Shard, endpoint: str, plans: list[WorkerPlan], tick: Callable[[], None]) -> dict[str, Any]:
    """This shard's meta (host, clock offset, workers) once every shard is ready, with the agreed start."""
    meta = dict(
        index=shard.index,
        count=shard.count,
        host=shard.host or socket.gethostname(),
        workers=[p.global_index for p in plans],
        clock=clock_offset(endpoint),
    )
    meta["start_wall"] = shard.barrier(meta, tick)
    return meta


def _wait_for_start(shard: Shard, meta: dict[str, Any], tick: Callable[[], None]) -> float:
    """Sleep until the agreed start; returns it as this host's monotonic epoch. A shard that sees it too late
    fails (the point is then incomplete) rather than start its sessions after the others'."""
    epoch = time.monotonic() + (meta["start_wall"] - time.time())
    while time.monotonic() < epoch - 0.02:  # the workers start their clocks at once when told
        tick()
        time.sleep(min(POLL_S, max(0.0, epoch - 0.02 - time.monotonic())))
    meta["late_s"] = round(max(0.0, time.monotonic() - epoch), 4)
    if meta["late_s"] > MAX_LATE_S:
        raise BarrierTimeout(
            f"shard {shard.index} of {shard.count} reached the agreed start {meta['late_s']:.2f} s late"
        )
    return epoch


def run_sweep(
    load: Load,
    model: str,
    workload: Workload,
    endpoint: str,
    api_key: str | None,
    results_dir: str | Path,
    progress: Any = True,
    execution_id: str | None = None,
    stall_s: float = STALL_S,
) -> list[PointResult]:
    """Every level of the config's ``load`` section, in order, against ``model`` (the served model name);
    results_dir/<label>/{records.parquet, point.json}.

    Each point's prompt salt comes from ``execution_id`` (PointSpec.from_load).

    A point that finds the endpoint gone ends the sweep: the remaining points are
    reported as aborted (with empty records) at once instead of waiting on a dead server.
    """
    results_dir = Path(results_dir)
    caps = probe(endpoint, api_key, model)
    results: list[PointResult] = []
    dead: str | None = None
    for level in load.levels:
        spec = PointSpec.from_load(load, level, execution_id, capabilities=caps)
        out_dir = results_dir / spec.label
        if dead is None and results and results[-1].aborted and not reachable(endpoint):
            dead = outcome.not_run(f"endpoint unreachable after point {results[-1].label}")
        if dead is not None:
            results.append(_skipped(spec, out_dir, dead))
            continue
        try:
            results.append(
                run_point(endpoint, api_key, model, workload, spec, out_dir, progress=progress, stall_s=stall_s)
            )
        except EndpointError as exc:
            dead = outcome.not_run(str(exc))
            results.append(_skipped(spec, out_dir, dead))
    return results


def _skipped(spec: PointSpec, out_dir: Path, reason: str) -> PointResult:
    path = out_dir / "records.parquet"
    window = (spec.warmup_s, spec.window_end_s)
    res = PointResult(label=spec.label, records_path=path, window=window, aborted=reason, level=spec.level)
    with point_lock(out_dir):
        _refuse_overwrite(out_dir)
        with atomic.atomic_open(path, "wb") as f:
            pq.write_table(SCHEMA.empty_table(), f)
        atomic.write_text(
            out_dir / "point.json",
            json.dumps(
                dict(res.to_dict(), spec=spec.__dict__, abort_kind=outcome.AbortKind.NOT_RUN.value),
                indent=2,
                default=str,
            ),
        )
    return res
