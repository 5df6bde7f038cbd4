"""Virtual-time simulation: determinism, closed-loop concurrency, subagent joins, cache hits, records."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchcamp.commands.common import add_config_args, config_from_args
from benchcamp.results.records import COLUMNS, read_records
from benchcamp.sim.clock.cli import add_arguments, run_from_args
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload, write_workload

SETTINGS = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                          max_num_batched_tokens=2048)


def agentic(n_sessions: int = 12, seed: int = 1, subagents: bool = True) -> Workload:
    """Multi-turn sessions over a shared system prompt; growing context; a few subagents."""
    rng = random.Random(seed)
    bs, system = 16, list(range(1, 21))                 # 320-token shared prefix
    sessions, next_block = [], 1000
    for i in range(n_sessions):
        ctx = system + list(range(next_block, next_block + rng.randrange(5, 30)))
        next_block += 100
        reqs = []
        for turn in range(rng.randrange(2, 6)):
            if turn:
                ctx = ctx + list(range(next_block, next_block + rng.randrange(2, 12)))
                next_block += 20
            plen = len(ctx) * bs - rng.randrange(0, bs)
            reqs.append(Request(turn, tuple(ctx), plen, rng.randrange(8, 80), 0.0 if turn == 0 else rng.uniform(0.1, 2)))
        sessions.append(Session(f"s{i}", reqs))
        if subagents and i % 4 == 0 and len(reqs) > 1:
            for k in range(2):
                sub_ctx = list(reqs[0].blocks) + [next_block + k]
                sessions.append(Session(f"s{i}-sub{k}", [
                    Request(0, tuple(sub_ctx), len(sub_ctx) * bs, rng.randrange(8, 40), 0.2),
                    Request(1, tuple(sub_ctx + [next_block + 10 + k]), (len(sub_ctx) + 1) * bs, 10, 0.5)],
                    parent=f"s{i}", parent_turn=0))
            next_block += 50
    return Workload("test-agentic", bs, 32000, sessions)


def run(wl: Workload, **kw) -> pd.DataFrame:
    args = dict(mode="closed", level=4, warmup_s=2.0, duration_s=20.0, drain_s=30.0, seed=3)
    args.update(kw)
    return simulate(wl, SETTINGS, SimLoad(**args))


def test_identical_inputs_give_identical_records():
    wl = agentic()
    a, b = run(wl), run(wl)
    assert len(a) > 20
    pd.testing.assert_frame_equal(a, b)
    assert a.attrs["server_counters"] == b.attrs["server_counters"]


def test_records_follow_the_schema_and_token_counts():
    df = run(agentic())
    assert list(df.columns) == COLUMNS
    ok = df[df.status == 200]
    assert len(ok) == len(df) and ok.error.isna().all()
    assert (ok.completion_tokens == ok.expected_output_tokens).all()
    assert (ok.prompt_tokens == ok.expected_prompt_tokens).all()
    assert (ok.chunks == ok.completion_tokens).all()            # one chunk per token
    assert (ok.itl_s.map(len) == ok.chunks - 1).all()
    gaps = np.concatenate(ok.itl_s.map(np.asarray).to_list())
    assert (gaps > 0).all()
    # the last token time is the first plus the gaps
    recon = ok.first_token_s + ok.itl_s.map(sum)
    assert np.allclose(recon, ok.last_token_s)
    assert (ok.first_token_s > ok.sent_s).all() and (ok.done_s >= ok.last_token_s).all()
    assert (ok.scheduled_s == ok.sent_s).all()


def test_multi_turn_sessions_hit_the_cache_and_counters_agree():
    df = run(agentic())
    later = df[df.turn > 0]
    assert (later.cached_tokens > 0).all()
    assert (df.cached_tokens <= df.prompt_tokens - 1).all()
    c = df.attrs["server_counters"]
    assert c["prefix_cache_hits_total"] == df.cached_tokens.sum()
    assert c["prefix_cache_queries_total"] == df.prompt_tokens.sum()
    assert c["request_success_total"] == len(df)
    from benchcamp.metrics import server_hit_rate

    assert server_hit_rate(df.attrs["server_delta"]) == pytest.approx(df.cached_tokens.sum() / df.prompt_tokens.sum())


def test_closed_loop_concurrency_is_never_exceeded():
    wl = agentic(n_sessions=6)              # fewer sessions than the run needs: cycling kicks in
    level = 3
    df = run(wl, level=level, duration_s=60.0)
    top = df[df.parent.isna()]
    spans = top.groupby("session_id").agg(start=("sent_s", "min"), end=("done_s", "max"))
    events = sorted([(s, 1) for s in spans.start] + [(e, -1) for e in spans.end], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak == level
    assert any("~" in sid for sid in spans.index), "sessions are reused with a ~n suffix"
    assert df.sent_s.max() < 2.0 + 60.0, "nothing is sent after the stop"


def test_subagents_start_after_the_parent_turn_and_the_parent_waits_for_them():
    wl = agentic()
    df = run(wl, duration_s=120.0)
    by = {(r.session_id, r.turn): r for r in df.itertuples()}
    checked = 0
    for s in wl.sessions:
        if s.parent is None or (s.parent, s.parent_turn) not in by:
            continue
        parent_turn = by[(s.parent, s.parent_turn)]
        kids = df[df.session_id.str.startswith(s.parent + "-sub") & (df.parent == s.parent)]
        assert (kids.sent_s >= parent_turn.done_s).all()
        nxt = by.get((s.parent, s.parent_turn + 1))
        if nxt is not None:
            think = wl.sessions[[x.id for x in wl.sessions].index(s.parent)].requests[s.parent_turn + 1].think_s
            assert nxt.sent_s == pytest.approx(max(parent_turn.done_s, kids.done_s.max()) + think)
            checked += 1
    assert checked >= 2


def test_open_and_trace_modes_run():
    wl = agentic()
    op = run(wl, mode="open", level=0.5)
    assert len(op) > 0 and op.session_id.str.len().gt(0).all()
    tr = run(wl, mode="trace", level=1.0)
    assert set(tr[tr.parent.isna()].session_id) == {s.id for s in wl.top_level()}


def test_more_load_more_throughput_and_later_first_tokens():
    wl = agentic(n_sessions=30)
    lo, hi = run(wl, level=2), run(wl, level=24)
    assert len(hi) > len(lo)
    assert (hi.first_token_s - hi.sent_s).median() > (lo.first_token_s - lo.sent_s).median()


def test_drain_deadline_fails_what_is_still_running():
    wl = Workload("long", 16, 32000, [Session("s0", [Request(0, tuple(range(10)), 150, 100_000 - 200, 0.0)])])
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_model_len=100_000)
    df = simulate(wl, s, SimLoad(mode="closed", level=1, warmup_s=0, duration_s=1, drain_s=1))
    assert list(df.status) == [0] and list(df.error) == ["drain-timeout"]
    assert df.chunks[0] > 0


def test_bad_mode_and_level_are_clear_errors():
    with pytest.raises(ValueError, match="mode"):
        run(agentic(), mode="burst")
    with pytest.raises(ValueError, match="whole number"):
        run(agentic(), level=2.5)


def test_command_line_writes_records(tmp_path, capsys):
    path = tmp_path / "wl.parquet"
    write_workload(agentic(), path)
    out = tmp_path / "records.parquet"
    p = argparse.ArgumentParser()
    add_config_args(p)
    add_arguments(p)
    args = p.parse_args(["--params", "/dev/null", "--workload", str(path), "--level", "3",
                         "--warmup-s", "1", "--duration-s", "10", "--out", str(out),
                         "--set", "engine.model=meta-llama/Llama-3.1-8B-Instruct",
                         "--set", "engine.model_profile=llama-3.1-8b", "--set", "engine.data_parallel_size=2",
                         "--set", "hardware.gpu_count=2"])
    assert run_from_args(args, config_from_args(args)) == 0
    text = capsys.readouterr().out
    assert "tokens/s/GPU" in text and "hit rate" in text
    df = read_records(out)
    assert len(df) > 0 and (df.status == 200).all()


def test_closed_loop_ends_when_no_session_can_start_before_the_stop():
    wl = Workload("slow-start", 16, 32000, [Session(f"s{i}", [Request(0, (i + 1,), 16, 4, 5.0)]) for i in range(3)])
    df = run(wl, level=2, warmup_s=0.0, duration_s=3.0)
    assert len(df) == 0
    df = run(wl, level=2, warmup_s=0.0, duration_s=9.0)    # one round fits; the next would send at ~10 s
    assert len(df) == 2 and (df.sent_s == 5.0).all()


# -- per-request errors and the CPU tier --------------------------------------------
def _mooncake_trace() -> Path:
    """The public Mooncake conversation trace in the shared folder beside the checkout."""
    for d in Path(__file__).resolve().parents:
        p = d / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
        if p.exists():
            return p
    pytest.skip("shared/traces/mooncake/conversation_trace.jsonl not found beside the checkout")


def test_mooncake_trace_slice_runs_end_to_end_with_too_long_requests_failed_alone(tmp_path):
    from benchcamp.workload.mooncake import read_mooncake

    lines = _mooncake_trace().read_text().splitlines()[:300]
    (tmp_path / "head.jsonl").write_text("\n".join(lines) + "\n")
    wl = read_mooncake(tmp_path / "head.jsonl")
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_model_len=16384)
    too_long = {f"l{i + 1:03d}" for i, r in enumerate(wl.sessions) if r.requests[0].prompt_len
                + r.requests[0].output_len > 16384}
    assert 50 < len(too_long) < 150
    df = simulate(wl, s, SimLoad(mode="trace", level=1.0, warmup_s=0.0, duration_s=200.0, drain_s=600.0))
    assert len(df) == 300                                   # every line: none lost to an exception
    failed = df[df.status != 200]
    assert set(failed.session_id) == too_long and (failed.status == 400).all()
    # the server's own messages (benchcamp.sim.engine.openai_format.check_context), as vLLM's: a prompt over the
    # context, or (the client sends min_tokens = max_tokens) an output cut by the context below min_tokens
    assert failed.error.str.match(
        r"HTTP 400: (This model's maximum context length is 16384 tokens|min_tokens must be less than or equal to "
        r"max_tokens=\d+, got \d+\.)").all()
    assert (failed.sent_s == failed.done_s).all() and (failed.chunks == 0).all()
    ok = df[df.status == 200]
    assert (ok.completion_tokens == ok.expected_output_tokens).all() and ok.cached_tokens.sum() > 0
    pd.testing.assert_frame_equal(df, simulate(wl, s, SimLoad(mode="trace", level=1.0, warmup_s=0.0, duration_s=200.0, drain_s=600.0)))  # deterministic, failures included


def test_a_failed_turn_does_not_end_its_session():
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_model_len=4096)
    wl = Workload("w", 16, 32000, [Session("s", [Request(0, tuple(range(300)), 4800, 8, 0.0),
                                                 Request(1, tuple(range(10)), 160, 8, 0.5),
                                                 Request(2, (1,), 0, 8, 0.5)])])
    df = simulate(wl, s, SimLoad(mode="trace", level=1, warmup_s=0.0, duration_s=10.0, drain_s=10.0))
    assert list(df.status) == [400, 200, 400] and list(df.sent_s) == [0.0, 0.5, df.done_s[1] + 0.5]
    assert "You must pass at least one prompt" in df.error[2]


def test_closed_loop_over_sessions_that_are_all_refused_at_once_ends():
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_model_len=4096)
    wl = Workload("w", 16, 32000, [Session(f"s{i}", [Request(0, tuple(range(300)), 4800, 8, 0.0),
                                                     Request(1, tuple(range(310)), 4960, 8, 30.0)])
                                   for i in range(3)])
    df = simulate(wl, s, SimLoad(mode="closed", level=2, warmup_s=0.0, duration_s=10.0, drain_s=10.0))
    # each slot tries every session once at t=0 (all refused, no time passes), then stops
    assert len(df) == 2 * 3 and (df.status == 400).all() and (df.sent_s == 0).all()


def tight(**kw) -> EngineSettings:
    """Llama-3.1-8B on an H100 with ~2000 tokens of KV, so the agentic workload evicts."""
    from benchcamp.sim.engine.core import EngineCore

    perf = EngineCore(EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm")).perf
    used = perf.weight_bytes_gpu / 1024 ** 3 + perf.model.activation_headroom_gib + 2000 * 131072 / 1024 ** 3
    return EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=8,
                          max_num_batched_tokens=2048, gpu_memory_utilization=used / perf.gpu.memory_gib, **kw)


def test_records_and_counters_carry_the_cpu_tier():
    wl = agentic(n_sessions=24)
    off, on = (simulate(wl, tight(kv_offloading_size=size),
                        SimLoad(mode="closed", level=8, warmup_s=2.0, duration_s=60.0, drain_s=60.0)) for size in (0, 1))
    assert off.cpu_cached_tokens.isna().all()               # no CPU tier: not reported
    ok = on[on.status == 200]
    assert ok.cpu_cached_tokens.notna().all() and ok.cpu_cached_tokens.sum() > 0
    assert (ok.cpu_cached_tokens <= ok.cached_tokens).all()  # cached_tokens counts both tiers, as vLLM does
    c = on.attrs["server_counters"]
    assert c["external_prefix_cache_hits_total"] == ok.cpu_cached_tokens.sum()
    assert c["prefix_cache_hits_total"] + c["external_prefix_cache_hits_total"] == ok.cached_tokens.sum()
    assert on.attrs["server_delta"]["vllm:external_prefix_cache_hits"] == ok.cpu_cached_tokens.sum()
    assert ok.cached_tokens.sum() > off[off.status == 200].cached_tokens.sum()
    again = simulate(wl, tight(kv_offloading_size=1),
                     SimLoad(mode="closed", level=8, warmup_s=2.0, duration_s=60.0, drain_s=60.0))
    pd.testing.assert_frame_equal(on, again)                # deterministic with the CPU tier too
