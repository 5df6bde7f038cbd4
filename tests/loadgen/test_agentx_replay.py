"""AgentX's replay rules (load.agentx): the shared plays (benchcamp.loadgen.agentx), the virtual
clock (simulation.simulate), the wall clock (real loopback HTTP, worker processes), and the
submission_valid verdict among a point's checks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
from loadgen_support import MODEL

from benchcamp.config import AGENTX_DEFAULTS, AgentxRules, ConfigError, from_dict
from benchcamp.loadgen import PointSpec, run_point
from benchcamp.loadgen.agentx import AgentxReplay
from benchcamp.loadgen.replay import Replayer, Turn
from benchcamp.metrics import agentx_submission
from benchcamp.results.outcome import summarize_point
from benchcamp.results.records import read_records
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.clock.virtual_point import run_point_virtual
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

REPO = Path(__file__).resolve().parents[2]
SETTINGS = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                          max_num_batched_tokens=2048)


def rules(**kw) -> dict:
    return dict(AGENTX_DEFAULTS, **kw)


def tree_workload(n: int = 3, turns: int = 4, bg_think: float = 0.0, think: float = 0.2) -> Workload:
    """Sessions of growing 16-token blocks (2 fixed prefix blocks); s0 spawns after turn 0 a joined
    subagent and a background one (it waits bg_think before its request)."""
    sessions = []
    for i in range(n):
        base = 10_000 * (i + 1)
        reqs = [Request(t, tuple(range(base, base + 4 + 2 * t)), 64 + 32 * t, 8, think if t else 0.0)
                for t in range(turns)]
        sessions.append(Session(f"s{i}", reqs, kind="main", fixed_blocks=2))
    sessions.append(Session("s0::sa:a", [Request(0, (10_000, 10_001, 7, 8), 64, 8, 0.0)], parent="s0",
                            parent_turn=0, kind="subagent", joined=True, fixed_blocks=2))
    sessions.append(Session("s0::sa:b", [Request(0, (10_000, 10_001, 9, 9), 64, 8, bg_think)], parent="s0",
                            parent_turn=0, kind="subagent", joined=False, fixed_blocks=2))
    return Workload("tree", 16, 32000, sessions)


def test_start_points_are_seeded_in_range_and_only_for_the_first_plays():
    top = tree_workload(n=3, turns=6).top_level()
    a, b = AgentxReplay(rules(), top, 5, seed=1), AgentxReplay(rules(), top, 5, seed=1)
    ks = [a.start_turn(j) for j in range(8)]
    assert ks == [b.start_turn(j) for j in range(8)]  # deterministic for a seed
    assert all(0 <= k <= 4 for k in ks[:5]) and ks[5:] == [-1, -1, -1]  # >= 1 turn left; recycles from 0
    assert ks[:5] != [AgentxReplay(rules(), top, 5, seed=2).start_turn(j) for j in range(5)]
    narrow = AgentxReplay(rules(start_min_ratio=0.5, start_max_ratio=0.5), top, 3, seed=0)
    # t* = 0.5 s of the recorded 0-1 s: the first turn at/after it is turn 3 (0.6 s), primed at turn 2
    assert [narrow.start_turn(j) for j in range(3)] == [2, 2, 2]


def test_primers_warmups_cache_bust_and_truncation_of_one_play():
    w = tree_workload(turns=6)
    s = w.sessions[0]
    ax = AgentxReplay(rules(warmup_requests_per_lane=2, benchmark_id="b1"), w.top_level(), 2, seed=0)
    first = ax.requests(s, cycle=0, start=1, root="s0")
    assert [r.turn for r in first] == [1, 2, 3, 4, 5]
    # the primer at its recorded length, then the harness's extra warm-ups: max_tokens=1, no idle delay
    assert [(r.output_len, r.think_s) for r in first[:3]] == [(8, 0.0), (1, 0.0), (1, 0.0)]
    assert [(r.output_len, r.think_s) for r in first[3:]] == [(8, 0.2), (8, 0.2)]  # recorded delays after
    assert ax.warmups(s, 1) == 3 and ax.warmups(s, 4) == 2 and ax.warmups(s, -1) == 0
    # every tree is busted, first plays included: the fixed prefix kept, the rest fresh
    plain = ax.requests(s, 0, root="s0")
    for r, o in zip(plain, s.requests):
        assert r.blocks[:2] == o.blocks[:2] and not set(r.blocks[2:]) & set(o.blocks)
    kid = ax.requests(w.sessions[3], cycle=0, root="s0")[0]
    assert kid.blocks[:2] == plain[0].blocks[:2] and kid.blocks[2] == (7 ^ ax.tree_mask(0, "s0")) & ((1 << 63) - 1)
    assert AgentxReplay(rules(cache_bust=False), w.top_level(), 2, 0).requests(s, 3) == s.requests
    assert AgentxReplay(rules(primer_max_tokens=1), w.top_level(), 2, 0).requests(s, 0, 1)[0].output_len == 1
    cut = AgentxReplay(rules(max_input_tokens=100, cache_bust=False), w.top_level(), 2, 0).requests(s, 0)
    assert [r.prompt_len for r in cut] == [64, 96]


def test_virtual_clock_primers_background_subagents_and_tree_slots():
    w = tree_workload(n=2, turns=3, bg_think=3.0)
    df = simulate(w, SETTINGS,
                  SimLoad(level=2, warmup_s=1.0, duration_s=30.0, drain_s=10.0, seed=4, agentx=rules(start_min_ratio=0.0, start_max_ratio=0.0)))
    first = df[df["sent_s"] == 0.0]
    # t* at the start of the recorded time: no turn precedes it, nothing to warm (the harness's next_turn 0)
    assert set(first["session_id"]) == {"s0", "s1"} and (first["turn"] == 0).all()
    s0 = df[df["session_id"] == "s0"].set_index("turn")
    bg = df[df["session_id"] == "s0::sa:b"].iloc[0]
    joined = df[df["session_id"] == "s0::sa:a"].iloc[0]
    # the parent waits for the joined subagent, not for the background one
    assert s0.loc[1, "sent_s"] >= joined["done_s"] and s0.loc[1, "sent_s"] < bg["sent_s"]
    # the lane holds its slot until the background subagent is done: its next play starts after it
    lane_next = df[df["session_id"].str.match(r"^s\d~1$")]["sent_s"].min()
    assert lane_next >= min(bg["done_s"], df[df["session_id"] == "s1"]["done_s"].max())
    # recycled plays (~n) get fresh blocks after the 2-block prefix: at most 32 tokens cached on turn 0
    again = df[df["session_id"].str.contains("~") & (df["turn"] == 0) & ~df["session_id"].str.contains("::")]
    assert len(again) and (again["cached_tokens"] <= 32).all()
    plain = simulate(w, SETTINGS,
                     SimLoad(level=2, warmup_s=1.0, duration_s=30.0, drain_s=10.0, seed=4, agentx=rules(start_min_ratio=0.0, start_max_ratio=0.0, cache_bust=False)))
    same = plain[plain["session_id"].str.contains("~") & (plain["turn"] == 0) & ~plain["session_id"].str.contains("::")]
    assert (same["cached_tokens"] > 32).all()


def test_virtual_clock_idle_gap_cap_moves_every_pending_turn_up():
    w = Workload("gap", 16, 32000, [Session("s0", [Request(0, (1, 2), 32, 4, 0.0), Request(1, (1, 2, 3), 48, 4, 60.0),
                                                   Request(2, (1, 2, 3, 4), 64, 4, 60.0)])])
    kw = dict(level=1, warmup_s=0.0, duration_s=200.0, drain_s=10.0, seed=0)
    at0 = dict(warmup_per_lane=False, start_min_ratio=0.0, start_max_ratio=0.0)
    capped = simulate(w, SETTINGS, SimLoad(agentx=rules(**at0), **kw))
    free = simulate(w, SETTINGS, SimLoad(agentx=rules(**at0, idle_gap_cap_s=None), **kw))
    for df, gap in ((capped, 10.0), (free, 60.0)):
        s = df[df["session_id"] == "s0~1"].set_index("turn")  # a recycled play: all its turns
        assert s.loc[1, "sent_s"] - s.loc[0, "done_s"] == pytest.approx(gap, abs=0.05)
        assert s.loc[1, "scheduled_s"] == s.loc[1, "sent_s"]
    assert capped.attrs["idle_shifts"] >= 2 and free.attrs["idle_shifts"] == 0


def test_wall_clock_idle_guard_and_background_children_with_a_fake_sender():
    """The Replayer's own clock logic (asyncio, no HTTP): a 3 s think is moved up to the cap."""
    w = tree_workload(n=1, turns=2, bg_think=0.0, think=3.0)
    loop_t0 = []
    sent: list[tuple[str, int, float, float]] = []

    async def go():
        loop = asyncio.get_running_loop()
        loop_t0.append(loop.time())
        now = lambda: loop.time() - loop_t0[0]  # noqa: E731
        inflight = [0]

        async def send(turn: Turn, payload) -> float:
            inflight[0] += 1
            t = now()
            await asyncio.sleep(0.05)
            inflight[0] -= 1
            sent.append((turn.session_id, turn.request.turn, turn.scheduled_s, t))
            return now()

        # level 0: no lane has a start point, every play runs from turn 0
        ax = AgentxReplay(rules(idle_gap_cap_s=0.3), w.top_level(), 0, 0)
        rep = Replayer(w, lambda t: None, send, now, lambda: 1.0, agentx=ax, busy=lambda: inflight[0])
        await rep.closed(1, iter(range(100)))

    asyncio.run(go())
    by = {(s, t): (sched, at) for s, t, sched, at in sent}
    first_end = by[("s0", 0)][1] + 0.05
    sched, at = by[("s0", 1)]
    # moved up from 3 s after the subagents to ~0.3 s; the record's scheduled time is the moved one
    assert 0.25 < at - first_end < 0.9 and at - sched < 0.1
    assert ("s0::sa:b", 0) in by and ("s0::sa:a", 0) in by


@pytest.mark.slow
def test_wall_clock_point_against_a_real_server(server, tmp_path):
    """run_point over loopback HTTP with worker processes: primers first, then the plays."""
    w = tree_workload(n=3, turns=4)
    spec = PointSpec("c3", "closed", 3, warmup_s=0.5, duration_s=1.5, drain_s=3.0, request_timeout_s=5.0,
                     workers=2, agentx=rules(duration_s=1.5, primer_max_tokens=1, warmup_requests_per_lane=0))
    res = run_point(server.url, None, MODEL, w, spec, tmp_path)
    df = read_records(res.records_path)
    assert res.aborted is None and df["error"].isna().all()
    primers = df[df["expected_output_tokens"] == 1]
    assert len(primers) == 3 and (primers["sent_s"] < 0.5).all()  # one per lane, before the window
    assert (primers["completion_tokens"] == 1).all()
    assert df["session_id"].str.contains("~").any()  # lanes recycle
    assert df.groupby(["session_id", "turn"]).size().max() == 1


def test_config_rules_and_the_submission_verdict(tmp_path):
    # load.agentx unset: not fingerprinted (the defaults' fingerprint, pinned in tests/test_config.py)
    assert from_dict({}, "t").fingerprint() == "fcec604a3988a9e9"
    with pytest.raises(ConfigError, match="load.agentx"):
        from_dict({"load": {"mode": "open", "levels": [1], "agentx": {}}}, "t")
    with pytest.raises(ConfigError, match="load.warmup_s=0"):
        from_dict({"load": {"warmup_s": 0, "agentx": {}}}, "t")
    r = AgentxRules(duration_s=60, idle_gap_cap_s=None)
    assert [o.split("=")[0] for o in r.overrides()] == ["load.agentx.duration_s", "load.agentx.idle_gap_cap_s"]
    ok = agentx_submission(1, 100, AgentxRules(), None, True, None, coverage=(1.0, 0.97))
    assert ok["agentx_submission_valid"] == 1 and ok["context_overflow_rate"] == 0.01
    bad = agentx_submission(2, 100, AgentxRules(), "interrupted", False, "the workload is not an AgentX trace")
    assert bad["agentx_submission_valid"] == 0
    for word in ("context_overflow_rate_exceeded", "run_cancelled", "unsafe_override", "ignore_eos", "not an AgentX"):
        assert word in bad["agentx_submission_reasons"]


def test_virtual_point_reports_submission_valid_beside_benchcamp_checks(tmp_path, monkeypatch):
    """Only the pinned corpus is valid: the committed sample is not (one line says so, no traceback);
    the sample's digest standing in for the pin (monkeypatched: the corpus cannot be downloaded here)
    shows that a copy whose digest matches gets a valid run."""
    import benchcamp.workload.agentx.scenarios as scen
    from benchcamp.workload import ensure_workload
    from benchcamp.workload.agentx.traces import read_agentx

    sample = REPO / "workloads/agentx-sample.json"
    w = read_agentx(sample)
    by_model = {(s.id, r.turn): r.model for s in w.sessions for r in s.requests}
    base = {"workload": {"spec": str(sample), "data": str(tmp_path / "w.parquet")},
            "load": {"levels": [2], "clock": "virtual", "min_requests": 5, "warmup_s": 5.0, "api": "chat",
                     "agentx": {"scenario": "inferencex-agentx-mvp"}}}  # its 1,800 s window; chat, as it sends
    ensure_workload(from_dict(base, "t").workload)  # writes workload.data (its metadata carries the trace digest)
    for extra, valid in (({}, 1), ({"engine": {"max_model_len": 6000}}, 0)):
        cfg = from_dict({**base, **extra}, "t")
        spec = PointSpec.from_load(cfg.load, 2)
        assert spec.duration_s == 1800.0 and spec.agentx["duration_s"] == 1800.0
        res = run_point_virtual(cfg, w, spec, tmp_path / f"p{valid}")
        if valid:
            local = summarize_point(cfg, res)
            assert local.summary["agentx_submission_valid"] == 0
            why = local.summary["agentx_submission_reasons"]
            assert why.startswith("unsafe_override (local trace") and scen.PINNED_CORPUS in why and "\n" not in why
            monkeypatch.setattr(scen, "PINNED_SHA256", frozenset({w.meta["trace_sha256"]}))
        out = summarize_point(cfg, res)
        assert out.summary["agentx_submission_valid"] == valid, out.summary["agentx_submission_reasons"]
        assert out.summary["total_tokens_per_s_per_gpu_span"] > 0
        assert out.summary["agentx_scenario"] == "inferencex-agentx-mvp" and out.summary["agentx_overrides"] == ""
        assert out.summary["agentx_ttft_coverage"] > 0.95
        # the harness's model map: every trace model onto the one served model, the window's requests per model
        assert json.loads(out.summary["agentx_model_map"]) == dict.fromkeys(
            {m for ms in w.meta["agentx_models"].values() for m in ms}, cfg.served_model_name
        )
        recs = read_records(res.records_path)
        in_window = recs[(recs["sent_s"] >= res.window[0]) & (recs["sent_s"] < res.window[1])]
        keys = zip(in_window["session_id"].str.partition("~")[0], in_window["turn"])
        want = pd.Series([by_model[k] for k in keys]).value_counts()
        assert json.loads(out.summary["agentx_model_requests"]) == {k: int(v) for k, v in want.items()}
        assert len(want) == 2 and want.sum() == len(in_window) > 0
    assert "context_overflow_rate_exceeded" in out.summary["agentx_submission_reasons"]
