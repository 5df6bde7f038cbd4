"""load.max_requests caps the requests sent in the window exactly, on both clocks (it measured
one too many in wall time, and counted warm-up requests in virtual time)."""

from __future__ import annotations

import pytest
from loadgen_support import MODEL, make_workload

from benchcamp.loadgen import PointSpec, run_point
from benchcamp.metrics import in_window
from benchcamp.results.records import read_records
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.settings import EngineSettings


@pytest.mark.parametrize(
    ("level", "workers", "warmup_s"),
    [(1, 1, 0.0), pytest.param(4, 2, 0.1, marks=pytest.mark.slow)],  # two workers share the count: ~6 s
)
def test_wall_clock_window_holds_exactly_max_requests(server, tmp_path, level, workers, warmup_s):
    wl = make_workload(n_sessions=3, turns=4, output_len=3)
    spec = PointSpec("c", "closed", level, warmup_s=warmup_s, duration_s=30.0, drain_s=3.0, request_timeout_s=5.0,
                     workers=workers, max_requests=7)
    res = run_point(server.url, None, MODEL, wl, spec, tmp_path)
    df = read_records(res.records_path)
    assert int(in_window(df, res.window).sum()) == 7
    assert res.window[1] < 30.0  # the cap, not the duration, ended the window


@pytest.mark.parametrize(("level", "warmup_s"), [(1, 0.0), (4, 0.0), (2, 0.05)])
def test_virtual_clock_window_holds_exactly_max_requests(level, warmup_s):
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm")
    wl = make_workload(n_sessions=3, turns=4, output_len=3)
    df = simulate(wl, s,
                  SimLoad(mode="closed", level=level, warmup_s=warmup_s, duration_s=1e4, drain_s=100, max_requests=7, seed=1))
    assert int(in_window(df, df.attrs["window"]).sum()) == 7
