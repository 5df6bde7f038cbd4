"""The real CPU engine's simulator profiles (gpus/cpu, models/tiny-llama, engines/vllm-cpu) and user profile folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchcamp import profiles
from benchcamp.profiles import ProfileError, available, load_gpu, load_model
from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.settings import EngineSettings

# What `vllm serve` (vllm-cpu 0.32.0) logged for the tiny Llama with VLLM_CPU_KVCACHE_SPACE=1 and --block-size 32
# (2026-12-01): "CPU KV cache size: 524,288 tokens".
REAL_KV_TOKENS = 524_288
TINY = Path.home() / ".cache/benchcamp/real-engine/vllm-cpu/models/tiny-llama/config.json"


def cpu_settings(**kw) -> EngineSettings:
    base = dict(model="benchcamp/tiny-llama", gpu="cpu", engine_profile="vllm-cpu", tensor_parallel_size=1,
                data_parallel_size=1, block_size=32, max_num_seqs=16, max_num_batched_tokens=2048)
    return EngineSettings(**{**base, **kw}).validate()


@pytest.mark.parametrize("utilization", [0.9, 0.5, 1.0])
def test_cpu_kv_blocks_match_the_real_cpu_engine(utilization):
    core = EngineCore(cpu_settings(gpu_memory_utilization=utilization))
    assert core.num_blocks * 32 == REAL_KV_TOKENS  # 16,384 blocks, whatever --gpu-memory-utilization says
    assert core.max_model_len == 8192


def test_tiny_llama_is_found_by_its_served_name_and_matches_its_config():
    assert cpu_settings().profile_name == "tiny-llama"
    m = load_model("tiny-llama")
    head_dim = 64
    assert m.kv_elems_per_token_layer * m.layers * 2 == 2048  # B/token: 1 GiB / 2048 = 524,288 tokens
    if TINY.exists():  # after `make real-engine`
        c = json.loads(TINY.read_text())
        assert (m.hidden, m.layers, m.vocab_size, m.max_model_len, m.kv_heads) == (
            c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["max_position_embeddings"],
            c["num_key_value_heads"])
        assert c["head_dim"] == head_dim and not c["tie_word_embeddings"]
        h, i, kv = c["hidden_size"], c["intermediate_size"], c["num_key_value_heads"] * head_dim
        per_layer = h * (2 * h + 2 * kv) + 3 * h * i
        assert m.dense_params_b * 1e9 == pytest.approx(per_layer * c["num_hidden_layers"] + c["vocab_size"] * h)


def test_user_profile_folder_is_searched_first(tmp_path, monkeypatch):
    (tmp_path / "gpus").mkdir()
    text = (profiles.HERE / "gpus" / "cpu.yaml").read_text().replace("name: cpu", "name: cpu-mine")
    (tmp_path / "gpus" / "cpu-mine.yaml").write_text(text.replace("step_overhead_ms: 3.0", "step_overhead_ms: 7.5"))
    monkeypatch.setenv(profiles.PROFILE_PATH_ENV, str(tmp_path))
    load_gpu.cache_clear()
    try:
        assert "cpu-mine" in available("gpus") and "h200" in available("gpus")
        assert load_gpu("cpu-mine").step_overhead_ms == 7.5
        with pytest.raises(ProfileError, match="cpu-mine"):
            monkeypatch.delenv(profiles.PROFILE_PATH_ENV)
            load_gpu.cache_clear()
            load_gpu("cpu-mine")
    finally:
        load_gpu.cache_clear()
