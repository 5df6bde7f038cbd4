"""Capacity verdicts per tier: a planted slower config is a regression; a rerun of the same
config is not; the noise rules (threshold, disjoint search brackets, spread of history) apply."""

from __future__ import annotations

import copy

from benchcamp.config import Regression
from benchcamp.planning.capacity import SearchSettings, search_capacity
from benchcamp.sim.clock.virtual_point import virtual_measure
from benchcamp.verdicts.compare import any_regression, comparability_key, compare_capacity

TIER = [{"name": "agentperf-20", "p90_user_tok_s": 20.0, "p90_ttft_s": 10.0}]


def _search(cfg, wl, out):
    res = search_capacity(virtual_measure(cfg, wl, out), TIER, SearchSettings(start=8, max=1024, resolution_rel=0.05),
                          gpus=cfg.hardware.gpu_count, clock="virtual")
    return {"capacity": res.to_dict(), "key": comparability_key(cfg, "wl-digest")}


def test_planted_slower_config_regresses_and_a_rerun_does_not(tmp_path, small_cfg, tiny_workload):
    base_cfg = small_cfg()
    base = _search(base_cfg, tiny_workload, tmp_path / "base")
    rerun = _search(base_cfg, tiny_workload, tmp_path / "rerun")
    # fewer sequences per step: requests queue, TTFT reaches 10 s at far fewer agents
    slow = _search(small_cfg("engine.max_num_seqs=16"), tiny_workload, tmp_path / "slow")
    baseline = [dict(name="last run", kind="historical", key=base["key"], capacity=base["capacity"])]

    same = compare_capacity(rerun, baseline)
    assert [v.verdict for v in same] == ["unchanged"] and not any_regression(same)
    worse = compare_capacity(slow, baseline)
    assert [v.verdict for v in worse] == ["regressed"], worse[0].reason
    # 264 -> 192 agents (-27%): recycled plays are salted (load.steady), so 264 lanes on 24 sessions do not share
    # one session's cache and the base config's capacity is what its engine holds
    assert worse[0].metric == "capacity.agentperf-20.max_agents" and worse[0].delta_rel < -0.2
    better = compare_capacity(base, [dict(baseline[0], capacity=slow["capacity"])])
    assert [v.verdict for v in better] == ["improved"]


def _cap(max_agents, failed_above, status="ok", tok=20.0, ttft=10.0):
    return {"tiers": [{"tier": "t", "p90_user_tok_s": tok, "p90_ttft_s": ttft, "max_agents": max_agents,
                       "failed_above": failed_above, "status": status}]}


KEY = {"workload_digest": "d", "model": "m", "gpu": "h200", "gpu_count": 8, "engine_kind": "simulated"}


def _verdict(cur, base, history=None, threshold=0.05):
    b = {"name": "b", "kind": "historical", "key": KEY, "capacity": base, "history": history or []}
    return compare_capacity({"capacity": cur, "key": KEY}, [b], Regression(relative_threshold=threshold))[0]


def test_noise_rules():
    assert _verdict(_cap(97, 98), _cap(100, 101)).verdict == "unchanged"                 # within 5 %
    v = _verdict(_cap(80, 96), _cap(100, 112))
    assert v.verdict == "regressed" and "failed here at 96" in v.reason
    v = _verdict(_cap(80, 104), _cap(100, 112))                                           # brackets overlap
    assert v.verdict == "unchanged" and "overlap" in v.reason
    history = [_cap(x, x + 30) for x in (70, 100, 130)]                                   # noisy past runs
    v = _verdict(_cap(80, 96), _cap(100, 112), history)
    assert v.verdict == "unchanged" and "within their noise" in v.reason
    assert _verdict(_cap(80, 96), _cap(100, 112, tok=50.0)).verdict == "not_comparable"   # other tier
    assert _verdict(_cap(80, None, "invalid_probe"), _cap(100, 112)).verdict == "not_comparable"
    other = copy.deepcopy(KEY) | {"gpu": "b200"}
    b = {"name": "b", "kind": "historical", "key": other, "capacity": _cap(100, 112)}
    assert compare_capacity({"capacity": _cap(80, 96), "key": KEY}, [b])[0].verdict == "not_comparable"
