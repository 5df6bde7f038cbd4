"""Paged KV cache: allocation, prefix hits in tokens, LRU eviction, capacity, hash equivalence."""

from __future__ import annotations

import random

import pytest

from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.hashing import WorkloadHasher, block_hashes_from_tokens, block_hashes_from_workload
from benchcamp.sim.engine.kvcache import KVCache
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.tokens import prompt_tokens

GIB = 1024 ** 3


def chain(prefix: str, n: int, base: list[int] | None = None) -> list[int]:
    """n chained hashes continuing ``base``; different ``prefix`` = different content."""
    out = list(base or [])
    prev = out[-1] if out else 0
    for i in range(n):
        prev = hash((prev, prefix, i))
        out.append(prev)
    return out


def hold(kv: KVCache, hashes: list[int], extra_private: int = 0):
    """Admit a 'request': take its prefix hit, allocate and register the rest. -> (node, hit blocks)."""
    node, k, hit = kv.match(hashes)
    node = kv.acquire(node, k)
    assert kv.allocate(len(hashes) - hit + extra_private)
    node, got = kv.extend(node, hashes[hit:])
    assert got == len(hashes) - hit
    return node, hit


def test_allocation_until_full_and_release():
    kv = KVCache(10, 16)
    assert kv.allocate(6) and kv.used == 6
    assert not kv.allocate(5), "only 4 blocks are left"
    assert kv.allocate(4) and kv.available == 0 and kv.usage == 1.0
    kv.release(kv.root, 10)
    assert kv.free == 10 and kv.used == 0


def test_prefix_hit_and_refcounts():
    kv = KVCache(100, 16)
    a = chain("sys", 8)
    node_a, hit = hold(kv, a)
    assert hit == 0 and kv.cached_blocks == 8
    b = chain("user-b", 3, a[:5])            # shares the first 5 blocks with a
    node_b, hit = hold(kv, b)
    assert hit == 5 and kv.used == 8 + 3
    kv.release(node_a, 0)
    # a's own tail (3 blocks) is now unreferenced; the shared 5 are still held by b
    assert kv.evictable_blocks == 3
    kv.release(node_b, 0)
    assert kv.evictable_blocks == 11 and kv.used == 0
    assert kv.match_prefix(b) == 8 and kv.match_prefix(a) == 8


def test_lru_evicts_only_unreferenced_blocks_oldest_first():
    kv = KVCache(12, 16)
    held = chain("held", 4)
    node_h, _ = hold(kv, held)                 # stays referenced
    old = chain("old", 4)
    node_o, _ = hold(kv, old)
    kv.release(node_o, 0)                      # released first -> least recently used
    new = chain("new", 4)
    node_n, _ = hold(kv, new)
    kv.release(node_n, 0)
    assert kv.free == 0 and kv.evictable_blocks == 8
    assert kv.allocate(3)                      # evicts the tail of "old"
    assert kv.match_prefix(old) == 1 and kv.match_prefix(new) == 4 and kv.match_prefix(held) == 4
    assert kv.allocate(5)                      # the rest of "old", then the tail of "new"
    assert kv.match_prefix(old) == 0 and kv.match_prefix(new) == 0 and kv.match_prefix(held) == 4
    assert not kv.allocate(1), "referenced blocks are never evicted"
    assert kv.evictions == 8


def test_prefix_caching_disabled_never_hits():
    kv = KVCache(50, 16, enable_prefix_caching=False)
    a = chain("x", 5)
    assert kv.allocate(5)
    assert kv.extend(kv.root, a) == (kv.root, 0)
    kv.release(kv.root, 5)
    assert kv.match_prefix(a) == 0


def test_match_equals_linear_scan_under_random_traffic():
    rng = random.Random(7)
    kv = KVCache(60, 16)
    prompts = [chain(f"p{i}", rng.randrange(2, 12), chain("sys", rng.randrange(0, 6))) for i in range(12)]
    live = []
    for _ in range(300):
        if live and (rng.random() < 0.5 or kv.available < 15):
            kv.release(live.pop(rng.randrange(len(live))), 0)
            continue
        p = rng.choice(prompts)
        node, k, hit = kv.match(p)
        linear = 0
        while linear < len(p) and kv.cached(p[linear]):
            linear += 1
        assert hit == linear
        node = kv.acquire(node, k)
        if not kv.allocate(len(p) - hit):
            kv.release(node, 0)
            continue
        node, got = kv.extend(node, p[hit:])
        kv.free += len(p) - hit - got        # duplicates stay private; free them at once here
        live.append(node)
        assert kv.used + kv.available == kv.num_blocks


def test_capacity_math_llama8b_h100():
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", gpu_memory_utilization=0.9)
    core = EngineCore(s)
    weights = (7.50 + 0.525) * 1e9 * 2                 # dense + embedding, BF16
    kv_per_token = 2048 * 32 * 2                        # K+V, 8 heads x 128, 32 layers, BF16
    budget = 79.6 * GIB * 0.9 - weights - 3 * GIB       # 3 GiB activation headroom
    assert core.num_blocks == int(budget / kv_per_token) // 16
    assert kv_per_token == 131072


def test_capacity_math_deepseek_mla_is_replicated_over_tp():
    tp8 = EngineCore(EngineSettings(tensor_parallel_size=8, gpu="h200"))
    assert tp8.perf.kv_bytes_per_token_gpu == 576 * 61 * 2 == 70272
    fp8 = EngineCore(EngineSettings(tensor_parallel_size=8, gpu="h200", kv_cache_dtype="fp8"))
    assert fp8.num_blocks > 1.9 * tp8.num_blocks


def test_model_that_does_not_fit_names_the_fix():
    with pytest.raises(ValueError, match="tensor-parallel-size"):
        EngineCore(EngineSettings(gpu="h100-sxm"))     # 671B FP8 on one 80 GB GPU


@pytest.mark.parametrize("wbs,ebs", [(64, 16), (16, 16), (32, 64), (48, 32)])
def test_workload_hashes_match_token_hashes(wbs, ebs):
    rng = random.Random(wbs * 100 + ebs)
    for _ in range(30):
        blocks = [rng.randrange(40) for _ in range(rng.randrange(1, 6))]
        n = rng.randrange(1, len(blocks) * wbs + 1)
        toks = prompt_tokens(blocks, n, wbs, 5000)
        assert block_hashes_from_workload(blocks, n, wbs, ebs, 5000) == block_hashes_from_tokens(toks, ebs)


@pytest.mark.parametrize("wbs,ebs", [(64, 16), (16, 16), (32, 64), (16, 64), (48, 32)])
def test_fast_keys_have_the_same_equality_structure_as_token_hashes(wbs, ebs):
    """Simulator keys: h_i(a) == h_j(b) exactly when the token hashes agree."""
    rng = random.Random(ebs)
    fast, prompts = WorkloadHasher(wbs, ebs, 5000, exact=False), []
    for _ in range(40):
        base = [0, 1, 2][:rng.randrange(0, 4)]   # a shared "system prompt" of 0-3 blocks
        blocks = base + [rng.randrange(3, 9) for _ in range(rng.randrange(1, 4))]
        n = rng.randrange(1, len(blocks) * wbs + 1)
        prompts.append((fast.hashes(blocks, n), block_hashes_from_workload(blocks, n, wbs, ebs, 5000)))
    for ka, ta in prompts:
        for kb, tb in prompts:
            for i in range(min(len(ka), len(kb))):
                assert (ka[i] == kb[i]) == (ta[i] == tb[i])


@pytest.mark.parametrize("wbs,ebs", [(64, 16), (16, 16), (16, 64)])
def test_fast_keys_of_a_turn_that_extends_the_previous_one_are_those_computed_afresh(wbs, ebs):
    """The simulator reuses the previous turn's keys (one per workload block, one per engine sub-block, or one
    per group of workload blocks): the same keys as without it."""
    h, fresh = WorkloadHasher(wbs, ebs, 5000), WorkloadHasher(wbs, ebs, 5000)
    t1 = h.hashes([5, 6, 7], 3 * wbs - 1)
    t2 = h.hashes([5, 6, 7, 8, 9], 5 * wbs, base=([5, 6, 7], 3 * wbs - 1, t1))
    assert t2 == fresh.hashes([5, 6, 7, 8, 9], 5 * wbs) and len(t2) == 5 * wbs // ebs
    assert t2[: len(t1)] == t1


def test_incremental_hashes_extend_the_previous_turn():
    h = WorkloadHasher(64, 16, 5000, exact=True)
    t1 = h.hashes([5, 6, 7], 150)
    t2 = h.hashes([5, 6, 7, 8], 250, base=([5, 6, 7], 150, t1))
    assert t2 == block_hashes_from_tokens(prompt_tokens([5, 6, 7, 8], 250, 64, 5000), 16)
    other = h.hashes([5, 9], 128, base=([5, 6, 7], 150, t1))  # does not extend: recomputed
    assert other == block_hashes_from_tokens(prompt_tokens([5, 9], 128, 64, 5000), 16)


# -- the CPU tier (--kv-offloading-size) ------------------------------------------
def test_blocks_evicted_from_the_gpu_go_to_the_cpu_tier_and_come_back_on_a_hit():
    kv = KVCache(8, 16, cpu_blocks=8)
    a = chain("a", 6)
    node, _ = hold(kv, a)
    kv.release(node, 0)
    node, _ = hold(kv, chain("b", 5))        # needs 3 of a's 6 blocks: its tail goes to the CPU tier
    assert [kv.cached(h) for h in a] == [True] * 3 + [False] * 3
    assert [kv.in_cpu(h) for h in a] == [False] * 3 + [True] * 3
    assert kv.offloaded == 3 and kv.evictions == 3
    # a lookup continues the GPU match into the CPU tier, up to its first gap
    gpu = kv.match_prefix(a[:3])
    assert gpu == 3 and kv.match_cpu(a, 3) == 3 and kv.match_prefix(a) == 6
    assert kv.match_cpu(a, 3, max_blocks=5) == 2
    kv.take_cpu(a[3:])                          # loaded back: no longer in the CPU tier
    assert not any(kv.in_cpu(h) for h in a) and kv.loaded == 3


def test_cpu_tier_is_lru_and_drops_a_prefix_from_its_end():
    kv = KVCache(4, 16, cpu_blocks=4)
    for tag in ("a", "b", "c"):                  # each evicts the previous one's 4 blocks
        node, _ = hold(kv, chain(tag, 4))
        kv.release(node, 0)
    a, b = chain("a", 4), chain("b", 4)
    # b's blocks pushed all of a's (stored first) out of the full CPU tier
    assert not any(kv.in_cpu(h) for h in a)
    assert all(kv.in_cpu(h) for h in b) and kv.cpu_evictions == 4
    node, _ = hold(kv, chain("d", 2))           # two of c's blocks (its last two) go to the CPU tier
    c = chain("c", 4)
    assert [kv.in_cpu(h) for h in c] == [False, False, True, True]
    assert [kv.in_cpu(h) for h in b] == [True, True, False, False]   # b lost its tail, kept its head
    assert kv.match_cpu(b, 0) == 2


def test_without_prefix_caching_or_size_there_is_no_cpu_tier():
    for kv in (KVCache(4, 16, enable_prefix_caching=False, cpu_blocks=8), KVCache(4, 16)):
        assert kv.cpu_blocks == 0
        assert kv.allocate(4)
        kv.release(kv.root, 4)
        assert kv.allocate(4) and not kv.cpu and kv.offloaded == 0
    with pytest.raises(ValueError, match="negative"):
        KVCache(4, 16, cpu_blocks=-1)


def test_cpu_tier_capacity_follows_kv_offloading_size_per_tp_rank():
    base = {"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "h200", "tensor_parallel_size": 4}
    core = EngineCore(EngineSettings(kv_offloading_size=64, **base))
    per_gpu = core.perf.kv_bytes_per_token_gpu
    # 64 GiB summed over the 4 TP ranks (vLLM's CacheConfig.kv_offloading_size); each holds its shard
    assert core.cpu_blocks == int(64 * GIB / 4 / per_gpu) // 16 and core.kv.cpu_blocks == core.cpu_blocks
    assert EngineCore(EngineSettings(**base)).kv.cpu_blocks == 0
    with pytest.raises(ValueError, match="--kv-offloading-size"):
        EngineSettings(kv_offloading_size=-1, **base).validate()
