"""The campaign DAG on a distributed Airflow: CeleryExecutor, a real Redis broker, two Celery workers.

Everything the test starts runs on loopback and is stopped at the end, also when it fails:
- Redis (the distribution's ``redis-server``, no persistence) as the Celery broker;
- moto's standalone server standing in for S3 (no AWS account here): the results store;
- ``mlflow server`` (SQLite backend, proxied artifacts): the tracking server;
- Airflow 3.3 (scheduler, dag-processor, api-server with the execution API) and four
  ``airflow celery worker`` processes: workerA and workerB (the default queue, two tasks
  each) and loadgenA and loadgenB, load-generator hosts that serve the sweeps' queue one
  task at a time (``BENCHCAMP_SWEEP_QUEUE=loadgen``, ``-c 1``; pool ``loadgen_hosts`` of 2).

No task may depend on a file another task wrote locally. Each worker runs in its own
mount namespace where the same scratch path (its cwd, its TMPDIR and ``workload.data``)
is a private tmpfs: a task that opens a path another task wrote on the other worker finds
nothing there. Where mount namespaces are not available (not root, no ``unshare``), the
workers get distinct scratch folders instead, a weaker check (said in the test's output).

No secret in the broker or the result backend: every command Redis receives is
recorded (``redis-cli MONITOR``, base64 message bodies decoded), and the workers' AWS secret, the
HF token (``hf_token_ref=env:...``, set on the workers only) and both engines' keys (read from
their environment while they serve) are found 0 times there, in the Celery result backend and
in every table of Airflow's metadata DB.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import benchcamp_test_services as services
import psutil
import pytest
from airflow_support import copy_airflow_db, scan_airflow_db, scan_text
from test_airflow_e2e import _call, _free_port
from test_campaign_dag import tiny_conf

from bench.common.processes import Processes, signal_group

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAG_ID = "benchcamp_campaign"
BUCKET, PREFIX = "benchcamp-results", "campaigns"
WORKERS = ("workerA", "workerB")
LOADGEN_HOSTS = ("loadgenA", "loadgenB")
GPU_POOL_SLOTS = 2
SWEEP_QUEUE = "loadgen"
# Dummy credentials for moto; distinctive so a leak would be easy to grep.
AWS_KEY_ID, AWS_SECRET = "AKIAMOTOSTANDIN00000", "moto-stands-in-for-s3-dummy-secret"
HF_TOKEN = f"hf-celery-workers-{secrets.token_hex(12)}"  # in the workers' environment only

# What each task instance reports as its host: the worker's name (core.hostname_callable).
WORKER_NAME_MODULE = '''import os


def worker_name():
    return os.environ["BENCHCAMP_TEST_WORKER"]
'''


def _start_loadgen_like_child(result) -> None:
    """In a Celery prefork child: start a process the way the load generator does (forkserver)."""
    import multiprocessing

    from benchcamp.campaign.measure import _loadgen_host
    try:
        with _loadgen_host():
            child = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
            child.start()
            child.join(30)
        result.put(f"exit {child.exitcode}")
    except (AssertionError, TypeError) as exc:  # daemonic parent; billiard's authkey
        result.put(f"{type(exc).__name__}: {exc}")


def test_sweep_step_can_start_load_generator_workers_inside_a_celery_prefork_worker():
    """Celery runs tasks in daemonic billiard processes; multiprocessing refuses children there
    ("daemonic processes are not allowed to have children")."""
    import billiard

    result = billiard.Queue()
    host = billiard.Process(target=_start_loadgen_like_child, args=(result,), daemon=True)
    host.start()
    outcome = result.get(timeout=120)
    host.join(30)
    assert outcome == "exit 0", outcome


def test_stop_engine_on_another_worker_keeps_the_engine_log(tmp_path):
    """The engine's log path is under the deploying worker's TMPDIR; a teardown on another
    worker of the same machine cannot see that path (here: unlinked) but must keep the log."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Deployment
    from benchcamp.campaign.layout import StoreLayout
    from benchcamp.results.store import LocalStore

    log_path = tmp_path / "other-worker" / "engine.log"
    log_path.parent.mkdir()
    with open(log_path, "wb") as out:
        engine = subprocess.Popen(["sh", "-c", "echo engine up; exec sleep 60"], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "engine up" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        log_path.unlink()  # not on this worker's filesystem
        deployment = {"endpoint": "http://127.0.0.1:9", "api_key": None, "log_path": str(log_path),
                      "handle": {"kind": "local", "pid": engine.pid,
                                 "create_time": psutil.Process(engine.pid).create_time()}}
        store, layout = LocalStore(tmp_path / "results"), StoreLayout.for_execution("c", "e")
        steps.stop_engine(None, store, layout, Deployment.from_dict(deployment))
        assert engine.wait(timeout=30) is not None
        assert store.exists(layout.engine_log) and "engine up" in store.get_text(layout.engine_log)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()


def _shm_mapped(procs: list[psutil.Process]) -> set[str]:
    """The /dev/shm files these processes map (multiprocessing's named semaphores and shared memory)."""
    found: set[str] = set()
    for p in procs:
        try:
            found |= {m.path for m in p.memory_maps() if m.path.startswith("/dev/shm/")}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _private_mounts() -> bool:
    """Can a child get its own tmpfs at a path (root + unshare)?"""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /mnt"], check=False, capture_output=True, timeout=30)
    return probe.returncode == 0


def _kill_engines(marker: str) -> list[int]:
    """Engines of this test's run still alive (they run in their own sessions); kills them."""
    left = []
    for p in psutil.process_iter():
        try:
            if marker in p.environ().get("BENCHCAMP_EXECUTION_ID", "") and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
                signal_group(os.getpgid(p.pid), signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError):
            pass
    return left


@pytest.fixture
def cluster(request, tmp_path, migrated_airflow_db, mlflow_db_template):
    """Redis, moto (S3), an MLflow server and Airflow with two Celery workers, all on loopback.
    Parametrized (indirect) with a number N > 1: the DAG gets N sweep shard tasks per engine
    (BENCHCAMP_LOADGEN_SHARDS) and a dead worker's task fails after 30 s without a heartbeat."""
    if not shutil.which("redis-server"):
        services.skip_absent("redis", "redis-server not installed (the Celery broker)")
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    run_marker = f"celery-{secrets.token_hex(4)}"  # in the run id, so in every execution id (engine env)
    # The workers' scratch (their cwd and TMPDIR) on a short path: the load generator's forkserver puts its
    # AF_UNIX socket under TMPDIR (at most 107 bytes), which pytest-xdist's popen-gwN tmp_path overflows.
    scratch = Path(tempfile.mkdtemp(prefix="bc-celery-", dir="/tmp"))
    try:
        yield _start(tmp_path, procs, run_marker, migrated_airflow_db, mlflow_db_template,
                     shards=getattr(request, "param", 1), scratch=scratch)
    finally:
        procs.stop_all(wait_s=8)  # a short grace: the MLflow server took 18 s to stop after a run
        _kill_engines(run_marker)
        shutil.rmtree(scratch, ignore_errors=True)


def _start(tmp: Path, procs: Processes, run_marker: str, migrated_db: Path, mlflow_template: Path,
           shards: int = 1, scratch: Path | None = None) -> dict:
    ports = {name: _free_port() for name in ("redis", "s3", "mlflow", "api", "logs", "trigger_logs")}
    home = tmp / "airflow-home"
    home.mkdir()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
    s3 = f"http://127.0.0.1:{ports['s3']}"
    env = {
        **base_env,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{ports['redis']}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+sqlite:///{home}/celery-results.db",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(ports["api"]),
        # Workers run tasks through the API server's execution API, authenticated with JWTs
        # that the scheduler signs: every process must share the URL and the secret.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{ports['api']}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports["logs"]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports["trigger_logs"]),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",  # 2 shared cores: no pool of state-fetching processes
        "BENCHCAMP_PROJECT_DIR": str(ROOT),
        "BENCHCAMP_PARAMS": str(ROOT / "tests" / "params-http.yaml"),  # the single-engine HTTP campaign
        "BENCHCAMP_SWEEP_QUEUE": SWEEP_QUEUE,  # read when the DAG is parsed
        "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
        # moto stands in for S3: every AWS client of the workers talks to it.
        "AWS_ENDPOINT_URL_S3": s3, "AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    if shards > 1:
        env.update(BENCHCAMP_LOADGEN_SHARDS=str(shards), AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="30")
    procs.start("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(ports["redis"]), "--save", "",
                          "--appendonly", "no", "--dir", str(tmp)], env, tmp)
    procs.wait("redis", lambda: _redis_up(ports["redis"]), 30, every=0.2)
    procs.start("redis-monitor", ["redis-cli", "-p", str(ports["redis"]), "monitor"], env, tmp)
    procs.start("moto", [str(BIN / "python"), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(ports["s3"])],
                env, tmp)
    (tmp / "mlflow").mkdir()
    shutil.copy(mlflow_template, tmp / "mlflow" / "mlflow.db")  # migrated: the server starts without MLflow's migrations
    procs.start("mlflow", [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(ports["mlflow"]),
                           "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp}/mlflow/mlflow.db",
                           "--artifacts-destination", str(tmp / "mlflow" / "artifacts"), "--serve-artifacts"],
                env, tmp)
    t0 = time.monotonic()
    copy_airflow_db(migrated_db, home)  # migrated, with the pools (their slots are set through the REST API)
    # The MLflow server is the slowest to start (minutes when the 2 cores are busy): let it come
    # up before five Airflow processes start importing at once.
    mlflow_uri = f"http://127.0.0.1:{ports['mlflow']}"
    procs.wait("the MLflow server", lambda: _up(f"{mlflow_uri}/health"), 300)
    for name in ("api-server", "scheduler", "dag-processor"):
        procs.start(name, [str(BIN / "airflow"), name], env, tmp)

    # The workers: same project, same dags/, nothing else shared but the services above.
    lib = tmp / "worker-lib"
    lib.mkdir()
    (lib / "benchcamp_test_worker.py").write_text(WORKER_NAME_MODULE)
    private = _private_mounts()
    scratch = scratch or tmp / "scratch"  # private: each worker mounts its own tmpfs here; else one folder per worker
    for name in (*WORKERS, *LOADGEN_HOSTS):
        here = scratch if private else scratch / name
        here.mkdir(parents=True, exist_ok=True)
        wenv = {**env, "BENCHCAMP_TEST_WORKER": name, "TMPDIR": f"{here}/tmp", "BENCHCAMP_TEST_HF_TOKEN": HF_TOKEN,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")])),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "benchcamp_test_worker.worker_name"}
        queue = ["-q", SWEEP_QUEUE, "-c", "1"] if name in LOADGEN_HOSTS else ["-c", "2"]
        worker = [str(BIN / "airflow"), "celery", "worker", "-H", f"{name}@%h", *queue, "--skip-serve-logs",
                  "--without-mingle", "--without-gossip"]
        if private:
            script = f'mount -t tmpfs tmpfs "{here}" && mkdir "{here}/tmp" && cd "{here}" && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *worker]
        else:
            (here / "tmp").mkdir()
            argv = worker
        procs.start(name, argv, wenv, here)
    if not private:
        print("no mount namespaces here: workers get distinct scratch folders (weaker isolation)")

    procs.wait("moto", lambda: _up(f"{s3}/moto-api/"), 60, every=0.5)
    api = f"http://127.0.0.1:{ports['api']}"
    procs.wait("the API server", lambda: _up(f"{api}/api/v2/monitor/health"), 180)
    for name in (*WORKERS, *LOADGEN_HOSTS):
        procs.wait(f"Celery {name}", lambda n=name: f"{n}@" in procs.log(n) and " ready." in procs.log(n), 180)
    print(f"cluster up in {time.monotonic() - t0:.0f} s")
    return {"env": env, "api": api, "home": home, "procs": procs, "s3": s3, "mlflow_uri": mlflow_uri,
            "scratch": scratch, "private": private, "marker": run_marker}


def _redis_up(port: int) -> bool:
    return subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True,
                          timeout=5, check=False).stdout.strip() == "PONG"


def _decoded(text: str) -> str:
    """``text`` plus every base64 run in it decoded (kombu base64-encodes message bodies)."""
    import base64
    import re

    out = [text]
    for blob in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        try:
            out.append(base64.b64decode(blob + "=" * (-len(blob) % 4)).decode("utf-8", errors="replace"))
        except ValueError:
            pass
    return "\n".join(out)


def _watch_engine_keys(marker: str, keys: set, stop) -> None:
    """The API keys of this run's engines, read from their environment while they serve."""
    while not stop.is_set():
        for p in psutil.process_iter():
            try:
                env = p.environ()
                if marker in env.get("BENCHCAMP_EXECUTION_ID", "") and env.get("VLLM_API_KEY"):
                    keys.add(env["VLLM_API_KEY"])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        stop.wait(0.5)


def _up(url: str) -> bool:
    """An HTTP 200 from ``url`` (any body)."""
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


def _s3(cluster):
    import boto3
    return boto3.client("s3", endpoint_url=cluster["s3"], aws_access_key_id=AWS_KEY_ID,
                        aws_secret_access_key=AWS_SECRET, region_name="us-east-1")


def _token(cluster) -> str:
    pw_file = cluster["home"] / "simple_auth_manager_passwords.json.generated"
    password = cluster["procs"].wait("the generated password",
                                     lambda: pw_file.exists() and json.loads(pw_file.read_text())["admin"], 60)
    status, body = _call("POST", f"{cluster['api']}/auth/token", body={"username": "admin", "password": password})
    assert status in (200, 201), body
    return body["access_token"]


def _artifacts(client, run_id: str, path: str) -> list[str]:
    """Every artifact file under ``path`` of a run."""
    out = []
    for a in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, a.path) if a.is_dir else [a.path]
    return out


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _ts(iso: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_campaign_matrix_on_two_celery_workers_shares_only_s3_and_mlflow(cluster, tmp_path):
    from mlflow.tracking import MlflowClient

    api, procs = cluster["api"], cluster["procs"]
    _s3(cluster).create_bucket(Bucket=BUCKET)
    token = _token(cluster)
    for pool, slots in (("gpu_nodes", GPU_POOL_SLOTS), ("loadgen_hosts", len(LOADGEN_HOSTS))):
        status, body = _call("PATCH", f"{api}/api/v2/pools/{pool}", token,
                             {"pool": pool, "slots": slots, "include_deferred": False})
        assert status == 200 and body["slots"] == slots, body
    procs.wait("the DAG to be parsed", lambda: _call("GET", f"{api}/api/v2/dags/{DAG_ID}", token)[0] == 200, 180, 0.5)
    assert _call("PATCH", f"{api}/api/v2/dags/{DAG_ID}", token, {"is_paused": False})[0] == 200

    matrix = [{"engine.max_num_seqs": 64}, {"engine.max_num_seqs": 128}]
    conf = tiny_conf(tmp_path, matrix)
    # sweeps long enough to overlap although the two engines come up some seconds apart (4 s
    # seen; a 12 s window makes sweeps of ~25 s)
    conf["duration_s"] = 12.0
    conf["overrides"].update({
        "campaign.name": "celerytest",
        "results.store": f"s3://{BUCKET}/{PREFIX}",
        "tracking.mlflow_uri": cluster["mlflow_uri"],
        # The same path on both workers, private to each (see the module doc): prepare_workload
        # builds it here, every other task must get it from the store.
        "workload.data": str(cluster["scratch"] / "workload.parquet"),
    })
    conf["hf_token_ref"] = "env:BENCHCAMP_TEST_HF_TOKEN"
    import threading

    engine_keys: set[str] = set()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_engine_keys, args=(cluster["marker"], engine_keys, stop), daemon=True)
    watcher.start()
    run_id = f"manual__{cluster['marker']}"
    status, run = _call("POST", f"{api}/api/v2/dags/{DAG_ID}/dagRuns", token,
                        {"dag_run_id": run_id, "logical_date": None, "conf": conf})
    assert status in (200, 201), run
    quoted = urllib.parse.quote(run_id, safe="")

    def finished():
        s, r = _call("GET", f"{api}/api/v2/dags/{DAG_ID}/dagRuns/{quoted}", token)
        return r["state"] if s == 200 and r["state"] in ("success", "failed") else None

    t0 = time.monotonic()
    state = procs.wait("the campaign run", finished, 420, every=1)
    print(f"campaign run {state} in {time.monotonic() - t0:.0f} s")
    stop.set()
    watcher.join(10)
    s, body = _call("GET", f"{api}/api/v2/dags/{DAG_ID}/dagRuns/{quoted}/taskInstances?limit=100", token)
    assert s == 200, body
    tis = body["task_instances"]
    summary = {f"{t['task_id']}[{t['map_index']}]": (t["state"], t["hostname"]) for t in tis}
    assert state == "success", json.dumps(summary, indent=1) + "\n" + "\n".join(
        procs.tail(n, 2000) for n in ("scheduler", *WORKERS, *LOADGEN_HOSTS))

    # Every task ran, the sweeps on the load-generator hosts, the others on the two workers.
    assert all(t["state"] == "success" for t in tis), summary
    sweeps = [t for t in tis if t["task_id"] == "engine_config.sweep"]
    assert sorted(t["hostname"] for t in sweeps) == sorted(LOADGEN_HOSTS), summary
    assert {t["hostname"] for t in tis if t not in sweeps} == set(WORKERS), summary
    # Every teardown ran, for both matrix entries.
    for task in ("engine_config.stop_engine", "engine_config.deprovision_node"):
        assert sorted(t["map_index"] for t in tis if t["task_id"] == task) == [0, 1], summary

    # The two entries ran in parallel: both engines were up at once (deploy start .. stop end overlap)...
    def span(task: str, m: int, edge: str) -> float:
        return _ts(next(t[edge] for t in tis if t["task_id"] == f"engine_config.{task}" and t["map_index"] == m))
    engines = [(span("deploy_engine", m, "start_date"), span("stop_engine", m, "end_date")) for m in (0, 1)]
    assert _max_overlap(engines) == 2, engines
    # ...while the pool held: never more than its slots of GPU tasks at once,
    gpu = [(_ts(t["start_date"]), _ts(t["end_date"])) for t in tis if t["pool"] == "gpu_nodes"]
    assert len(gpu) == 4 and _max_overlap(gpu) <= GPU_POOL_SLOTS, gpu
    # ...and the two sweeps overlapped, one per load-generator host (pool loadgen_hosts of 2).
    spans = [(_ts(t["start_date"]), _ts(t["end_date"])) for t in sweeps]
    assert _max_overlap(spans) == 2, spans
    assert all(t["pool"] == "loadgen_hosts" for t in sweeps), summary

    # The results store on S3 has every point's records, the campaign files, the engine logs and the reports.
    listing = _s3(cluster).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/")
    keys = {o["Key"][len(PREFIX) + 1:] for o in listing.get("Contents", [])}
    assert not listing.get("IsTruncated")
    executions = sorted({k.split("/")[1] for k in keys if k.startswith("celerytest/") and k.count("/") >= 2})
    assert len(executions) == 2 and all(cluster["marker"] in e for e in executions), sorted(keys)
    for ex in executions:
        for name in ("c4/records.parquet", "c4/point.json", "c4/summary.json", "campaign.json", "summary.json",
                     "engine.log", "report/verdicts.json"):
            assert f"celerytest/{ex}/{name}" in keys, (ex, name, sorted(keys))
        assert any(k.startswith(f"celerytest/{ex}/report/") and k.endswith("/index.html") for k in keys), sorted(keys)
        assert not any(k.startswith(f"celerytest/{ex}/errors/") for k in keys), sorted(keys)
    assert any(k.startswith("workloads/") and k.endswith(".parquet") for k in keys), sorted(keys)

    # MLflow (the server): a parent run per entry with its report, a child run per point.
    client = MlflowClient(cluster["mlflow_uri"])
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = {r.data.tags.get("benchcamp.execution_id"): r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"}
    assert sorted(parents) == executions, sorted(parents)
    for ex, parent in parents.items():
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert len(children) == 1, (ex, len(children))
        assert any(p.endswith("/index.html") for p in _artifacts(client, parent.info.run_id, "report")), ex
        # the workload dataset is the workload itself (the store's copy where track ran on a
        # worker that did not build it), not the stats that stand in for a missing file
        (ds,) = [d.dataset for d in client.get_run(parent.info.run_id).inputs.dataset_inputs]
        assert "prompt_len" in ds.schema, (ex, ds.source)

    # Nothing leaked out of the workers' private scratch, and no engine outlived the run.
    if cluster["private"]:
        assert list(cluster["scratch"].iterdir()) == [], list(cluster["scratch"].iterdir())
    assert _kill_engines(cluster["marker"]) == []
    # The workers' AWS secret (dummy, distinctive) reached no stored file, no MLflow run, no task log.
    for key in (k for k in keys if k.endswith((".json", ".log", ".html"))):
        body = _s3(cluster).get_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}")["Body"].read().decode()
        assert AWS_SECRET not in body, key
    for r in runs:
        assert AWS_SECRET not in json.dumps([r.data.params, r.data.tags]), r.info.run_id
    task_logs = [p for p in (cluster["home"] / "logs").rglob("*.log") if AWS_SECRET in p.read_text(errors="replace")]
    assert task_logs == []

    # No secret in the broker's messages, the result backend or the metadata DB.
    assert len(engine_keys) == 2, f"{len(engine_keys)} engine keys seen in the engines' environment"
    planted = {"AWS_SECRET_ACCESS_KEY (workers' env)": AWS_SECRET, "HF token (env ref)": HF_TOKEN,
               **{f"engine key {i}": k for i, k in enumerate(sorted(engine_keys))}}
    engine_logs = [k for k in keys if k.endswith("/engine.log")]
    assert all("hf_token=set" in _s3(cluster).get_object(Bucket=BUCKET, Key=f"{PREFIX}/{k}")["Body"].read().decode()
               for k in engine_logs), "the engines did not get the HF token"
    broker = _decoded(procs.log("redis-monitor"))
    assert '"LPUSH"' in broker or '"lpush"' in broker.lower(), "the broker's commands were not recorded"  # control
    assert "ExecuteTask" in broker or "execute_workload" in broker, "no task message decoded"  # control
    assert scan_text(broker, planted) == {}
    for db in (cluster["home"] / "celery-results.db", cluster["home"] / "airflow.db"):
        found = scan_airflow_db(db, planted)
        assert {k: v for k, v in found.items() if v} == {}, (db.name, found)
    logs_text = "\n".join(p.read_text(errors="replace") for p in (cluster["home"] / "logs").rglob("*.log"))
    assert scan_text(logs_text, planted) == {}


def _trigger(cluster, token: str, run_id: str, conf: dict) -> str:
    status, run = _call("POST", f"{cluster['api']}/api/v2/dags/{DAG_ID}/dagRuns", token,
                        {"dag_run_id": run_id, "logical_date": None, "conf": conf})
    assert status in (200, 201), run
    return urllib.parse.quote(run_id, safe="")


def _task_instances(cluster, token: str, quoted: str) -> dict[str, dict]:
    s, body = _call("GET", f"{cluster['api']}/api/v2/dags/{DAG_ID}/dagRuns/{quoted}/taskInstances?limit=100", token)
    assert s == 200, body
    return {t["task_id"]: t for t in body["task_instances"]}


def _finished(cluster, token: str, quoted: str):
    s, r = _call("GET", f"{cluster['api']}/api/v2/dags/{DAG_ID}/dagRuns/{quoted}", token)
    return r["state"] if s == 200 and r["state"] in ("success", "failed") else None


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_one_point_from_two_load_generator_hosts_and_one_killed_mid_point(cluster, tmp_path):
    """Two Celery workers (loadgenA, loadgenB) as two client hosts against one engine: a point split over them
    gives the figures of the same point from one host, within its run-to-run noise; killing one host's worker
    (kill -9, its load-generator processes with it) mid-point gives an incomplete point with every record that
    had been written kept. The results store is a folder both hosts share (an NFS mount, here one disk): the
    dead host's flushed records are in it (an S3 store gets a shard's records when its point ends)."""
    from benchcamp.results.records import leftover_runs, read_table

    def flushed(folder: Path) -> int:  # a killed shard's worker files: streams never closed
        return read_table(*[p for paths in leftover_runs(folder).values() for p in paths]).num_rows

    api, procs = cluster["api"], cluster["procs"]
    token = _token(cluster)
    for pool, slots in (("gpu_nodes", GPU_POOL_SLOTS), ("loadgen_hosts", len(LOADGEN_HOSTS))):
        status, body = _call("PATCH", f"{api}/api/v2/pools/{pool}", token,
                             {"pool": pool, "slots": slots, "include_deferred": False})
        assert status == 200, body
    procs.wait("the DAG to be parsed", lambda: _call("GET", f"{api}/api/v2/dags/{DAG_ID}", token)[0] == 200, 180, 0.5)
    assert _call("PATCH", f"{api}/api/v2/dags/{DAG_ID}", token, {"is_paused": False})[0] == 200
    store = tmp_path / "results"

    def conf(shards: int, levels: list[int]) -> dict:
        c = tiny_conf(tmp_path)
        # agentic-tiny: short outputs and think times, ~50 requests per window (agentic-coding: ~7)
        c["workload"], c["levels"], c["duration_s"] = "agentic-tiny", levels, 6.0
        c["overrides"].update({"campaign.name": f"shards{shards}", "results.store": str(store),
                               "tracking.mlflow_uri": cluster["mlflow_uri"], "load.shards": shards,
                               "load.shard_barrier_timeout_s": 120,
                               "workload.data": str(cluster["scratch"] / "workload.parquet")})
        return c

    def point(campaign: str, label: str) -> Path:
        (ex,) = [p for p in (store / campaign).iterdir() if p.is_dir()]
        return ex / label

    # One host: the reference point.
    t0 = time.monotonic()
    one = _trigger(cluster, token, f"manual__{cluster['marker']}-one", conf(1, [4]))
    assert procs.wait("the one-host run", lambda: _finished(cluster, token, one), 300) == "success"
    tis = _task_instances(cluster, token, one)
    assert tis["engine_config.sweep_shard_1"]["state"] == "skipped", tis["engine_config.sweep_shard_1"]
    print(f"one-host run: {time.monotonic() - t0:.0f} s")

    # Two hosts: c4 whole, then loadgen host of shard 1 killed during c8.
    t0 = time.monotonic()
    two = _trigger(cluster, token, f"manual__{cluster['marker']}-two", conf(2, [4, 8]))

    def shard1_flushed():
        folders = list(store.glob("shards2/*/c8/shard-1"))
        return folders and flushed(folders[0]) >= 4

    procs.wait("shard 1 to flush records of c8", shard1_flushed, 300, every=0.2)
    host = _task_instances(cluster, token, two)["engine_config.sweep_shard_1"]["hostname"]
    assert host in LOADGEN_HOSTS, host
    killed = procs.procs.pop(host)
    # The host dies: its worker and everything under it (the task runs in a process group of its own, its
    # load-generator processes under it), all at once.
    tree = [psutil.Process(killed.pid), *psutil.Process(killed.pid).children(recursive=True)]
    assert any("forkserver" in " ".join(p.cmdline()) for p in tree), [p.cmdline()[:3] for p in tree]
    shm = _shm_mapped(tree)  # its semaphores: its resource tracker dies with it and cannot unlink them
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    killed.wait(30)
    for f in shm:  # what the dead host's tracker would have unlinked (else the other xdist worker's leftover check
        Path(f).unlink(missing_ok=True)  # of a real-engine test finds them); nothing else holds them
    flushed_at_kill = flushed(point("shards2", "c8") / "shard-1")
    assert procs.wait("the two-host run", lambda: _finished(cluster, token, two), 300) == "failed"
    print(f"two-host run with a kill: {time.monotonic() - t0:.0f} s")
    tis = _task_instances(cluster, token, two)
    shards = [tis["engine_config.sweep"], tis["engine_config.sweep_shard_1"]]
    assert sorted(t["hostname"] for t in shards) == sorted(LOADGEN_HOSTS), shards
    assert [t["state"] for t in shards] == ["success", "failed"], shards
    assert tis["engine_config.stop_engine"]["state"] == "success"  # the teardown ran after the dead shard

    # c4 from two hosts: one agreed start, each host's clock offset, both shards' records merged...
    c4 = json.loads((point("shards2", "c4") / "point.json").read_text())
    assert c4["aborted"] is None and [s["wrote_result"] for s in c4["shards"]] == [True, True], c4["shards"]
    assert len({s["start_wall"] for s in c4["shards"]}) == 1 and all(s["late_s"] <= 0.5 for s in c4["shards"])
    assert sorted(s["host"] for s in c4["shards"]) == sorted(LOADGEN_HOSTS), c4["shards"]
    assert all(s["clock"]["offset_s"] is not None for s in c4["shards"]), c4["shards"]
    parts = [read_table(point("shards2", "c4") / f"shard-{k}" / "records.parquet").num_rows for k in (0, 1)]
    assert c4["requests"] == sum(parts) and min(parts) > 0, parts
    # ...and the figures of the one-host point, within its run-to-run noise (2 shared cores: 25%)
    ref = json.loads((point("shards1", "c4") / "summary.json").read_text())
    got = json.loads((point("shards2", "c4") / "summary.json").read_text())
    for metric in ("total_tokens_per_s_per_gpu", "requests_per_s", "ttft_p50_s"):
        print(f"c4 {metric}: one host {ref[metric]:.4g}, two hosts {got[metric]:.4g}")
        assert got[metric] == pytest.approx(ref[metric], rel=0.25), (metric, got[metric], ref[metric])

    # c8: incomplete, never silently short; the dead shard's flushed records merged, the shard files kept.
    c8 = json.loads((point("shards2", "c8") / "point.json").read_text())
    assert c8["abort_kind"] == "incomplete" and "shard 1" in c8["aborted"], c8["aborted"]
    alive = read_table(point("shards2", "c8") / "shard-0" / "records.parquet").num_rows
    dead = flushed(point("shards2", "c8") / "shard-1")
    print(f"c8: shard 0 {alive} records, killed shard 1 {dead} flushed ({flushed_at_kill} seen at the kill)")
    assert dead >= flushed_at_kill >= 4 and c8["requests"] == alive + dead
    assert read_table(point("shards2", "c8") / "records.parquet").num_rows == alive + dead
    summary = json.loads((point("shards2", "c8").parent / "summary.json").read_text())
    assert summary["status"] == "failed" and "incomplete" in summary["error"], summary["error"]
    assert _kill_engines(cluster["marker"]) == []
