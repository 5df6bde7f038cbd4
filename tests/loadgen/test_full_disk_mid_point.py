"""The results folder fills up while a point runs (a real tmpfs of 1 MiB, filled by a thread
mid-window): the point fails in one line naming the folder and the fix, and no load-generator
worker prints a traceback."""

from __future__ import annotations

import re
import threading
import time

import pytest
from loadgen_support import MODEL, make_workload
from test_run_point import _spec
from tmpfs import mounted_tmpfs

from benchcamp.errors import BenchcampError
from benchcamp.loadgen import run_point

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def small_fs(tmp_path):
    with mounted_tmpfs(tmp_path, "1m") as mnt:
        yield mnt


def _fill_after(path, delay_s: float) -> threading.Thread:
    def fill():
        time.sleep(delay_s)
        try:
            with open(path / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass

    t = threading.Thread(target=fill, daemon=True)
    t.start()
    return t


def test_a_disk_that_fills_mid_point_fails_in_one_line_without_worker_tracebacks(server, small_fs, capfd):
    wl = make_workload(n_sessions=6, turns=3, think_s=0.05, output_len=6)
    out = small_fs / "c4"
    _fill_after(small_fs, 0.8)
    with pytest.raises(BenchcampError) as err:
        run_point(server.url, None, MODEL, wl, _spec(workers=2), out)
    assert "No space left on device" in str(err.value) and "\n" not in str(err.value)
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err[-3000:]
    # a worker that could not write (not every run: the parent may hit the full disk first) says
    # which file, not only "[Errno 28]"; test_a_worker_names_the_file_it_could_not_write pins the line
    worker_lines = [ln for ln in captured.err.splitlines() if ln.startswith("load generator worker")]
    named = r"load generator worker \d: cannot write records\.\S+\.w\d\.parquet\S*: No space left on device"
    assert all(re.fullmatch(named, ln) for ln in worker_lines), worker_lines


def test_a_worker_names_the_file_it_could_not_write(small_fs):
    from benchcamp.loadgen.worker import WorkerPlan, failure_line
    from benchcamp.results.records import worker_records_path

    records = worker_records_path(small_fs, "20261130T000000000000-abcdef", 0)
    with pytest.raises(OSError) as full, open(records, "wb") as f:   # a real full disk: ENOSPC from the kernel
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    plan = WorkerPlan(index=0, workers=1, label="c4", endpoint="", api_key=None, model=MODEL, api="completions",
                      workload=make_workload(n_sessions=1, turns=1), mode="closed", records_path=str(records))
    assert failure_line(plan, full.value) == (
        "load generator worker 0: cannot write records.20261130T000000000000-abcdef.w0.parquet: No space left on device")
