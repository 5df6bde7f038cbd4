"""Ctrl-C during a point: workers flush, records and point.json are kept, exit is clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchcamp.records import read_records

SCRIPT = """
import sys, time
sys.path[:0] = [{fakes!r}, {tests!r}]
from pathlib import Path
from loadgen_support import make_workload, MODEL
from timed_server import TimedServer
from benchcamp.loadgen import PointSpec, run_point

def progress(state):
    if state["t"] > 1.5:
        print("RUNNING", flush=True)

if __name__ == "__main__":
    srv = TimedServer(ttft_s=0.01, tpot_s=0.1, model=MODEL).start()  # 0.5 s requests: some in flight
    spec = PointSpec("c3", "closed", 3, warmup_s=0.2, duration_s=60, drain_s=30, workers=2)
    try:
        run_point(srv.url, None, MODEL, make_workload(4, 3), spec, Path({out!r}), progress=progress)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(130)
"""


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_records(tmp_path):
    here = Path(__file__).resolve().parent
    script = tmp_path / "run.py"
    out = tmp_path / "point"
    script.write_text(SCRIPT.format(fakes=str(here.parent / "fakes"), tests=str(here), out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if "RUNNING" in line or time.monotonic() > deadline:
                break
        t = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)   # what a terminal's Ctrl-C does: the whole group
        rest = proc.communicate(timeout=30)[0]
        stopped_in = time.monotonic() - t
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, rest
    assert "INTERRUPTED" in rest
    assert stopped_in < 20   # not the 60 s window nor the 30 s drain
    doc = json.loads((out / "point.json").read_text())
    assert doc["aborted"].startswith("interrupted")
    df = read_records(out / "records.parquet")
    assert len(df) > 5 and set(df["worker"]) == {0, 1}
    # requests in flight at the interrupt are recorded as such, not lost
    assert (df["error"] == "interrupted").sum() >= 1
