"""The real vLLM (CPU build, tiny model) as a Slurm job's engine: `benchcamp run` with provider.kind=slurm on the
real test cluster (tests/provision/slurm_cluster.py, the session's), as a user on a cluster would run it: the job's
PATH finds the compute node's vLLM and the model is a folder the node reads (provider.slurm.env, engine.model).
Readiness, one short point, teardown; afterwards nothing is left in squeue or the process table (the API server,
vLLM's EngineCore and its workers included), nor the job's env and key files.

One engine start (~35-80 s on 2 cores): the only real-engine start on Slurm in the suite. The topology's
argv and node placement are tested with the simulated engine (tests/provision/test_slurm.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from realengine_support import PRESET, engine_processes, real_sets

from benchcamp.deploy import execution_engines, free_port
from benchcamp.deploy.vllm_install import engine_environment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_real_vllm_as_a_slurm_job_serves_a_point_and_leaves_nothing(
    slurm_cluster, vllm_install, tmp_path, no_engine_leftovers
):
    eid = "slurm-real-vllm"
    # What the job's engine needs on the compute node: its vLLM on PATH, every cache and temp file in one folder
    # (engine_environment: the same variables the local provider gives it), the model where the node reads it.
    env = engine_environment(vllm_install, tmp_path / "engine")
    env["PATH"] = f"{vllm_install.executable.parent}:{os.environ['PATH']}"
    sets = real_sets(
        tmp_path,
        **{
            "provider.kind": "slurm",
            "provider.slurm.env_dir": str(tmp_path / "slurm-env"),
            "provider.slurm.engine_port": free_port(),
            "provider.slurm.poll_s": 0.5,
            "provider.slurm.gpus_per_node": 0,  # the CPU build
            "provider.slurm.time_limit_min": 15,
            "provider.slurm.startup_timeout_s": 300,
            "provider.slurm.env": json.dumps(env),
            "engine.model": vllm_install.model_path("benchcamp/tiny-llama"),
            "engine.served_model_name": "benchcamp/tiny-llama",
            "load.levels": "[2]",
            "load.warmup_s": 2,
            "load.duration_s": 6,
            "load.min_requests": 3,
        },
    )
    argv = [sys.executable, "-m", "benchcamp.cli", "run", "--params", str(PRESET), "--no-track",
            "--execution-id", eid]
    for s in sets:
        argv += ["--set", s]
    # The job works in the folder it was submitted from (sbatch's default), so every process of its engine does:
    # that is how this test tells them from other sessions' engines on this machine.
    log = open(tmp_path / "run.log", "w+")  # noqa: SIM115  (closed with tmp_path)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, tuple[int, str]] = {}  # pid: (parent pid, command line)
    deadline = time.monotonic() + 540
    while proc.poll() is None and time.monotonic() < deadline:
        for p in engine_processes(under=tmp_path):
            with contextlib.suppress(psutil.Error):
                seen.setdefault(p.pid, (p.ppid(), " ".join(p.cmdline())))
        time.sleep(1.0)
    out = (tmp_path / "run.log").read_text()
    assert proc.wait(30) == 0, out[-4000:]
    servers = {pid for pid, (_, cmd) in seen.items() if "vllm serve" in cmd}
    cores = [pid for pid, (parent, _) in seen.items() if parent in servers]
    assert servers and cores, seen  # the API server and its EngineCore ran in the job (and below: are gone)
    assert "engine vllm " in out and " on 1 x cpu" in out
    [run] = [p for p in (tmp_path / "results" / "real-cpu-smoke").iterdir() if p.is_dir() and p.name != "latest"]
    point = json.loads((run / "c2" / "point.json").read_text())
    assert point["server_metrics_available"] and point["server_metrics_delta"]["vllm:request_success"] >= 3
    job_log = next((tmp_path / "slurm-env").glob("*.log")).read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in job_log and "device_config=cpu" in job_log
    assert sorted(p.suffix for p in (tmp_path / "slurm-env").iterdir()) == [".log"]
    # nothing left: no job, no process of the execution, no vLLM process (EngineCore included) this test started
    assert slurm_cluster.jobs() == []
    assert not execution_engines(eid)
    assert not engine_processes(under=tmp_path) and not [p for p in seen if psutil.pid_exists(p)
                                                          and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
