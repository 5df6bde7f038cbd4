"""load.agentx.scenario: the harness's two scenarios (benchcamp.workload.agentx.scenarios), their rules in
both clocks (benchcamp.loadgen.agentx, the simulated engine in virtual time) and submission validity as the
harness decides it (benchcamp.metrics). Each rule is checked where it can fail."""

from __future__ import annotations

import numpy as np
import pytest

from benchcamp.config import AgentxRules, from_dict
from benchcamp.loadgen.agentx import AgentxReplay
from benchcamp.metrics import (
    CONTEXT_OVERFLOW,
    agentx_submission,
    context_overflows,
    failure_abort,
    metric_coverage,
    warmup_failures,
)
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.agentx.scenarios import PINNED_CORPUS, corpus_verdict
from benchcamp.workload.model import Request, Session, Workload

SETTINGS = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                          max_num_batched_tokens=2048)
MVP = "inferencex-agentx-mvp"


def rules(name: str = "agentx", **kw) -> dict:
    return AgentxRules(scenario=name, **kw).model_dump()


def chain(n: int = 3, turns: int = 30, think: float = 1.0, prompt: int = 256) -> Workload:
    """Sessions of ``turns`` growing turns (2 fixed prefix blocks shared by all), ``think`` s apart."""
    ss = []
    for i in range(n):
        base = 1000 * (i + 1)
        reqs = [Request(t, (1, 2, *range(base, base + 2 + t)), prompt + 16 * t, 8, think if t else 0.0)
                for t in range(turns)]
        ss.append(Session(f"s{i}", reqs, kind="main", fixed_blocks=2))
    return Workload("chain", 16, 32000, ss)


def test_scenario_defaults_are_the_harness_table():
    # agentx-harness 1.0.12, aiperf/common/scenario/inferencex_agentx_mvp.py (AGENTX is the default scenario)
    a, m = AgentxRules(), AgentxRules(scenario=MVP)
    assert a.scenario == "agentx"
    assert (a.start_min_ratio, a.start_max_ratio, a.duration_s, a.min_duration_s) == (0.25, 0.75, 3600, 900)
    assert (a.warmup_requests_per_lane, a.trace_idle_gap_cap_s, a.failed_request_threshold) == (10, 300, 0.10)
    assert (m.start_min_ratio, m.start_max_ratio, m.duration_s, m.min_duration_s) == (0.0, 1.0, 1800, 900)
    assert (m.warmup_requests_per_lane, m.trace_idle_gap_cap_s, m.failed_request_threshold) == (0, None, None)
    for r in (a, m):
        assert (r.idle_gap_cap_s, r.cache_bust, r.ignore_eos, r.streaming, r.max_input_tokens) == (
            10, True, True, True, None)
        assert (r.min_metric_coverage, r.max_context_overflow_rate, r.primer_max_tokens) == (0.95, 0.01, 0)
        assert r.overrides() == []
    # a config's load.agentx: {} is the harness's default scenario
    assert from_dict({"load": {"agentx": {}}}, "t").load.agentx == a


def test_an_override_makes_the_run_invalid_and_says_which():
    r = AgentxRules(start_min_ratio=0.0, warmup_requests_per_lane=0)
    names = [o.split("=")[0] for o in r.overrides()]
    assert names == ["load.agentx.start_min_ratio", "load.agentx.warmup_requests_per_lane"]
    out = agentx_submission(0, 100, r, None, True, None, coverage=(1.0, 1.0))
    assert out["agentx_submission_valid"] == 0
    assert "unsafe_override (load.agentx.start_min_ratio=0.0 (agentx: 0.25" in out["agentx_submission_reasons"]
    assert out["agentx_overrides"] == "; ".join(r.overrides())
    # the same values are the mvp scenario's own: no override there; a setting the harness locks says so
    assert AgentxRules(scenario=MVP, start_min_ratio=0.0, warmup_requests_per_lane=0).overrides() == []
    assert "locked by the harness" in AgentxRules(cache_bust=False).overrides()[0]
    assert "floor" in AgentxRules(duration_s=600).overrides()[0]
    assert agentx_submission(0, 100, AgentxRules(), None, True, None, coverage=(1.0, 1.0))[
        "agentx_submission_valid"] == 1


def test_start_t_star_is_sampled_on_recorded_time_not_a_turn_index():
    # one 100 s gap before turn 1, then 1 s gaps: 25-75% of the recorded span lies inside that gap, so the
    # first turn at/after t* is turn 1 and the primer is turn 0 whatever the seed (a turn index: 1 to 3)
    s = Session("s0", [Request(t, (1, 2, 10 + t), 48, 4, (0.0, 100.0, 1.0, 1.0, 1.0)[t]) for t in range(5)])
    for seed in range(20):
        ax = AgentxReplay(rules(), [s], 1, seed)
        assert ax.start_turn(0) == 0
    u = [np.random.default_rng([seed, 0xA6E7, 0]).uniform(0.25, 0.75) for seed in range(20)]
    assert {int(x * 5) for x in u} - {0}  # what a turn-index start would have picked
    # the mvp scenario's first profiled turn keeps its recorded delay after t* (not sent at once)
    mvp = AgentxReplay(rules(MVP, start_min_ratio=0.5, start_max_ratio=0.5), [s], 1, 0)
    assert mvp.start_turn(0) == 0 and mvp.requests(s, 0, 0, "s0", 0)[1].think_s == pytest.approx(100 - 51.5)


def test_per_tree_idle_cap():
    s = Session("s0", [Request(0, (1,), 16, 4, 0.0), Request(1, (1, 2), 32, 4, 900.0)])
    assert [r.think_s for r in AgentxReplay(rules(), [s], 0, 0).requests(s, 0)] == [0.0, 300.0]
    assert [r.think_s for r in AgentxReplay(rules(MVP), [s], 0, 0).requests(s, 0)] == [0.0, 900.0]


def test_cache_bust_digest_covers_first_plays_and_differs_by_benchmark_id():
    w = chain(n=2, turns=3)
    s = w.sessions[0]
    a = AgentxReplay(dict(rules(), benchmark_id="run-a"), w.top_level(), 2, 0)
    b = AgentxReplay(dict(rules(), benchmark_id="run-b"), w.top_level(), 2, 0)
    pa, pb = a.requests(s, 0, root="s0"), b.requests(s, 0, root="s0")
    for x, y, o in zip(pa, pb, s.requests):
        assert x.blocks[:2] == y.blocks[:2] == o.blocks[:2]  # the shared tool + system prefix stays shared
        assert not set(x.blocks[2:]) & set(o.blocks) and not set(x.blocks[2:]) & set(y.blocks[2:])
    assert a.tree_mask(0, "s0") != a.tree_mask(0, "s1") != a.tree_mask(1, "s0")
    # in virtual time: a first play's turn 0 finds only the shared prefix cached, as in the harness
    df = simulate(w, SETTINGS,
                  SimLoad(level=2, warmup_s=1.0, duration_s=20.0, drain_s=5.0, seed=0, agentx=dict(rules(warmup_per_lane=False, start_min_ratio=0.0, start_max_ratio=0.0),
                              benchmark_id="x")))
    t0 = df[(df["turn"] == 0) & (df["session_id"] == "s1")]
    assert len(t0) == 1 and int(t0["cached_tokens"].iloc[0]) <= 32


def test_virtual_clock_warmups_open_the_window_after_every_lane():
    w = chain(n=3, turns=60)  # t* at most 75% in: a primer and 10 warm-ups still leave turns to profile
    df = simulate(w, SETTINGS, SimLoad(level=3, warmup_s=1.0, duration_s=60.0, drain_s=10.0, seed=2, agentx=rules()))
    w0 = df.attrs["window"][0]
    warm = df[df["expected_output_tokens"] == 1]
    assert len(warm) == 3 * 10 and (warm["sent_s"] < w0).all()  # 10 extra per lane, all before the window
    assert df.attrs["barrier_s"] == pytest.approx(warm["done_s"].max())  # the barrier: the last lane's last one
    assert w0 >= df.attrs["barrier_s"]
    for sid in ("s0", "s1", "s2"):  # each lane's first profiled turn waited at the barrier
        lane = df[df["session_id"] == sid].sort_values("turn")
        last_warm = lane[lane["expected_output_tokens"] == 1]["turn"].max()
        assert lane[lane["turn"] > last_warm]["sent_s"].min() >= w0
    none = simulate(w, SETTINGS, SimLoad(level=3, warmup_s=1.0, duration_s=60.0, drain_s=10.0, seed=2, agentx=rules(MVP)))
    assert (none["expected_output_tokens"] == 8).all()  # mvp: primers only, at their recorded length


def test_a_failed_primer_aborts_and_failures_past_ten_percent_stop_the_run():
    # every prompt above 700 tokens is refused (max_model_len), so the lanes' primers deep in the sessions fail
    small = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                           max_num_batched_tokens=2048, max_model_len=700)
    w = chain(n=4, turns=40)
    df = simulate(w, small, SimLoad(level=4, warmup_s=1.0, duration_s=120.0, drain_s=10.0, seed=0, agentx=rules()))
    window = df.attrs["window"]
    assert warmup_failures(df, window) > 0
    overflow, n = context_overflows(df, window)
    abort = failure_abort(df, window, 4, 0.10)
    assert overflow > 0 and abort is not None and abort.startswith("failed_request_threshold")
    out = agentx_submission(overflow, n, AgentxRules(), None, True, None, failure=abort,
                            warmup_failed=warmup_failures(df, window))
    for word in ("trajectory_warmup_failed", "failed_request_threshold", "context_overflow_rate_exceeded"):
        assert word in out["agentx_submission_reasons"]
    ok = simulate(w, SETTINGS, SimLoad(level=4, warmup_s=1.0, duration_s=60.0, drain_s=10.0, seed=0, agentx=rules()))
    assert warmup_failures(ok, ok.attrs["window"]) == 0 and failure_abort(ok, ok.attrs["window"], 4, 0.1) is None


def test_failure_abort_waits_for_the_grace_floor():
    import pandas as pd

    # 2 failures among the first 12 answers (16.7%), none after: armed at max(level, 10), it fires at 10
    # answers with level 4 and never with level 40 (2/40 is 5% by the time 40 are in)
    err = [None, "HTTP 500: x"] * 1 + [None] * 8 + ["HTTP 500: x"] + [None] * 29
    r = pd.DataFrame({"sent_s": np.arange(40.0), "scheduled_s": np.arange(40.0), "done_s": np.arange(40.0) + 0.5,
                      "status": [200 if e is None else 500 for e in err], "error": err})
    assert failure_abort(r, (0.0, 100.0), 4, 0.10) == (
        "failed_request_threshold (2 of 11 requests failed by 10.5 s, above 10%)")
    assert failure_abort(r, (0.0, 100.0), 40, 0.10) is None


def test_coverage_rule():
    w = chain(n=2, turns=30)
    df = simulate(w, SETTINGS, SimLoad(level=2, warmup_s=1.0, duration_s=60.0, drain_s=10.0, seed=0, agentx=rules()))
    window = df.attrs["window"]
    full = metric_coverage(df, window, 60.0)
    assert min(full) > 0.95
    half = df[df["sent_s"] < window[0] + 30.0]  # the answers stop half-way through the window
    cov = metric_coverage(half, window, 60.0)
    assert 0.4 < max(cov) < 0.6
    out = agentx_submission(0, len(half), AgentxRules(), None, True, None, coverage=cov)
    assert "insufficient_profile_metric_coverage" in out["agentx_submission_reasons"]


def test_overflow_patterns_are_the_harness_substrings():
    for text in ("This model's maximum context length is 4096 tokens", "CONTEXT_LENGTH_EXCEEDED",
                 '{"error": {"message": "Prompt is too long"}}', "exceeds the Maximum Context"):
        assert CONTEXT_OVERFLOW.search(text)
    for text in ("max_model_len", "too many tokens", "context window full", "exceeds the model"):
        assert not CONTEXT_OVERFLOW.search(text)  # benchcamp's old patterns the harness does not have


def test_only_the_pinned_corpus_is_a_valid_submission(tmp_path):
    assert "not an AgentX trace" in corpus_verdict("generated", "workloads/x.yaml", None)
    meta = {"trace_sha256": "ab" * 32, "agentx": {"traces": 393}}
    why = corpus_verdict("agentx", str(tmp_path / "traces"), meta)
    assert why is not None and "cannot download it here" in why and PINNED_CORPUS in why and "\n" not in why
    snap = tmp_path / "hub/datasets--semianalysisai--cc-traces-weka-062126/snapshots" / ("0" * 40)
    assert corpus_verdict("agentx", str(snap), meta) is None
    assert corpus_verdict("agentx", str(snap), {**meta, "agentx": {"traces": 4}}) is not None


def test_the_run_lines_the_report_and_mlflow_tags_name_the_overrides():
    from types import SimpleNamespace

    from benchcamp.report.render import _points_table
    from benchcamp.results.table import agentx_notes
    from benchcamp.tracking.log import _agentx_tags

    r = AgentxRules(start_min_ratio=0.1)
    summary = {"point": "c2", "level": 2, "valid": True, "reasons": [], **agentx_submission(0, 10, r, None, True, None)}
    line = agentx_notes([SimpleNamespace(label="c2", summary=summary)])
    assert "c2: not a valid submission (agentx): unsafe_override (load.agentx.start_min_ratio=0.1" in line
    assert len(line.splitlines()) == 2  # a header and one line per point
    html = _points_table([summary], None)
    assert "AgentX overrides: load.agentx.start_min_ratio=0.1" in html and "invalid" in html
    tags = _agentx_tags(summary)
    assert tags["benchcamp.agentx_submission_valid"] == "false" and tags["benchcamp.agentx_scenario"] == "agentx"
    assert tags["benchcamp.agentx_overrides"].startswith("load.agentx.start_min_ratio=0.1")
    assert "benchcamp.agentx_model_map" not in tags
    mapped = _agentx_tags(dict(summary, agentx_model_map='{"claude-opus-4-5": "served"}'))
    assert mapped["benchcamp.agentx_model_map"] == '{"claude-opus-4-5": "served"}'
    assert _agentx_tags({"requests": 3}) == {}
