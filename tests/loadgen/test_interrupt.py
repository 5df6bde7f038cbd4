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

from benchcamp.results.records import read_records

pytestmark = pytest.mark.alone  # the Ctrl-C must land while requests are in flight

SCRIPT = """
import sys, time
sys.path[:0] = [{fakes!r}, {tests!r}]
from pathlib import Path
from loadgen_support import make_workload, MODEL
from timed_server import TimedServer
from benchcamp.loadgen import PointSpec, run_point

class Finalizer:
    def __del__(self):
        print("RUNNING", flush=True)
        end = time.monotonic() + 3
        while time.monotonic() < end:   # the Ctrl-C lands here, inside a finalizer
            pass

def progress(state):
    if state["t"] > 1.5:
        if {in_finalizer!r}:
            Finalizer()   # dropped at once: __del__ runs on the main thread, as the GC runs them
        else:
            print("RUNNING", flush=True)

if __name__ == "__main__":
    # as a process started from a terminal: Ctrl-C neither ignored nor blocked, whatever
    # signal state the test runner's earlier tests left to its children
    import signal
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    srv = TimedServer(ttft_s=0.01, tpot_s=0.1, model=MODEL).start()  # 0.5 s requests: some in flight
    spec = PointSpec("c3", "closed", 3, warmup_s=0.2, duration_s=60, drain_s=30, workers=2)
    try:
        run_point(srv.url, None, MODEL, make_workload(4, 3), spec, Path({out!r}), progress=progress)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.parametrize("in_finalizer", [False, True], ids=["plain", "in-finalizer"])
def test_ctrl_c_stops_cleanly_and_keeps_records(tmp_path, in_finalizer):
    """In-finalizer: a KeyboardInterrupt raised inside a __del__ (an asyncio transport's, run by
    the garbage collector) is printed and dropped by Python, so the point must not rely on one."""
    here = Path(__file__).resolve().parent
    script = tmp_path / "run.py"
    out = tmp_path / "point"
    script.write_text(SCRIPT.format(fakes=str(here.parent / "fakes"), tests=str(here), out=str(out),
                                   in_finalizer=in_finalizer))
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


KILLED_SCRIPT = """
import sys
sys.path[:0] = [{fakes!r}, {tests!r}]
from pathlib import Path
from loadgen_support import make_workload, MODEL
from benchcamp.loadgen import PointSpec, run_point

said = []
def progress(state):
    if state["t"] > 1.5 and not said:
        said.append(1)
        print("RUNNING", *state["pids"], flush=True)

if __name__ == "__main__":
    spec = PointSpec("c3", "closed", 3, warmup_s=0.2, duration_s=60, drain_s=30, workers=2)
    run_point({url!r}, None, MODEL, make_workload(4, 3), spec, Path({out!r}), progress=progress)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")   # a zombie no init reaped yet has exited all the same


@pytest.mark.slow
def test_kill_9_leaves_records_that_recover_keeps(tmp_path):
    """`kill -9` of the process running a point: a second run into the same folder is refused
    while it lives, its orphaned workers wind down instead of loading the engine on,
    and recover() merges everything they wrote."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fakes"))
    from loadgen_support import MODEL, make_workload
    from timed_server import TimedServer

    from benchcamp.loadgen import PointSpec, run_point
    from benchcamp.results.records import PointBusy, leftover_runs, recover

    here = Path(__file__).resolve().parent
    out = tmp_path / "point"
    script = tmp_path / "run.py"
    with TimedServer(ttft_s=0.01, tpot_s=0.05, model=MODEL) as srv:   # outlives the killed process
        script.write_text(KILLED_SCRIPT.format(fakes=str(here.parent / "fakes"), tests=str(here), out=str(out),
                                               url=srv.url))
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            pids: list[int] = []
            for line in proc.stdout:
                if line.startswith("RUNNING"):
                    pids = [int(x) for x in line.split()[1:]]
                    break
            assert pids, proc.communicate(timeout=5)[0]
            spec = PointSpec("c3", "closed", 3, warmup_s=0.0, duration_s=0.5, drain_s=1, workers=1)
            with pytest.raises(PointBusy, match="another run is measuring into this folder"):
                run_point(srv.url, None, MODEL, make_workload(4, 3), spec, out)
            os.kill(proc.pid, signal.SIGKILL)     # the parent only, as `kill -9 <pid>` does
            proc.wait(timeout=10)
            deadline = time.monotonic() + 30      # the window has ~58 s to go, the drain 30 more
            while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert all(_gone(p) for p in pids), "orphaned workers went on loading the engine"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            for p in pids:
                if not _gone(p):
                    os.kill(p, signal.SIGKILL)
        served = len(srv.log)

    assert not (out / "records.parquet").exists() and len(leftover_runs(out)) == 1
    [merged] = recover(out)
    df = read_records(merged)
    assert set(df["worker"]) == {0, 1}
    # every request the server saw is in the records (the in-flight ones as interrupted)
    assert len(df) == served
    assert df["error"].fillna("").str.startswith("interrupted").sum() >= 1
    assert leftover_runs(out) == {} and recover(out) == []


def test_interrupts_as_flag_records_ctrl_c_and_restores_the_handlers():
    """While a point runs, SIGINT (and SIGTERM where it means Ctrl-C) only set the flag; the
    poll loop raises; afterwards the handlers are what they were. An ignored signal stays ignored."""
    from benchcamp.loadgen.signals import interrupts_as_flag

    before_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupts_as_flag() as flag:
            flag.raise_if_set()                       # nothing yet
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)                          # handlers run between bytecodes: no exception here
            with pytest.raises(KeyboardInterrupt):
                flag.raise_if_set()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with interrupts_as_flag() as flag:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            flag.raise_if_set()                       # ignored, as the caller asked
    finally:
        signal.signal(signal.SIGTERM, before_term)
        signal.signal(signal.SIGINT, before_int)
