"""The token budget as vLLM's V1 scheduler spends it under a prefill backlog (benchcamp/sim/engine/scheduler.py's
docstring): decodes first at 1 + K tokens each, prefill chunks after them, long_prefill_token_threshold, and the
whole sequence's KV reserved at admission. The real engine's side of
it is tests/realengine/test_differential.py's backlog phase."""

from __future__ import annotations

import pytest

from benchcamp.config import ConfigError, load_config
from benchcamp.profiles import load_gpu, load_model
from benchcamp.sim.engine.cli_args import parse_serve_args, settings_kwargs
from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.kvcache import KVCache
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel, prefill_pairs
from benchcamp.sim.engine.scheduler import Req, Scheduler
from benchcamp.sim.engine.settings import EngineSettings


def hashes(tag: str, n: int) -> list[int]:
    return [hash((tag, i)) for i in range(n)]


def decoding(sched: Scheduler, n: int, prompt: int = 16) -> None:
    """``n`` requests past their prefill (one step: their prompts fit the budget together)."""
    for i in range(n):
        sched.add(Req(f"d{i}", hashes(f"d{i}", prompt // 16), prompt, 1000, 0.0))
    sched.schedule()
    sched.commit(1.0)
    assert len(sched.decoding) == n


def test_a_speculating_decode_takes_1_plus_k_tokens_and_a_prefill_gets_1_over_a_of_what_is_left():
    # vLLM: num_new_tokens = num_tokens_with_spec - num_computed_tokens = 1 + K for a decode; a simulated step is
    # 1/A of vLLM's, so the prefill gets (budget - decodes x (1 + K)) / A of it
    sched = Scheduler(KVCache(10_000, 16), 64, 2048, spec_tokens=5, acceptance_length=3.5)
    decoding(sched, 8)
    sched.add(Req("long", hashes("long", 400), 6400, 10, 1.0))
    summary = sched.schedule()
    assert summary.decode_seqs == 8
    assert summary.prefill_tokens == int((2048 - 8 * 6) / 3.5)  # 1 + K tokens per speculating decode, not 1 (2040)


def test_without_speculation_a_decode_takes_one_token():
    sched = Scheduler(KVCache(10_000, 16), 64, 2048)
    decoding(sched, 8)
    sched.add(Req("long", hashes("long", 400), 6400, 10, 1.0))
    assert sched.schedule().prefill_tokens == 2048 - 8


def test_long_prefill_token_threshold_caps_chunks_while_others_run_or_wait_not_alone():
    sched = Scheduler(KVCache(10_000, 16), 64, 2048, long_prefill_token_threshold=300)
    for i in range(3):
        sched.add(Req(f"p{i}", hashes(f"p{i}", 100), 1600, 4, 0.0))
    summary = sched.schedule()
    assert summary.prefill_seqs == 3 and summary.prefill_tokens == 900  # three chunks of 300 in one step
    sched.commit(1.0)
    summary = sched.schedule()  # the running prefills' next chunks are capped too
    assert summary.prefill_seqs == 3 and summary.prefill_tokens == 900
    alone = Scheduler(KVCache(10_000, 16), 64, 2048, long_prefill_token_threshold=300)
    alone.add(Req("only", hashes("only", 100), 1600, 4, 0.0))
    assert alone.schedule().prefill_tokens == 1600  # nobody to starve: vLLM lifts the cap


def test_admission_reserves_the_whole_sequence_not_just_its_first_chunk():
    # 20 usable blocks of 16; one 200-token prompt runs (13 blocks): a second 200-token prompt's first chunk
    # (100 tokens, 7 blocks) would fit, its whole prompt (13) does not: vLLM's scheduler_reserve_full_isl waits
    for full_isl, admitted in ((True, 1), (False, 2)):
        sched = Scheduler(KVCache(20, 16), 8, 300, reserve_full_isl=full_isl)
        sched.add(Req("a", hashes("a", 13), 200, 50, 0.0))
        sched.add(Req("b", hashes("b", 13), 200, 50, 0.0))
        sched.schedule()
        assert len(sched.running) == admitted, full_isl


def test_a_mixed_speculative_step_lasts_1_over_a_of_vllms_step_with_a_times_its_prefill():
    """A simulated steps of a decode + prefill batch cost what one vLLM step does: the decodes' verify of K + 1
    positions and the whole chunk vLLM's budget gives the prefill (A x the simulated step's)."""
    gpu, model = load_gpu("h200"), load_model("deepseek-v3")
    spec = PerfModel(gpu, model, tp=8, spec_tokens=3, acceptance_length=2.5)
    real = PerfModel(gpu, model, tp=8, spec_tokens=3, acceptance_length=1.0)  # same drafts, one step = vLLM's

    sim = spec.cost([BatchSummary(32, 32 * 4000, 1, 400, prefill_pairs(400, 20_000), 20_000 + 400)])
    one = real.cost([BatchSummary(32, 32 * 4000, 1, 1000, prefill_pairs(400, 20_000) * 2.5, 20_000 + 400)])
    sim = sim.duration_s
    assert abs(sim * 2.5 - one.duration_s) <= 1e-9 * one.duration_s


def test_the_flags_reach_the_scheduler_and_bad_values_get_one_line():
    """``vllm serve`` flags -> EngineSettings -> the core's scheduler, as deploy passes them to either engine."""
    args = parse_serve_args(
        ["--model", "m", "--long-prefill-token-threshold", "512", "--no-scheduler-reserve-full-isl", "--max-model-len", "4096"]
    ).args
    kw = settings_kwargs(args)
    assert kw["long_prefill_token_threshold"] == 512 and kw["scheduler_reserve_full_isl"] is False
    core = EngineCore(EngineSettings(**{**kw, "gpu": "h100-sxm", "model_profile": "llama-3.1-8b"}))
    assert core.sched.long_prefill_token_threshold == 512 and core.sched.reserve_full_isl is False
    spec = EngineCore(EngineSettings(model="m", gpu="h100-sxm", model_profile="llama-3.1-8b", speculative_tokens=3, acceptance_length=2.5))
    assert (spec.sched.spec_tokens, spec.sched.accept) == (3, 2.5)
    with pytest.raises(ValueError, match="long-prefill-token-threshold"):
        EngineSettings(model="m", gpu="h100-sxm", model_profile="llama-3.1-8b", max_model_len=1024, long_prefill_token_threshold=2048).validate()
    with pytest.raises(ConfigError) as exc:
        load_config(None, {"engine.long_prefill_token_threshold": -1})
    assert "  engine.long_prefill_token_threshold: Input should be greater than or equal to 0 (got -1)" in str(exc.value)


def test_dp_ranks_in_lockstep_scale_a_prefill_when_another_rank_decodes():
    """One step for every rank (MoE DP + EP): rank 0's decodes make it 1/A of vLLM's step, so rank 1's prefill,
    though rank 1 has no decode, gets 1/A of the budget too (PerfModel.cost scales every rank's prefill by A)."""
    from benchcamp.sim.engine.core import Router

    s = EngineSettings(
        model="deepseek-ai/DeepSeek-V3", model_profile="deepseek-v3", gpu="h200", tensor_parallel_size=4,
        data_parallel_size=2, enable_expert_parallel=True, speculative_tokens=3, acceptance_length=2.0,
        max_num_batched_tokens=2048,
    )
    router = Router(s)
    r0, r1 = router.replicas
    r0.sched.add(Req("d", hashes("d", 1), 16, 1000, 0.0))
    router.step(0.0)
    assert len(r0.sched.decoding) == 1
    p = Req("p", hashes("p", 400), 6400, 10, 1.0)
    r1.sched.add(p)
    router.step(1.0)
    assert p.computed == int(2048 / 2.0)  # vLLM's step gives it 2048; the simulated one is half of it
