"""Secrets planted in every input of `benchcamp run` are found nowhere it writes.

One short campaign on the simulated engine (one level, seconds-long window),
tracked to a real `mlflow server` on loopback (SQLite backend, artifacts in a
folder) through a tracking URI that carries a password. Planted: an
``--hf-token`` in engine.extra_args, HF_TOKEN in the environment, the endpoint
API key variable (BENCHCAMP_API_KEY), the MLflow password; the engine's own
generated key is picked up from the engine's environment while it runs. Then
every place the run writes is searched: stdout/stderr, every file of the
results store (engine.log included), the report folder, the MLflow database
and artifact folder, and the engine's /proc/<pid>/cmdline while it serves.
(A config key named like a secret cannot reach a run: the schema rejects unknown
keys without echoing values; scrub/safe_params mask such keys, see
tests/tracking/test_redact.py.)
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def _planted(label: str) -> str:
    return f"{label}_{secrets.token_hex(12)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path, mlflow_db_template):
    """A real `mlflow server` on loopback: SQLite backend (a copy of the session's migrated store:
    the server starts without MLflow's migrations), artifacts written by the client to a folder."""
    port = _free_port()
    db, artifacts = tmp_path / "mlflow" / "mlflow.db", tmp_path / "mlflow" / "artifacts"
    artifacts.mkdir(parents=True)
    shutil.copy(mlflow_db_template, db)
    with open(tmp_path / "mlflow" / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                                 "--default-artifact-root", str(artifacts), "--no-serve-artifacts",
                                 "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true"))
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mlflow server did not start: "
                                       + (tmp_path / "mlflow" / "server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield {"port": port, "db": db, "artifacts": artifacts}
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)

def _watch_engine(run: subprocess.Popen, seen: dict) -> None:
    """Record the engine's argv and its environment's API key while `benchcamp run` serves."""
    try:
        children = psutil.Process(run.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            cmdline = child.cmdline()
            if "engine" in cmdline and "serve" in cmdline:
                seen["cmdlines"].add("\0".join(cmdline))
                seen["raw"].add(Path(f"/proc/{child.pid}/cmdline").read_bytes())
                key = child.environ().get("VLLM_API_KEY")
                if key:
                    seen["keys"].add(key)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, FileNotFoundError):
            continue


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def test_secrets_planted_in_every_input_are_nowhere_in_what_benchcamp_run_writes(tmp_path, mlflow_server):
    hf_flag, hf_env, endpoint_key, mlflow_pw = (_planted(x) for x in ("hfflag", "hfenv", "endpointkey", "mlflowpw"))
    uri = f"http://benchuser:{mlflow_pw}@127.0.0.1:{mlflow_server['port']}"
    params = {
        "campaign": {"name": "secretscan"},
        "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
                   "data_parallel_size": 1, "enable_expert_parallel": False,
                   "extra_args": ["--hf-token", hf_flag]},
        "hardware": {"gpu": "h200", "gpu_count": 1},
        "workload": {"spec": str(REPO / "workloads" / "agentic-coding.yaml"), "data": str(tmp_path / "workload.parquet")},
        "load": {"levels": [4], "warmup_s": 0.5, "duration_s": 4.0, "drain_s": 3, "min_requests": 1, "workers": 1,
                 # 2 shared cores: a busy client still counts (validity has its own tests)
                 "max_error_rate": 1.0, "max_sched_lag_p99_ms": 10000, "max_client_cpu": 1.0,
                 "max_incomplete_rate": 1.0},
        "baselines": {"published": []},
        "tracking": {"mlflow_uri": uri},
        "results": {"store": str(tmp_path / "results")},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = dict(os.environ, HF_TOKEN=hf_env, BENCHCAMP_API_KEY=endpoint_key, PYTHONUNBUFFERED="1",
               MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true")
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    seen: dict = {"cmdlines": set(), "raw": set(), "keys": set()}
    with open(out, "wb") as o, open(err, "wb") as e:
        run = subprocess.Popen([sys.executable, "-m", "benchcamp.cli", "run", "--params", str(tmp_path / "params.yaml"),
                                "--reports", str(tmp_path / "reports")],
                               cwd=tmp_path, env=env, stdout=o, stderr=e)
        deadline = time.monotonic() + 600
        while run.poll() is None and time.monotonic() < deadline:
            _watch_engine(run, seen)
            time.sleep(0.2)
        if run.poll() is None:
            run.kill()
        rc = run.wait(30)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"benchcamp run failed ({rc}):\n{stdout[-3000:]}\n{stderr[-3000:]}"

    # The scan must have had something to look at.
    assert seen["cmdlines"] and len(seen["keys"]) == 1, seen
    results = tmp_path / "results"
    assert list(results.rglob("engine.log")) and list((tmp_path / "reports").rglob("*.html"))
    assert _files(mlflow_server["artifacts"]), "no MLflow artifact was written"
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=f"sqlite:///{mlflow_server['db']}")
    runs = [r for exp in client.search_experiments() for r in client.search_runs([exp.experiment_id])]
    assert runs and any(r.data.params for r in runs)

    planted = {"--hf-token value": hf_flag, "HF_TOKEN": hf_env, "BENCHCAMP_API_KEY": endpoint_key,
               "MLflow password": mlflow_pw, "engine API key": next(iter(seen["keys"]))}
    places: dict[str, bytes] = {"stdout": stdout.encode(), "stderr": stderr.encode()}
    places.update({f"engine cmdline {i}": raw for i, raw in enumerate(seen["raw"])})
    for path in _files(results, tmp_path / "reports", mlflow_server["artifacts"]):
        places[str(path.relative_to(tmp_path))] = path.read_bytes()
    places["mlflow.db"] = Path(mlflow_server["db"]).read_bytes()
    for r in runs:
        places[f"MLflow run {r.info.run_id} params/tags"] = repr((r.data.params, r.data.tags)).encode()
    leaks = [f"{what} in {where}" for what, value in planted.items() for where, data in places.items()
             if value.encode() in data]
    assert not leaks, "secrets leaked:\n" + "\n".join(leaks)
    assert "--hf-token" not in "".join(seen["cmdlines"])  # the token went by env, not as a masked flag

