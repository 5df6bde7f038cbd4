"""A wall-clock capacity probe whose engine dies mid-window is invalid and says so (the
simulated engine as `benchcamp engine serve` runs it, with its crash fault, over real loopback
HTTP; the real load generator): capacity probes and sweep points share one summary path
(benchcamp.results.outcome), so an aborted probe is never counted as a measurement."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchcamp.loadgen.capacity_probe import wall_measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))

from simulated_engine import simulated_engine  # noqa: E402

EXTRA = ["load.mode=capacity", "load.clock=wall", "load.warmup_s=0", "load.duration_s=15", "load.drain_s=5",
         "load.workers=1"]


@pytest.mark.slow
def test_a_probe_whose_engine_died_is_invalid_with_the_reason(tmp_path, small_cfg, tiny_workload):
    cfg = small_cfg(*EXTRA)
    with simulated_engine(cfg.served_model_name, "--fault", "crash-after-requests=30") as url:
        out = wall_measure(cfg, tiny_workload, url, None, tmp_path / "w", "abort-test")(8)
    assert out.aborted and out.aborted.startswith("engine died"), out.aborted
    assert not out.valid
    assert out.reasons[0] == f"point aborted: {out.aborted}"
