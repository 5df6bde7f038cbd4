"""Fidelity mechanisms outside the GPU step: the front end as one FIFO server, vLLM 0.6 multi-step scheduling."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from benchcamp import profiles
from benchcamp.profiles import load_engine
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine import settings as settings_mod
from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.frontend import FrontEnd, prompt_kind
from benchcamp.sim.engine.scheduler import Req
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

LLAMA = dict(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm")


def burst(n: int, isl: int = 128, osl: int = 8) -> Workload:
    blocks = math.ceil(isl / 16)
    return Workload("b", 16, 32000, [Session(f"q{i}", [Request(0, tuple(range(i * blocks + 1, (i + 1) * blocks + 1)),
                                                               isl, osl, 0.0)]) for i in range(n)])


def run_burst(n: int, **engine_fields) -> pd.DataFrame:
    eng = replace(load_engine("vllm"), **engine_fields)
    original = settings_mod.load_engine
    settings_mod.load_engine = lambda name: eng  # this profile, without touching the shipped files
    try:
        return simulate(burst(n), EngineSettings(**LLAMA),
                        SimLoad(mode="trace", level=1.0, warmup_s=0, duration_s=1e6, drain_s=1e6))
    finally:
        settings_mod.load_engine = original


def test_the_front_end_takes_requests_in_one_at_a_time_and_repeats_exactly():
    eng = replace(load_engine("vllm"), frontend_ms=10, frontend_request_us=1000, frontend_us_per_token=1,
                  frontend_jitter_sigma=0.0)
    fe = FrontEnd(eng, seed=3)
    arrive = [fe.admit(0.0, 1000, f"r{i}") for i in range(100)]
    # each waits for the ones before it: 2 ms of work each, plus the 10 ms that does not queue
    assert arrive == pytest.approx([0.002 * (i + 1) + 0.010 for i in range(100)])
    assert fe.admit(10.0, 1000, "late") == pytest.approx(10.012)  # an idle front end takes it at once
    jittered = replace(eng, frontend_jitter_sigma=0.35)
    a = [FrontEnd(jittered, seed=1).admit(0.0, 0, f"r{i}") for i in range(2000)]
    assert a == [FrontEnd(jittered, seed=1).admit(0.0, 0, f"r{i}") for i in range(2000)]
    assert a != [FrontEnd(jittered, seed=2).admit(0.0, 0, f"r{i}") for i in range(2000)]
    assert np.mean(a) == pytest.approx(0.011, rel=0.05) and np.percentile(a, 99) > 1.5 * np.median(a)


def test_a_step_s_tokens_wait_behind_the_work_queued_before_them():
    eng = replace(load_engine("vllm"), frontend_ms=0, frontend_request_us=1000, frontend_chunk_us=100,
                  frontend_us_per_token=0, frontend_jitter_sigma=0.0, frontend_step_us=0)
    fe = FrontEnd(eng)
    for i in range(50):
        fe.admit(0.0, 100, f"r{i}")                       # 50 ms of intake queued at t = 0
    assert fe.deliver(0.010, 20) == pytest.approx(0.050 + 0.001)  # after the intake, halfway through its 2 ms
    assert fe.deliver(1.0, 20) == pytest.approx(1.001)    # an idle front end streams at once


def _costs(**fields) -> object:
    base = dict(frontend_ms=0, frontend_request_us=1000, frontend_us_per_token=0.5, frontend_text_us_per_token=0.25,
                frontend_chat_us_per_token=0.75, frontend_tokenize_us_per_token=2.0,
                frontend_chat_tokenize_us_per_token=3.0, frontend_step_us=400, frontend_chunk_us=50,
                frontend_jitter_sigma=0.0)
    return replace(load_engine("vllm"), **{**base, **fields})


def test_token_ids_skip_the_tokenizer_and_text_queues_on_the_renderer_thread_after_the_loop():
    eng = _costs()
    ids = FrontEnd(eng, prompt="ids")
    assert ids.admit(0.0, 10_000, "a") == pytest.approx(0.001 + 10_000 * 0.5e-6)  # 6 ms, all on the loop
    text = FrontEnd(eng, prompt="text")
    # loop 1 ms + 2.5 ms, then the renderer thread 20 ms: 23.5 ms
    assert text.admit(0.0, 10_000, "a") == pytest.approx(0.0235)
    # the second request's loop work (3.5 ms) overlaps the first's tokenization; its own queues behind it
    assert text.admit(0.0, 10_000, "b") == pytest.approx(0.0435)
    assert text.free_at == pytest.approx(0.007) and text.render_busy_s == pytest.approx(0.040)
    chat = FrontEnd(eng, prompt="chat")
    assert chat.admit(0.0, 10_000, "a") == pytest.approx(0.001 + 0.0075 + 0.030)
    two = FrontEnd(eng, servers=2, prompt="text")            # two API servers, each its own renderer thread
    assert two.admit(0.0, 10_000, "a") == pytest.approx(0.0235 / 2)


def test_a_streaming_step_costs_the_loop_once_plus_per_chunk_and_a_silent_step_nothing():
    fe = FrontEnd(_costs(), servers=4)
    assert fe.deliver(1.0, 0) == 1.0 and fe.busy_s == 0.0
    # 400 us for the step (every server wakes for it: not shared) + 8 chunks x 50 us / 4 servers
    assert fe.deliver(2.0, 8) == pytest.approx(2.0 + (400e-6 + 8 * 50e-6 / 4) / 2)
    assert fe.busy_s == pytest.approx(500e-6)


def test_the_prompt_kind_is_checked_and_read_from_the_load_point():
    with pytest.raises(ValueError, match="prompt='tokens': use one of ids, text, chat"):
        FrontEnd(_costs(), prompt="tokens")
    assert [prompt_kind("completions"), prompt_kind("completions", "text"), prompt_kind("chat", "text"),
            prompt_kind("chat")] == ["ids", "text", "chat", "chat"]


def test_shipped_profiles_carry_the_measured_front_end_costs_and_the_loader_reads_them(tmp_path, monkeypatch):
    for name in ("vllm", "vllm-cpu", "sglang"):
        e = load_engine(name)
        # measured (bench/frontend_costs.py): an id prompt costs the loop less per token than the tokenizer does
        assert 0 < e.frontend_us_per_token < e.frontend_tokenize_us_per_token, name
        assert e.frontend_chat_tokenize_us_per_token > 0 and e.frontend_step_us > 0, name
    (tmp_path / "engines").mkdir()
    text = (profiles.HERE / "engines" / "vllm.yaml").read_text().replace("name: vllm", "name: vllm-mine")
    (tmp_path / "engines" / "vllm-mine.yaml").write_text(text + "frontend_step_us_typo: 1\n")
    monkeypatch.setenv(profiles.PROFILE_PATH_ENV, str(tmp_path))
    load_engine.cache_clear()
    try:
        with pytest.raises(profiles.ProfileError, match=r"unknown fields \['frontend_step_us_typo'\]"):
            load_engine("vllm-mine")
    finally:
        load_engine.cache_clear()


def test_a_text_prompt_reaches_the_engine_after_its_tokenization_a_token_id_prompt_without():
    eng = _costs(frontend_request_us=0, frontend_step_us=0, frontend_chunk_us=0)
    original = settings_mod.load_engine
    settings_mod.load_engine = lambda name: eng  # this profile, without touching the shipped files
    try:
        first = {}
        for kind in ("ids", "text", "chat"):
            df = simulate(burst(4, isl=4096), EngineSettings(**LLAMA),
                          SimLoad(mode="trace", level=1.0, warmup_s=0, duration_s=1e6, drain_s=1e6, prompt=kind))
            first[kind] = (df.first_token_s - df.sent_s).min()  # the first request finds an idle engine
    finally:
        settings_mod.load_engine = original
    # the same engine time; the front end's: ids 0.5 us a token, text 0.25 + 2, chat 0.75 + 3
    assert first["text"] - first["ids"] == pytest.approx(4096 * 1.75e-6, rel=0.01)
    assert first["chat"] - first["ids"] == pytest.approx(4096 * 3.25e-6, rel=0.01)


def test_burst_ttft_rises_with_the_burst_size_through_the_front_end():
    costly = dict(frontend_request_us=2000, frontend_chunk_us=50, frontend_jitter_sigma=0.0)
    small, big = run_burst(100, **costly), run_burst(1000, **costly)
    ttft_small = (small.first_token_s - small.sent_s)
    ttft_big = (big.first_token_s - big.sent_s)
    # no first token reaches a client before the front end has taken in the whole burst (1000 x 2 ms)
    assert ttft_big.min() >= 2.0 and ttft_small.min() >= 0.2
    free = run_burst(1000, frontend_request_us=0, frontend_chunk_us=0, frontend_jitter_sigma=0.0)
    assert (free.first_token_s - free.sent_s).min() < 0.5    # without front-end costs the first prefills show at once
    assert (big.status == 200).all() and len(big) == 1000


def test_multi_step_scheduling_admits_new_requests_only_every_n_steps():
    def admitted_at(n_steps: int) -> int:
        core = EngineCore(EngineSettings(**LLAMA, num_scheduler_steps=n_steps))
        core.add_request("a", [1, 2], 32, 100, 0.0)
        t, step = 0.0, 0
        while True:
            step += 1
            if step == 3:                                      # arrives while "a" decodes
                core.add_request("b", [7, 8], 32, 100, t)
            res = core.step(t, emit=False)
            t = res.end_s
            if step >= 3 and "b" not in [r.id for r in core.sched.waiting]:
                return step

    assert admitted_at(1) == 3                               # vLLM V1: the next step
    assert admitted_at(4) == 5                               # the batch started at step 1 runs steps 1-4
    assert admitted_at(10) == 11


def test_num_scheduler_steps_below_one_is_a_clear_error():
    with pytest.raises(ValueError, match="--num-scheduler-steps 0"):
        EngineSettings(**LLAMA, num_scheduler_steps=0).validate()


def test_an_idle_multi_step_engine_admits_at_once():
    core = EngineCore(EngineSettings(**LLAMA, num_scheduler_steps=10))
    core.sched.add(Req("a", [1], 16, 4, 0.0))
    core.step(0.0, emit=False)
    assert not core.sched.waiting


def test_a_data_parallel_engine_has_one_api_server_per_rank_as_vllm_defaults():
    """vLLM's serve defaults --api-server-count to the DP size (internal load balancing); one FIFO per server."""
    from benchcamp.sim.clock.simulate import SimLoad, SimRun, Simulation

    def front(dp: int) -> FrontEnd:
        s = EngineSettings(**LLAMA, data_parallel_size=dp)
        return Simulation(burst(2), s, SimLoad(mode="trace", level=1.0, warmup_s=0, duration_s=1.0, drain_s=1.0, point="t"),
                          SimRun()).front

    one, four = front(1), front(4)
    assert four.request_s == pytest.approx(one.request_s / 4) and four.chunk_s == pytest.approx(one.chunk_s / 4)
