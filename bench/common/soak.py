"""The soak's machinery, shared by bench/soak.py and its short CI version (tests/airflow/test_soak.py):
the services it runs (Airflow standalone, or CeleryExecutor with two workers and Redis; an MLflow server),
the faults it injects, and the audit afterwards (records expected/kept and mixed, duplicate MLflow runs,
processes left behind, Airflow task states against docs/reference/failure-modes.md).

Every process the soak starts carries ``BENCHCAMP_SOAK_ID`` in its environment (children inherit it): after
the services stop, any process still carrying it is an orphan, whatever started it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common.paths import ROOT
from bench.common.processes import Processes
from bench.common.servers import free_port

BIN = Path(sys.executable).parent
DAG_ID = "benchcamp_campaign"
CAMPAIGN = "soak"
SOAK_ENV = "BENCHCAMP_SOAK_ID"
POOLS = {"gpu_nodes": {"slots": 2, "description": "GPU nodes held by benchcamp campaigns"},
         "loadgen_hosts": {"slots": 1, "description": "load-generator hosts"}}
# What each Celery task instance reports as its host: the worker's name (core.hostname_callable), so the soak
# knows which worker runs the sweep it kills.
WORKER_NAME_MODULE = "import os\n\n\ndef worker_name():\n    return os.environ['BENCHCAMP_SOAK_WORKER']\n"
WORKERS = ("workerA", "workerB")


class Services(Processes):
    """The soak's long-running children: logged to ``<work>/logs``, run in ``work``, each carrying the soak's id."""

    def __init__(self, work: Path, soak_id: str):
        super().__init__(work / "logs", cwd=work, env={SOAK_ENV: soak_id})
        self.work, self.soak_id = work, soak_id


def http_up(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


# --- MLflow -------------------------------------------------------------------------------------------


def start_mlflow(services: Services, env: dict[str, str], db: Path, port: int) -> str:
    """``mlflow server`` on a SQLite store (restartable without losing a run: the fault "MLflow down")."""
    db.parent.mkdir(parents=True, exist_ok=True)
    services.start("mlflow", [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
                              "--workers", "1", "--backend-store-uri", f"sqlite:///{db}",
                              "--artifacts-destination", str(db.parent / "artifacts"), "--serve-artifacts"], env)
    uri = f"http://127.0.0.1:{port}"
    services.wait("the MLflow server", lambda: http_up(f"{uri}/health"), 300)
    return uri


# --- Airflow --------------------------------------------------------------------------------------------


class AirflowApi:
    """Airflow's REST API as the soak uses it: trigger, follow, clear."""

    def __init__(self, base: str, home: Path):
        self.base, self.home, self.token = base, home, ""

    def login(self) -> None:
        pw_file = self.home / "simple_auth_manager_passwords.json.generated"
        password = json.loads(pw_file.read_text())["admin"]
        status, body = self.call("POST", "/auth/token", {"username": "admin", "password": password})
        if status not in (200, 201):
            raise RuntimeError(f"Airflow login: HTTP {status}: {body}")
        self.token = body["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {self.token}"} if self.token else {})}
        req = urllib.request.Request(self.base + path, method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def _run(self, run_id: str) -> str:
        return f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def trigger(self, run_id: str, conf: dict) -> None:
        status, body = self.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                 {"dag_run_id": run_id, "logical_date": None, "conf": conf})
        if status not in (200, 201):
            raise RuntimeError(f"trigger {run_id}: HTTP {status}: {body}")

    def state(self, run_id: str) -> str:
        status, body = self.call("GET", self._run(run_id))
        return body["state"] if status == 200 else ""

    def tasks(self, run_id: str) -> list[dict]:
        status, body = self.call("GET", f"{self._run(run_id)}/taskInstances?limit=100")
        return body["task_instances"] if status == 200 else []

    def clear(self, run_id: str, task_ids: list[str]) -> None:
        """Clear ``task_ids`` and what follows them (their setups and teardowns too): Airflow runs them again."""
        status, body = self.call("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
                                 {"dag_run_id": run_id, "task_ids": task_ids, "include_downstream": True,
                                  "only_failed": False, "dry_run": False, "reset_dag_runs": True})
        if status != 200:
            raise RuntimeError(f"clear {task_ids} of {run_id}: HTTP {status}: {body}")

    def wait_done(self, services: Services, run_id: str, timeout: float = 600) -> str:
        return services.wait(f"run {run_id}", lambda: self.state(run_id) in ("success", "failed")
                             and self.state(run_id), timeout, every=1)


def task_state(tasks: list[dict], task_id: str) -> tuple[str, int]:
    """(state, try number) of a task of a one-entry matrix ('' when it has no instance)."""
    for t in tasks:
        if t["task_id"] == task_id:
            return str(t["state"]), int(t.get("try_number") or 0)
    return "", 0


def _airflow_home(work: Path, migrated_db: Path | None, env: dict[str, str]) -> Path:
    """An Airflow home with a migrated DB: a copy of ``migrated_db`` when given (the test suite's template),
    else `airflow db migrate` here."""
    import sqlite3

    home = work / "airflow-home"
    home.mkdir(parents=True, exist_ok=True)
    if migrated_db is None:
        subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True)
        return home
    src, dst = sqlite3.connect(migrated_db), sqlite3.connect(home / "airflow.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return home


def _set_pools(api: AirflowApi, loadgen_slots: int) -> None:
    """The campaign's pools (``loadgen_hosts``: one slot per machine that drives a load generator)."""
    for name, spec in POOLS.items():
        body = {"slots": loadgen_slots if name == "loadgen_hosts" else spec["slots"],
                "description": spec["description"], "include_deferred": False}
        status, out = api.call("PATCH", f"/api/v2/pools/{name}", {"pool": name, **body})
        if status == 404:
            status, out = api.call("POST", "/api/v2/pools", {"name": name, **body})
        if status not in (200, 201):
            raise RuntimeError(f"pool {name}: HTTP {status}: {out}")


def start_airflow(services: Services, work: Path, executor: str, params: Path,
                  migrated_db: Path | None = None, extra_env: dict[str, str] | None = None) -> AirflowApi:
    """Airflow on loopback: ``standalone`` (`airflow standalone`, its LocalExecutor) or ``celery`` (Redis,
    api-server, scheduler, dag-processor and two Celery workers, each serving every queue, two tasks at once)."""
    port = free_port()
    home = work / "airflow-home"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env = {**base_env, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW__CORE__PARALLELISM": "4",
           # A task's start call to the execution API that times out (5 s by default) is retried, and the retry
           # is refused (HTTP 400: the first one did start it) and fails the task: seen at load 21 on 2 cores.
           "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
           # a worker that died (killed host) is noticed in 30 s, not Airflow's default 5 min
           "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
           "BENCHCAMP_PROJECT_DIR": str(ROOT), "BENCHCAMP_PARAMS": str(params),
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", **(extra_env or {})}
    _airflow_home(work, migrated_db, env)
    if executor == "standalone":
        services.start("airflow", [str(BIN / "airflow"), "standalone"], env)
    elif executor == "celery":
        if not shutil.which("redis-server"):
            raise RuntimeError("redis-server not installed (Debian package redis-server; `make redis` installs it)")
        redis_port = free_port()
        env.update({
            "AIRFLOW__CORE__EXECUTOR": "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+sqlite:///{home}/celery-results.db",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2", "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(24).hex(), "AIRFLOW__API__SECRET_KEY": os.urandom(24).hex()})
        services.start("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
                                 "--appendonly", "no", "--dir", str(work)], env)
        for name in ("api-server", "scheduler", "dag-processor"):
            services.start(name, [str(BIN / "airflow"), name], env)
        lib = work / "worker-lib"
        lib.mkdir(exist_ok=True)
        (lib / "benchcamp_soak_worker.py").write_text(WORKER_NAME_MODULE)
        for name in WORKERS:
            start_worker(services, env, lib, name)
    else:
        raise ValueError(f"executor {executor!r}: use standalone or celery")
    api = AirflowApi(f"http://127.0.0.1:{port}", home)
    services.wait("the API server", lambda: http_up(f"{api.base}/api/v2/monitor/health"), 300)
    services.wait("the generated password",
                  lambda: (home / "simple_auth_manager_passwords.json.generated").exists(), 120)
    api.login()
    _set_pools(api, loadgen_slots=1 if executor == "standalone" else len(WORKERS))
    services.wait("the DAG to be parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 300, 0.5)
    if api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] != 200:
        raise RuntimeError("could not unpause the campaign DAG")
    if executor == "celery":
        for name in WORKERS:
            services.wait(f"Celery {name}", lambda n=name: " ready." in services.log(n), 300)
    return api


def start_worker(services: Services, env: dict[str, str], lib: Path, name: str) -> None:
    wenv = {**env, "BENCHCAMP_SOAK_WORKER": name, "AIRFLOW__CORE__HOSTNAME_CALLABLE": "benchcamp_soak_worker.worker_name",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")]))}
    services.start(name, [str(BIN / "airflow"), "celery", "worker", "-H", f"{name}@%h", "-c", "2",
                          "--skip-serve-logs", "--without-mingle", "--without-gossip"], wenv)


# --- faults ---------------------------------------------------------------------------------------------


class FullDisk:
    """A small tmpfs for the results store that the soak fills to the last byte mid-sweep (root: mount)."""

    def __init__(self, path: Path, size_mb: int = 64):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True,
                       capture_output=True)
        self.filler = path / "filler"

    def fill(self) -> None:
        """Write until ENOSPC: the next write anyone makes there fails."""
        with open(self.filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
            for size in (1 << 16, 4096, 512, 1):  # big blocks, then smaller ones into the last gap
                try:
                    while f.write(b"\0" * size):
                        pass
                except OSError:
                    pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def keep(self, dest: Path) -> None:
        """Copy what the store holds out of the tmpfs (for the audit) before unmounting it."""
        self.free()
        shutil.copytree(self.path, dest, dirs_exist_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


def can_mount() -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    probe = Path(f"/tmp/benchcamp-soak-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                            capture_output=True, check=False).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=False, capture_output=True)
        return ok
    finally:
        probe.rmdir()


class Gate:
    """A loopback TCP forwarder to ``target_port`` that can be shut (new connections refused, open ones cut) and
    opened again: a remote that becomes unreachable and comes back with its data (moto keeps S3 in memory, so
    stopping it would lose the bucket)."""

    def __init__(self, target_port: int):
        self.target, self.port = target_port, free_port()
        self._srv: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.open()

    def open(self) -> None:
        srv = socket.create_server(("127.0.0.1", self.port))
        srv.settimeout(0.2)
        self._srv = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def shut(self) -> None:
        srv, self._srv = self._srv, None
        if srv is not None:
            srv.close()
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, srv: socket.socket) -> None:
        while self._srv is srv:
            try:
                client, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# --- the audit ------------------------------------------------------------------------------------------


@dataclass
class RecordsAudit:
    """One execution's records: ``expected`` is what each point says it wrote (point.json ``requests``),
    ``kept`` the rows of its records.parquet; ``earlier`` rows kept from killed attempts (records.<token>.parquet
    and unmerged worker files); ``mixed`` rows in a point's file that belong elsewhere (another point's label) or
    twice (the same session, turn and send time)."""

    expected: int = 0
    kept: int = 0
    earlier: int = 0
    mixed: int = 0
    points: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.kept)


def audit_records(execution_dir: Path) -> RecordsAudit:
    from benchcamp.results.records import read_records

    out = RecordsAudit()
    for point_json in sorted(execution_dir.glob("*/point.json")):
        label = point_json.parent.name
        out.points.append(label)
        out.expected += int(json.loads(point_json.read_text()).get("requests", 0))
        records = point_json.parent / "records.parquet"
        if records.exists():
            df = read_records(records)
            out.kept += len(df)
            out.mixed += int((df["point"] != label).sum()) + int(df.duplicated(["session_id", "turn", "sent_s"]).sum())
    for f in execution_dir.glob("*/records.*parquet"):
        if f.name != "records.parquet" and not f.name.endswith(".partial.arrows"):
            out.earlier += len(read_records(f))
    return out


def mlflow_runs(uri: str, experiment: str = CAMPAIGN) -> dict[str, dict[str, int]]:
    """Per execution id: its parent runs and their child runs in MLflow (one parent each when idempotent)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    parents = {r.info.run_id: r.data.tags.get("benchcamp.execution_id", "") for r in runs
               if "mlflow.parentRunId" not in r.data.tags}
    out: dict[str, dict[str, int]] = {}
    for execution in parents.values():
        out.setdefault(execution, {"parents": 0, "children": 0})["parents"] += 1
    for r in runs:
        parent = r.data.tags.get("mlflow.parentRunId")
        if parent in parents:
            out[parents[parent]]["children"] += 1
    return out


def processes_with(key: str, marker: str) -> list[dict[str, Any]]:
    """Live processes whose environment variable ``key`` contains ``marker`` (pid, name, the value)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            value = p.environ().get(key, "")
            if marker in value and p.status() != psutil.STATUS_ZOMBIE:
                found.append({"pid": p.pid, "name": p.info["name"], key: value})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def slurm_jobs(marker: str) -> list[str] | None:
    """Slurm jobs whose name holds ``marker``; None where there is no squeue (no Slurm here)."""
    if not shutil.which("squeue"):
        return None
    out = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, check=False, timeout=30)
    return [line for line in out.stdout.splitlines() if marker in line]


def processes_under(folder: Path) -> list[dict[str, Any]]:
    """Live processes whose working directory lies under ``folder``: a real vLLM's children rename themselves
    and blank their /proc environ, but keep the engine folder benchcamp starts them in."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and Path(p.cwd()).is_relative_to(folder):
                found.append({"pid": p.pid, "name": p.info["name"], "cwd": p.cwd()})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def engines_alive(marker: str) -> list[dict[str, Any]]:
    """Engines and load generators of the soak's executions still alive: what carries the execution id in its
    environment, and what runs in an execution's engine folder (benchcamp.deploy.lifecycle.engine_folder)."""
    import tempfile

    tagged = processes_with("BENCHCAMP_EXECUTION_ID", marker)
    pids = {p["pid"] for p in tagged}
    engines = Path(tempfile.gettempdir()) / "benchcamp-engines"
    folders = [f for f in engines.glob(f"*{marker}*") if f.is_dir()] if engines.is_dir() else []
    return tagged + [p for f in folders for p in processes_under(f) if p["pid"] not in pids]


def within(deadline_s: float, fn: Callable[[], list], every: float = 0.5) -> list:
    """``fn()`` until it is empty or ``deadline_s`` passes: what is still there then (a teardown's stop takes
    a moment)."""
    deadline = time.monotonic() + deadline_s
    found = fn()
    while found and time.monotonic() < deadline:
        time.sleep(every)
        found = fn()
    return found
