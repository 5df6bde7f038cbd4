"""A wall-clock capacity probe whose engine dies mid-window is invalid and says so (the
simulated engine over real loopback HTTP with its crash fault, the real load generator):
capacity probes and sweep points share one summary path (benchcamp.point_outcome), so an
aborted probe is never counted as a measurement."""

from __future__ import annotations

import pytest

from benchcamp.loadgen.capacity_probe import wall_measure

EXTRA = ["load.mode=capacity", "load.clock=wall", "load.warmup_s=0", "load.duration_s=15", "load.drain_s=5",
         "load.workers=1", "engine.extra_args=[--fault, crash-after-requests=30]"]


@pytest.mark.slow
def test_a_probe_whose_engine_died_is_invalid_with_the_reason(tmp_path, small_cfg, tiny_workload):
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.provision import get_provider

    cfg = small_cfg(*EXTRA)
    provider = get_provider(cfg)
    node = provider.provision("capacity-abort-test")
    try:
        dep = deploy(node, cfg, log_dir=tmp_path)
        try:
            wait_ready(dep, 120)
            out = wall_measure(cfg, tiny_workload, dep.endpoint, dep.api_key, tmp_path / "w", "abort-test")(8)
        finally:
            stop(dep)
    finally:
        provider.deprovision(node)
    assert out.aborted and out.aborted.startswith("engine died"), out.aborted
    assert not out.valid
    assert out.reasons[0] == f"point aborted: {out.aborted}"
