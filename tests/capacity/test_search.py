"""Capacity search on synthetic monotone measures: the boundary found is exact within the
resolution, probes are shared across tiers, invalid probes are retried and never used."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from benchcamp.config import load_config
from benchcamp.planning.capacity import SearchSettings, Tier, format_capacity, search_capacity


@dataclass
class Out:
    label: str
    valid: bool
    summary: dict
    reasons: list = field(default_factory=list)


class Machine:
    """Per-user rate = 2000 / level tokens/s, TTFT = 0.02 * level s; an agent-count boundary per tier."""

    def __init__(self, invalid_first: set[int] = frozenset(), invalid_always: set[int] = frozenset(),
                 speed: float = 2000.0):
        self.calls: list[int] = []
        self.invalid_first, self.invalid_always, self.speed = set(invalid_first), set(invalid_always), speed

    def __call__(self, level: int, attempt: int = 0) -> Out:
        self.calls.append(level)
        first = self.calls.count(level) == 1
        if level in self.invalid_always or (first and level in self.invalid_first):
            # a garbage summary that would meet every tier if it were used
            return Out(f"c{level}", False, {"p90_user_tokens_per_s": 1e9, "ttft_p90_s": 0.0}, ["client CPU"])
        return Out(f"c{level}", True, {"p90_user_tokens_per_s": self.speed / level, "ttft_p90_s": 0.02 * level,
                                       "total_tokens_per_s_per_gpu": 100.0 * level, "revenue_per_gpu_hour": 0.5 * level,
                                       "cost_per_gpu_hour": 3.5, "margin_per_gpu_hour": 0.5 * level - 3.5,
                                       "cost_per_mtok": 1.0})


TIERS = [Tier("t20", 20.0, 10.0), Tier("t50", 50.0, 5.0), Tier("t100", 100.0, 2.0)]
# rate >= X <=> level <= 2000 / X; TTFT <= Y <=> level <= 50 Y: t20 -> 100, t50 -> 40, t100 -> 20


def test_exact_boundary_per_tier_with_shared_probes():
    m = Machine()
    res = search_capacity(m, TIERS, SearchSettings(start=8, max=4096), gpus=8, board_power_w=700,
                          node_overhead_factor=1.0)
    got = {t.tier: t.max_agents for t in res.tiers}
    assert got == {"t20": 100, "t50": 40, "t100": 20}
    assert all(t.status == "ok" and t.failed_above == t.max_agents + 1 for t in res.tiers)
    assert len(m.calls) == len(set(m.calls)), "a level was measured twice: probes must be cached across tiers"
    t20 = res.tiers[0]
    assert t20.point == "c100" and t20.total_tokens_per_s_per_gpu == 10000.0 and t20.revenue_per_gpu_hour == 50.0
    assert t20.agents_per_gpu == 100 / 8
    assert t20.agents_per_mw == pytest.approx(100 / 8 / 700 * 1e6)
    assert "t20" in format_capacity(res) and "100 agents" in format_capacity(res)


def test_relative_resolution_stops_early_but_brackets_the_boundary():
    m = Machine()
    res = search_capacity(m, [TIERS[0]], SearchSettings(start=8, max=4096, resolution_rel=0.1), gpus=1)
    t = res.tiers[0]
    assert t.max_agents <= 100 < t.failed_above
    assert t.failed_above - t.max_agents <= max(1, math.floor(0.1 * t.max_agents))
    exact = search_capacity(Machine(), [TIERS[0]], SearchSettings(start=8, max=4096), gpus=1)
    assert len(res.probes) < len(exact.probes)


def test_invalid_probe_is_retried_and_never_used():
    m = Machine(invalid_first={16, 128})
    res = search_capacity(m, TIERS, SearchSettings(start=8, max=4096, retries=1), gpus=8)
    assert {t.tier: t.max_agents for t in res.tiers} == {"t20": 100, "t50": 40, "t100": 20}
    bad = [p for p in res.probes if not p.valid]
    assert sorted(p.level for p in bad) == [16, 128] and all(p.meets == {} for p in bad)
    assert len(res.outcomes) == len(res.probes) and "outcomes" not in res.to_dict()
    assert all(p.attempt == 1 for p in res.probes if p.level in (16, 128) and p.valid)


def test_probe_invalid_after_retries_is_reported_and_stops_the_tier():
    m = Machine(invalid_always={64})
    res = search_capacity(m, TIERS, SearchSettings(start=8, max=4096, retries=1), gpus=8)
    by = {t.tier: t for t in res.tiers}
    assert m.calls.count(64) == 2                       # first run + one retry, then never again
    assert by["t20"].status == "invalid_probe" and by["t20"].max_agents == 32   # what valid probes proved
    assert by["t50"].status == "invalid_probe"      # its bracket needs level 64 too (doubling from 32)
    assert by["t100"].max_agents == 20 and by["t100"].status == "ok"           # 32 brackets it: no need for 64


def test_at_max_and_none():
    res = search_capacity(Machine(speed=1e9), [Tier("easy", 1.0, 1e9)], SearchSettings(start=8, max=50), gpus=1)
    assert res.tiers[0].status == "at_max" and res.tiers[0].max_agents == 50
    res = search_capacity(Machine(speed=10.0), [Tier("hard", 20.0, 10.0)], SearchSettings(start=8, max=50), gpus=1)
    assert res.tiers[0].status == "none" and res.tiers[0].max_agents == 0 and res.tiers[0].point is None


def test_config_block_defaults_and_errors():
    cfg = load_config(None, ["load.mode=capacity", "load.clock=virtual"])
    assert [t.name for t in cfg.load.tiers][0] == "agentperf-20"
    assert (cfg.load.tiers[0].p90_user_tok_s, cfg.load.tiers[0].p90_ttft_s) == (20.0, 10.0)
    assert SearchSettings.of(cfg.load.capacity).start == cfg.load.capacity.start
    from benchcamp.config import ConfigError
    with pytest.raises(ConfigError, match="load.capacity.start"):
        load_config(None, ["load.capacity.start=100", "load.capacity.max=10"])
    with pytest.raises(ConfigError, match="load.clock=virtual"):
        load_config(None, ["load.clock=virtual", "engine.kind=vllm"])


def test_a_probe_whose_ttft_floor_is_over_the_tier_fails_it_without_retries():
    def measure(level: int, attempt: int = 0) -> Out:
        if level < 64:
            return Machine()(level, attempt)
        # cut off at the drain's end: its completed requests look fast, its floor says the tier is missed
        return Out(f"c{level}", False, {"p90_user_tokens_per_s": 1e9, "ttft_p90_s": 0.0, "ttft_p90_floor_s": 7.0},
                   ["requests still running"])

    calls: list[int] = []
    res = search_capacity(lambda lv, a=0: (calls.append(lv), measure(lv, a))[1], TIERS,
                          SearchSettings(start=8, max=4096, retries=2), gpus=8)
    got = {t.tier: (t.max_agents, t.status) for t in res.tiers}
    # t20 (TTFT <= 10 s) would pass at 64-100 but 7 s proves nothing there: undecided, a lower bound as before
    assert got == {"t20": (32, "invalid_probe"), "t50": (40, "ok"), "t100": (20, "ok")}
    floored = [p for p in res.probes if not p.valid]
    assert floored and all(p.meets == {"t50": False, "t100": False} and p.ttft_p90_floor_s == 7.0 for p in floored)
    assert calls.count(64) == 3  # retried for t20 only (the tier its floor leaves open)


def test_saturated_virtual_probe_is_decided_by_its_ttft_floor(tmp_path):
    """The real path: the simulated engine on the virtual clock, saturated (4 sequences for 48 agents) with a
    1 s drain, so a quarter of the window's requests are cut off. Its TTFT floor is a true lower bound (the same
    probe with a 600 s drain completes every request at a higher P90), and it fails a 4 s tier without retries."""
    from capacity_support import SMALL, SPEC

    from benchcamp.sim.clock.virtual_point import virtual_measure
    from benchcamp.workload.generator import generate, parse_spec

    wl = generate(parse_spec(SPEC))
    short, long_ = (load_config(None, SMALL + ["load.mode=capacity", "engine.max_num_seqs=4", f"load.drain_s={d}"])
                    for d in (1, 600))
    cut = virtual_measure(short, wl, tmp_path / "short")(48, 0)
    full = virtual_measure(long_, wl, tmp_path / "long")(48, 0)
    assert not cut.valid and cut.summary["incomplete_rate"] > 0.05 and full.valid
    floor = cut.summary["ttft_p90_floor_s"]
    assert 4.0 < floor <= full.summary["ttft_p90_s"]
    assert "ttft_p90_floor_s" not in full.summary
    res = search_capacity(virtual_measure(short, wl, tmp_path / "search"), [Tier("t4", 1.0, 4.0)],
                          SearchSettings(start=48, max=48, retries=1), gpus=1)
    at48 = [p for p in res.probes if p.level == 48]
    assert [(p.label, p.meets) for p in at48] == [("c48", {"t4": False})]  # decided at once, no c48.retry1
    # the bound is the lowest level that failed the tier (below 48 the search probes on: c36 fails by its floor too)
    failed = [p.level for p in res.probes if p.meets.get("t4") is False]
    assert res.tiers[0].failed_above == min(failed) <= 48
