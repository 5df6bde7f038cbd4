"""The soak's campaigns: one fault each (or none), injected while the campaign runs in a running Airflow,
what docs/reference/failure-modes.md says it must do to the run and its tasks, and the audit of what it left:
records expected/kept/mixed, MLflow runs per execution, engines and processes left behind.

A campaign whose fault an operator can remove (a full disk, a lost worker) is retried the way an operator does it (the fault removed,
then Airflow's Clear on the failed sweep, which also runs its setups and teardowns again): the retry must
resume in the same execution, keep the records already written, start one engine at a time and log to the
same MLflow run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common.paths import ROOT
from bench.common.servers import free_port
from bench.common.soak import (
    BIN,
    CAMPAIGN,
    DAG_ID,
    SOAK_ENV,
    AirflowApi,
    FullDisk,
    Gate,
    RecordsAudit,
    Services,
    audit_records,
    can_mount,
    engines_alive,
    mlflow_runs,
    processes_with,
    start_airflow,
    start_mlflow,
    within,
)

KINDS = ("none", "engine-crash", "mlflow-down", "disk-full", "worker-kill", "s3-down-dvc-push")
SWEEP, STOP, RELEASE, TRACK, VERDICT = (f"engine_config.{t}" for t in ("sweep", "stop_engine", "deprovision_node",
                                                                       "track", "verdict"))
VERDICT = "verdict"


@dataclass
class Soak:
    """What the campaigns share: the services, Airflow, MLflow, the results store and the soak's id."""

    services: Services
    api: AirflowApi | None
    mlflow_uri: str
    store: Path
    work: Path
    soak_id: str
    executor: str
    duration_s: float = 6.0
    log: Callable[[str], None] = print


@dataclass
class Outcome:
    """One campaign of the soak, judged."""

    executor: str
    fault: str
    run_id: str
    state: str = ""
    tasks: dict[str, str] = field(default_factory=dict)  # after the retry, where there is one
    first_tasks: dict[str, str] = field(default_factory=dict)
    retried_state: str = ""
    records: RecordsAudit = field(default_factory=RecordsAudit)
    mlflow_parents: int = 0
    engines_left: int = 0
    max_engines: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "records"}
        d["records"] = {**self.records.__dict__, "lost": self.records.lost}
        return d


def campaign_conf(soak: Soak, store: Path, matrix: dict | None = None) -> dict:
    """A one-engine simulated campaign of one short point (the form's fields plus overrides), logged to the
    soak's MLflow server and stored under ``store``."""
    return {
        "provider": "local", "engine_kind": "simulated",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
        "gpu": "h200", "gpu_count": 1, "tensor_parallel_size": 1, "data_parallel_size": 1,
        "enable_expert_parallel": False, "workload": "agentic-coding", "levels": [4],
        "warmup_s": 0.5, "duration_s": soak.duration_s, "baseline_run_id": None,
        "overrides": {
            "campaign.name": CAMPAIGN, "load.drain_s": 3, "load.min_requests": 1, "load.workers": 1,
            # 2 shared cores: a busy client still makes a valid point (validity is not what the soak tests)
            "load.max_error_rate": 1.0, "load.max_sched_lag_p99_ms": 10000, "load.max_client_cpu": 1.0,
            "load.max_incomplete_rate": 1.0,
            "workload.data": str(soak.work / "workload.parquet"), "results.store": str(store),
            "tracking.mlflow_uri": soak.mlflow_uri, "baselines.published": [],
        },
        "matrix": [matrix or {}],
    }


def execution_of(run_id: str) -> str:
    from benchcamp.provision.base import safe_name

    return safe_name(f"{DAG_ID}.{run_id}.m0")


def _states(api: AirflowApi, run_id: str) -> dict[str, str]:
    return {t["task_id"]: f"{t['state']}" + (f" (try {t['try_number']})" if (t.get("try_number") or 1) > 1 else "")
            for t in api.tasks(run_id)}


def _wait_task(soak: Soak, run_id: str, task: str, states: tuple[str, ...], timeout: float = 300) -> dict:
    assert soak.api is not None
    api = soak.api

    def found() -> dict | None:
        return next((t for t in api.tasks(run_id) if t["task_id"] == task and t["state"] in states), None)

    return soak.services.wait(f"{task} {'/'.join(states)} in {run_id}", found, timeout, every=0.5)


class EngineWatch:
    """Counts the execution's engines alive at once while a campaign runs (a retry must not start a second)."""

    def __init__(self, execution: str):
        import threading

        self.execution, self.most = execution, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            # the engine's API server: `benchcamp engine serve` (simulated) or `vllm serve`
            engines = [p for p in engines_alive(self.execution) if "serve" in _cmdline(p["pid"])]
            self.most = max(self.most, len(engines))
            self._stop.wait(1.0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.most


def _cmdline(pid: int) -> list[str]:
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def run_campaign(soak: Soak, fault: str, index: int) -> Outcome:
    """Trigger one campaign, inject ``fault`` into it, wait for the end (and the retry), judge it."""
    assert soak.api is not None and fault in KINDS
    api, t0 = soak.api, time.monotonic()
    run_id = f"soak__{soak.soak_id}__{index:02d}_{fault}"
    out = Outcome(soak.executor, fault, run_id)
    execution = execution_of(run_id)
    store, disk = soak.store, None
    if fault == "disk-full":
        disk = FullDisk(soak.work / f"full-{index:02d}")
        store = disk.path
    crash = {"engine.extra_args": ["--fault", "crash-after-requests=6"], "load.duration_s": 20}
    conf = campaign_conf(soak, store, crash if fault == "engine-crash" else None)
    watch = EngineWatch(execution)
    api.trigger(run_id, conf)
    try:
        if fault == "mlflow-down":
            _mlflow_down(soak, run_id, out)
        elif fault == "disk-full":
            assert disk is not None
            _wait_task(soak, run_id, SWEEP, ("running",))
            time.sleep(2)  # mid-point: the load generator is writing its records
            disk.fill()
            out.notes.append("results tmpfs filled 2 s into the sweep")
        elif fault == "worker-kill":
            _kill_sweep_worker(soak, run_id, out)
        out.state = api.wait_done(soak.services, run_id)
        out.tasks = out.first_tasks = _states(api, run_id)
        _judge_first(soak, fault, out)
        if fault in RETRIED:
            if disk is not None:
                disk.free()
            api.clear(run_id, [SWEEP])
            time.sleep(3)
            out.retried_state = api.wait_done(soak.services, run_id)
            out.tasks = _states(api, run_id)
            _judge_retry(fault, out)
    finally:
        out.max_engines = watch.stop()
        if disk is not None:
            disk.keep(soak.store)  # the audit reads every execution from the soak's store
            disk.unmount()
    _audit(soak, out, soak.store / CAMPAIGN / execution, execution)
    out.seconds = time.monotonic() - t0
    return out


def _mlflow_down(soak: Soak, run_id: str, out: Outcome) -> None:
    """MLflow crashes (SIGKILL) while the sweep runs and comes back once track has failed on it (its retry
    then logs the campaign), or after 3 minutes."""
    _wait_task(soak, run_id, SWEEP, ("running",))
    soak.services.stop("mlflow", signal_kill())
    down = time.monotonic()
    try:
        _wait_task(soak, run_id, TRACK, ("up_for_retry", "failed"), timeout=180)
    except RuntimeError:
        out.notes.append("track did not fail while MLflow was down (3 min)")
    soak.services.restart("mlflow")
    from bench.common.soak import http_up

    soak.services.wait("the MLflow server back", lambda: http_up(f"{soak.mlflow_uri}/health"), 300)
    out.notes.append(f"MLflow down {time.monotonic() - down:.0f} s")


def signal_kill() -> int:
    import signal

    return signal.SIGKILL


def _kill_sweep_worker(soak: Soak, run_id: str, out: Outcome) -> None:
    """The Celery worker running the sweep dies with everything it started (a host lost: SIGKILL to its process
    group), 3 s into the sweep; it comes back 5 s later."""
    ti = _wait_task(soak, run_id, SWEEP, ("running",))
    worker = str(ti.get("hostname") or "")
    if worker not in soak.services.procs:
        out.problems.append(f"the sweep runs on {worker!r}, not a worker the soak started")
        return
    time.sleep(3)
    soak.services.stop(worker, signal_kill(), wait_s=10)
    out.notes.append(f"killed Celery {worker} (its process group, SIGKILL) 3 s into the sweep")
    time.sleep(5)
    soak.services.restart(worker)


# What docs/reference/failure-modes.md says each fault does to the first run: (DAG run state, {task: state}).
EXPECTED: dict[str, tuple[str, dict[str, str]]] = {
    "none": ("success", {SWEEP: "success", STOP: "success", RELEASE: "success", TRACK: "success", VERDICT: "success"}),
    "engine-crash": ("failed", {SWEEP: "failed", STOP: "success", RELEASE: "success", VERDICT: "failed"}),
    "mlflow-down": ("success", {SWEEP: "success", STOP: "success", TRACK: "success (try 2)", VERDICT: "success"}),
    # the engine is stopped, but its log cannot be stored: stop_engine fails (3 retries while the disk is full)
    "disk-full": ("failed", {SWEEP: "failed", STOP: "failed", VERDICT: "failed"}),
    "worker-kill": ("failed", {SWEEP: "failed", STOP: "success", RELEASE: "success", VERDICT: "failed"}),
}
# ... and after the operator's retry (the fault gone: space freed, the worker back).
RETRIED = {"disk-full": "success", "worker-kill": "success"}


def _judge_first(soak: Soak, fault: str, out: Outcome) -> None:
    state, tasks = EXPECTED[fault]
    if out.state != state:
        out.problems.append(f"DAG run {out.state}, expected {state}")
    for task, want in tasks.items():
        got = out.tasks.get(task, "")
        # "success (try 2)": success on a retry (the outage visible); otherwise the state, whatever the try
        retried = want.endswith("(try 2)")
        if got.split(" (try")[0] != want.split(" (try")[0] or (retried and " (try" not in got):
            out.problems.append(f"{task} {got or 'absent'}, expected {want}")
    # Visible where the operator looks: the failed task's log in Airflow (a full disk cannot hold errors/).
    task, words = {"engine-crash": (SWEEP, "engine died"), "disk-full": (SWEEP, "No space left on device"),
                   "mlflow-down": (TRACK, "Connection refused")}.get(
        fault, ("", ""))
    if task and words not in task_log(soak, out.run_id, task, attempt=1):
        out.problems.append(f"{task}'s first log does not say {words!r}")


def task_log(soak: Soak, run_id: str, task: str, attempt: int) -> str:
    """A task attempt's log as the workers wrote it under AIRFLOW_HOME/logs (one machine: every worker's)."""
    assert soak.api is not None
    run = soak.api.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={task}"
    return "\n".join(p.read_text(errors="replace") for p in run.glob(f"**/attempt={attempt}.log"))


def _judge_retry(fault: str, out: Outcome) -> None:
    if out.retried_state != RETRIED[fault]:
        out.problems.append(f"after the retry: DAG run {out.retried_state}, expected {RETRIED[fault]}")


def _audit(soak: Soak, out: Outcome, execution_dir: Path, execution: str) -> None:
    out.records = audit_records(execution_dir)
    if out.records.lost or out.records.mixed:
        out.problems.append(f"records: {out.records.lost} lost, {out.records.mixed} mixed")
    tracked = mlflow_runs(soak.mlflow_uri).get(execution, {"parents": 0, "children": 0})
    out.mlflow_parents = tracked["parents"]
    expect_parents = 0 if out.fault == "disk-full" and out.retried_state != "success" else 1
    if out.mlflow_parents != expect_parents:
        out.problems.append(f"{out.mlflow_parents} MLflow parent runs for {execution}, expected {expect_parents}")
    left = within(20, lambda: engines_alive(execution))
    out.engines_left = len(left)
    if left:
        out.problems.append(f"processes of {execution} left: {left}")
    if out.max_engines > 1:
        out.problems.append(f"{out.max_engines} engines of {execution} alive at once")


def dvc_push_with_s3_down(soak: Soak, s3_port: int, out_dir: Path) -> Outcome:
    """The soak's results archived with DVC to an S3 remote (moto) that is unreachable during the first push
    (a gate in front of moto refuses and cuts every connection): that push must fail and say so, the next one
    (remote back) push everything, and ``dvc status -c`` find the cache and the remote in sync."""
    import boto3

    out = Outcome(soak.executor, "s3-down-dvc-push", "dvc push")
    t0 = time.monotonic()
    gate = Gate(s3_port)
    bucket = f"soak-{soak.soak_id}"
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    repo = out_dir / "dvc-archive"
    repo.mkdir(parents=True, exist_ok=True)
    dvc = [str(BIN / "dvc")]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*dvc, *args], cwd=repo, capture_output=True, text=True, timeout=300, check=False)

    run("init", "--no-scm", "-f")
    run("remote", "add", "-d", "-f", "soak", f"s3://{bucket}/dvc")
    run("remote", "modify", "soak", "endpointurl", f"http://127.0.0.1:{gate.port}")
    run("remote", "modify", "soak", "retries", "1")
    subprocess.run(["cp", "-a", str(soak.store), str(repo / "results")], check=True)
    added = run("add", "results")
    if added.returncode != 0:
        out.problems.append(f"dvc add: {added.stderr.strip()[-300:]}")
    gate.shut()
    first = run("push")
    out.notes.append(f"push with S3 unreachable: exit {first.returncode}")
    if first.returncode == 0:
        out.problems.append("dvc push succeeded with the remote unreachable")
    elif not any(w in (first.stderr + first.stdout).lower() for w in ("failed to push", "could not connect")):
        out.problems.append(f"dvc push failed without saying what: {first.stderr.strip()[-300:]}")
    gate.open()
    second = run("push")
    out.notes.append(f"push with S3 back: exit {second.returncode}")
    if second.returncode != 0:
        out.problems.append(f"dvc push with S3 back: {second.stderr.strip()[-300:]}")
    status = run("status", "-c")
    if status.returncode != 0 or "in sync" not in status.stdout.lower():
        out.problems.append(f"dvc status -c: {status.stdout.strip()[-300:]} {status.stderr.strip()[-300:]}")
    cache = sum(1 for p in (repo / ".dvc" / "cache").rglob("*") if p.is_file())
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="dvc/")
    remote = sum(len(page.get("Contents", [])) for page in pages)
    out.notes.append(f"{cache} cache files, {remote} objects on the remote")
    if remote != cache:
        out.problems.append(f"remote holds {remote} objects, the cache {cache}")
    out.state = f"pushed {remote}/{cache} objects" if second.returncode == 0 else "failed"
    gate.shut()
    out.seconds = time.monotonic() - t0
    return out


TABLE_HEAD = ("executor", "fault", "campaigns", "DAG run (retry)", "as documented", "records expected",
              "kept", "lost", "mixed", "earlier attempts kept", "MLflow parents", "engines at once", "orphans")


def table_rows(outcomes: list[Outcome]) -> list[list[Any]]:
    rows = []
    for o in outcomes:
        state = o.state + (f" ({o.retried_state})" if o.retried_state else "")
        if o.fault == "s3-down-dvc-push":  # no campaign: no records, MLflow runs or engines of its own
            rows.append([o.executor, o.fault, 1, state, "yes" if not o.problems else "NO", *["-"] * 8])
            continue
        rows.append([o.executor, o.fault, 1, state, "yes" if not o.problems else "NO", o.records.expected,
                     o.records.kept, o.records.lost, o.records.mixed, o.records.earlier, o.mlflow_parents,
                     o.max_engines, o.engines_left])
    return rows


SCHEDULE = {
    "standalone": ["none", "engine-crash", "mlflow-down", "disk-full"],
    "celery": ["none", "worker-kill", "engine-crash", "mlflow-down"],
}
# The deployment's params file (the form's defaults): the single-engine wall-clock HTTP campaign.
PARAMS = ROOT / "tests" / "params-http.yaml"
# MLflow's client retries a refused connection for minutes by default: a deployment that wants track's own
# Airflow retries to carry an outage keeps them short.
MLFLOW_CLIENT = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def soak_executor(executor: str, work: Path, soak_id: str, rounds: int, duration: float,
                  migrated_db: Path | None = None, schedule: list[str] | None = None) -> tuple[list[Outcome], Soak]:
    """One executor's campaigns; every service it started is stopped before it returns."""
    faults = schedule or SCHEDULE[executor]
    if "disk-full" in faults and not can_mount():
        print("disk-full skipped: mounting a tmpfs needs root (mount -t tmpfs)", file=sys.stderr)
        faults = [f for f in faults if f != "disk-full"]
    work.mkdir(parents=True, exist_ok=True)
    services = Services(work, soak_id)
    soak = Soak(services, None, "", work / "results", work, soak_id, executor, duration)
    outcomes: list[Outcome] = []
    try:
        soak.mlflow_uri = start_mlflow(services, {**os.environ}, work / "mlflow" / "mlflow.db", free_port())
        t0 = time.monotonic()
        soak.api = start_airflow(services, work, executor, PARAMS, migrated_db, extra_env=MLFLOW_CLIENT)
        print(f"[soak] {executor}: Airflow up in {time.monotonic() - t0:.0f} s", flush=True)
        index = 0
        for _ in range(rounds):
            for fault in faults:
                index += 1
                outcome = run_campaign(soak, fault, index)
                outcomes.append(outcome)
                print(f"[soak] {executor} {fault}: {outcome.state}"
                      f"{' -> ' + outcome.retried_state if outcome.retried_state else ''} in {outcome.seconds:.0f} s; "
                      f"{'; '.join(outcome.problems) or 'as documented'}", flush=True)
    finally:
        services.stop_all()
    return outcomes, soak


def end_orphans(found: list[dict]) -> None:
    """SIGKILL what the audit found left behind (after counting it): the soak leaves nothing running."""
    import signal

    for p in found:
        try:
            os.kill(p["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def orphans(soak_id: str) -> list[dict]:
    """Processes of the soak alive after every service stopped: anything with its id in the environment."""
    tagged = processes_with(SOAK_ENV, soak_id)
    pids = {p["pid"] for p in tagged}
    return tagged + [p for p in engines_alive(soak_id) if p["pid"] not in pids]


