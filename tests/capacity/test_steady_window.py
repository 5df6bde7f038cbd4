"""Steady-state windows (load.steady), the default campaign's property at a small scale: a closed loop's
tokens/s/GPU does not depend on the window's length, and the server's prefix-cache hit rate never passes the
workload's theoretical rate, even at a level above the workload's distinct sessions.

One H100 (Llama-3.1-8B, virtual clock), 24 sessions whose first prompt (~6K tokens) is mostly uncached, 48 lanes:
every lane starting its first turn at t=0 floods the engine with cold prefills that a 2 s warm-up does not cover,
as 352 agents' ~116K-token first turns do on the default campaign's rack.
"""

from __future__ import annotations

import copy

import pytest
from capacity_support import SMALL, SPEC

from benchcamp.config import load_config
from benchcamp.loadgen.spec import PointSpec
from benchcamp.results.outcome import summarize_point
from benchcamp.sim.clock.virtual_point import run_point_virtual
from benchcamp.workload.generator import generate, parse_spec
from benchcamp.workload.stats import theoretical_hit_rate

LANES, SHORT, LONG = 48, 60, 240  # lanes above the workload's 24 sessions; windows of 60 s and 240 s


@pytest.fixture(scope="module")
def cold_workload():
    spec = copy.deepcopy(SPEC)
    spec["session"]["task_tokens"] = {"kind": "lognormal", "median": 6000, "sigma": 0.3, "min": 2000, "max": 12000}
    spec["session"]["max_context_tokens"] = 20000
    wl = generate(parse_spec(spec))
    return wl, theoretical_hit_rate(wl)


def _point(tmp_path, wl, theoretical, duration_s, *extra):
    cfg = load_config(None, [*SMALL, f"load.duration_s={duration_s}", *extra])
    spec = PointSpec.from_load(cfg.load, LANES, "steady")
    res = run_point_virtual(cfg, wl, spec, tmp_path / f"{duration_s}-{len(extra)}")
    return summarize_point(cfg, res, theoretical).summary


def test_the_default_window_is_steady_and_its_hit_rate_at_most_the_theoretical(tmp_path, cold_workload):
    wl, theoretical = cold_workload
    assert len(wl.top_level()) < LANES
    short, long = (_point(tmp_path, wl, theoretical, d) for d in (SHORT, LONG))
    a, b = short["total_tokens_per_s_per_gpu"], long["total_tokens_per_s_per_gpu"]
    assert abs(a - b) / b <= 0.10, (a, b)
    for s in (short, long):
        assert s["cache_hit_rate_server"] <= theoretical, (s["cache_hit_rate_server"], theoretical)
        assert s["steady"] == 1, s["steady_reasons"]
        assert s["steady_throughput_drift"] <= 0.10 and s["steady_cache_hit_drift"] <= 0.02
        # the window opened after the last lane primer (past load.warmup_s=2) and the loop's turnover after it
        assert 2 < s["primer_barrier_s"] < s["window_start_s"]
        assert "exceeds the workload's 24 distinct sessions" in s["replay_note"]


def test_lanes_from_the_first_turn_or_without_salts_are_what_the_defaults_fix(tmp_path, cold_workload):
    """The old replay, for contrast (so the test above can fail): lanes from their first turn and a window at
    load.warmup_s open a short window on a cold burst, and recycled plays without their own salt find an earlier
    play's blocks cached."""
    wl, theoretical = cold_workload
    old = ("load.steady.lane_start=first_turn", "load.steady.window_opens=at_warmup")
    short, long = (_point(tmp_path, wl, theoretical, d, *old) for d in (SHORT // 2, LONG))
    a, b = short["total_tokens_per_s_per_gpu"], long["total_tokens_per_s_per_gpu"]
    assert abs(a - b) / b > 0.10, (a, b)
    assert short["steady"] == 0 and "tokens/s/GPU of the window's halves differ" in short["steady_reasons"]
    unsalted = _point(tmp_path, wl, theoretical, LONG, "load.steady.replay_salt=false")
    assert unsalted["cache_hit_rate_server"] > theoretical
    assert "same token ids" in unsalted["replay_note"]
