"""The DeepSeek-V4-Flash profile adds up to its model card and config, and the perf model uses
its FP4 experts and its compressed KV (stored vs read)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchcamp.profiles import load_gpu, load_model, model_profile_for
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel


def test_parameters_add_up_to_the_model_card():
    m = load_model("deepseek-v4-flash")
    assert m.weight_params / 1e9 == pytest.approx(284, rel=0.01)  # 284B total
    active = m.dense_params_b + m.experts_per_token * m.expert_params_m * m.moe_layers / 1e3
    assert active == pytest.approx(13, rel=0.03)  # 13B activated
    # 2 window-only + 21 CSA (ratio 4, indexer) + 20 HCA (ratio 128) layers
    assert m.kv_elems_per_token_layer * m.layers == 21 * (512 // 4 + 128 // 4) + 20 * 512 // 128
    assert model_profile_for("deepseek-ai/DeepSeek-V4-Flash") == "deepseek-v4-flash"
    # V4.1-Flash is another architecture (vLLM recipe): its own profile
    assert model_profile_for("deepseek-ai/DeepSeek-V4.1-Flash") == "deepseek-v4.1-flash"


def test_fp4_experts_and_compressed_kv_change_memory_and_decode():
    gpu, v4 = load_gpu("h200"), load_model("deepseek-v4-flash")
    pm = PerfModel(gpu, v4, tp=1, dp=8, expert_parallel=True)
    fp8 = PerfModel(gpu, replace(v4, expert_weight_bytes=0.0), tp=1, dp=8, expert_parallel=True)
    # experts (97% of the weights) at 0.53 instead of 1 byte per parameter
    assert pm.weight_bytes_gpu == pytest.approx(0.61 * fp8.weight_bytes_gpu, rel=0.02)
    assert pm.kv_read_bytes_per_token_gpu < pm.kv_bytes_per_token_gpu / 4  # reads << stores
    v3 = PerfModel(gpu, load_model("deepseek-v3"), tp=1, dp=8, expert_parallel=True)
    assert pm.kv_bytes_per_token < v3.kv_bytes_per_token / 9  # ~10% of V3's KV per token
    long_decode = [BatchSummary(decode_seqs=64, decode_ctx=64 * 100_000)] * 8
    assert pm.step_time(long_decode) < v3.step_time(long_decode)


def test_v41_flash_profile_matches_vllms_recipe():
    """vLLM's DeepSeek-V4.1-Flash recipe: 552B backbone + 196.6B Engram, 16B active per output token, 8B per
    prompt token (prefill runs the encoder half), 890 bytes of global KV per token, DSpark and no MTP."""
    m = load_model("deepseek-v4.1-flash")
    backbone = m.dense_params_b + 1.0 + m.routed_params / 1e9  # + the input embedding
    assert backbone == pytest.approx(552, rel=0.01)
    assert (m.weight_params / 1e9 - backbone) == pytest.approx(196.6, rel=0.01)  # the Engram tables
    active = m.dense_params_b + m.experts_per_token * m.expert_params_m * m.moe_layers / 1e3
    assert active == pytest.approx(16, rel=0.07)
    assert active * m.prefill_layer_fraction == pytest.approx(8, rel=0.07)
    assert m.kv_elems_per_token_layer * m.layers == pytest.approx(890)
    assert m.speculative_methods == ("dspark",) and m.mtp_layers == 0
    # prefill tokens cost half of what V4.1's decode tokens do per token
    gpu = load_gpu("b300")
    pm = PerfModel(gpu, m, tp=4, dp=1)
    full = PerfModel(gpu, replace(m, prefill_layer_fraction=1.0), tp=4, dp=1)
    chunk = [BatchSummary(prefill_seqs=1, prefill_tokens=8192, prefill_pairs=8192 * 4096.5, prefill_ctx=8192)]
    assert pm.cost(chunk).compute_s == pytest.approx(full.cost(chunk).compute_s / 2, rel=0.01)
