"""An Airflow task kill of the sweep task goes through the same path as SIGTERM to `benchcamp run`.

Airflow 3's task runner answers SIGTERM by calling the operator's ``on_kill`` (a no-op for a
@task) and its supervisor SIGKILLs the task 5 s later. The child below installs that same
handler, then runs the steps as the DAG's tasks do (the simulated engine as a real subprocess
over loopback HTTP); the test sends SIGTERM mid-point, as the supervisor does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from benchcamp.results.records import read_records

HERE = Path(__file__).resolve().parent

CHILD = """
import signal, sys
sys.path.insert(0, {here!r})
from pathlib import Path
from campaign_support import tiny_config
from benchcamp.campaign import StoreLayout, steps
from benchcamp.results.store import LocalStore

def on_kill():  # BaseOperator.on_kill: nothing to do for a @task
    pass

def _on_term(signum, frame):  # airflow.sdk.execution_time.task_runner._execute_task's handler
    on_kill()

signal.signal(signal.SIGTERM, _on_term)
tmp = Path({tmp!r})
cfg = tiny_config(tmp, **{{"load.duration_s": 120, "load.drain_s": 10}})
store, layout = LocalStore(tmp / "results"), StoreLayout.for_execution("tiny", {execution!r})
workload = steps.prepare_workload(cfg, store, layout)
node = steps.provision(cfg, layout.execution_id)
deployment = steps.deploy_engine(cfg, store, layout, node)
said = []

def progress(state):
    if state["t"] > 2.0 and not said:
        said.append(1)
        print("MEASURING", flush=True)

try:
    steps.sweep(cfg, store, layout, deployment, workload, progress=progress)
    print("FINISHED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
finally:
    steps.stop_engine(cfg, store, layout, deployment)
"""


@pytest.mark.slow
def test_a_killed_sweep_task_stops_the_point_and_keeps_its_records(tmp_path):
    from benchcamp.deploy import kill_execution_engines

    execution = f"tiny-killed-{uuid.uuid4().hex[:6]}"
    child = textwrap.dedent(CHILD.format(here=str(HERE), tmp=str(tmp_path), execution=execution))
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if not line or "MEASURING" in line:
                break
        assert "MEASURING" in lines[-1], "".join(lines)
        proc.send_signal(signal.SIGTERM)  # as the supervisor's kill(); it SIGKILLs 5 s later
        out, _ = proc.communicate(timeout=60)  # the point's window alone is 120 s
    finally:
        proc.kill()
        kill_execution_engines(execution, grace_s=2)  # a deploy task's engine outlives the task: clean up
    assert "INTERRUPTED" in out and "FINISHED" not in out, out
    point = tmp_path / "results" / "tiny" / execution / "c2"
    assert json.loads((point / "point.json").read_text())["abort_kind"] == "interrupted"
    assert len(read_records(point / "records.parquet")) >= 1  # merged, not left in worker files
    assert not list(point.glob("records.*.w*"))
    error = json.loads((tmp_path / "results" / "tiny" / execution / "errors" / "sweep.json").read_text())
    assert "interrupted during point c2" in error["message"]
