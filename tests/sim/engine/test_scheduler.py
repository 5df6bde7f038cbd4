"""Continuous batching: limits, chunked prefill, FCFS, preemption by recompute."""

from __future__ import annotations

import pytest

from benchcamp.sim.engine.core import EngineCore, Router
from benchcamp.sim.engine.kvcache import KVCache
from benchcamp.sim.engine.openai_format import OpenAIError
from benchcamp.sim.engine.scheduler import DECODE, Req, Scheduler
from benchcamp.sim.engine.settings import EngineSettings

LLAMA = dict(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm")


def hashes(tag: str, n: int) -> list[int]:
    return [hash((tag, i)) for i in range(n)]


def blocks_in_use(sched: Scheduler) -> int:
    """Blocks in use recomputed from the requests (between steps): their private blocks (for a
    decoder, implicit in its token count) plus the referenced cached blocks (shared: counted once).
    Also checks that each request's cached path is as long as it believes."""
    bs, kv, private = sched.kv.block_size, sched.kv, 0
    for r in sched.running.values():
        path, n = 0, r.node
        while n is not kv.root:
            path += len(n.hashes)
            n = n.parent
        assert path == r.held
        if r.state == DECODE:
            private += -(-(r.computed + sched.steps - r.base_step) // bs) - r.held
        else:
            private += r.private
    return private + kv.cached_blocks - kv.evictable_blocks


def drive(sched: Scheduler, max_steps: int = 10_000):
    """Step a bare scheduler (1 s per step); yields (step summary, first, finished) per step,
    checking that the KV cache's count of blocks in use matches what the requests hold."""
    t = 0.0
    for _ in range(max_steps):
        if not sched.has_work():
            assert sched.kv.used == 0, "blocks leaked"
            return
        summary = sched.schedule()
        t += 1.0
        _, first, finished, _ = sched.commit(t)
        assert sched.kv.used == blocks_in_use(sched)
        yield summary, first, finished
    raise AssertionError("did not finish")


def test_max_num_seqs_and_token_budget_are_respected():
    sched = Scheduler(KVCache(10_000, 16), max_num_seqs=4, max_num_batched_tokens=300)
    for i in range(10):
        sched.add(Req(f"r{i}", hashes(f"p{i}", 10), 170, 20, 0.0))
    done = []
    for summary, _, finished in drive(sched):
        assert len(sched.running) <= 4
        assert summary.tokens <= 300
        assert summary.decode_seqs + summary.prefill_seqs <= 4
        done += finished
    assert sorted(d[0] for d in done) == sorted(f"r{i}" for i in range(10))
    assert all(d[3] == 20 for d in done)


def test_chunked_prefill_takes_ceil_prompt_over_budget_steps():
    sched = Scheduler(KVCache(10_000, 16), max_num_seqs=8, max_num_batched_tokens=256)
    sched.add(Req("long", [], 1000, 3, 0.0))
    chunks = []
    for step, (summary, first, _) in enumerate(drive(sched), start=1):
        chunks.append(summary.prefill_tokens)
        if first:
            assert step == 4                      # ceil(1000 / 256)
    assert chunks == [256, 256, 256, 232, 0, 0]   # then 2 decode steps for tokens 2 and 3


def test_fcfs_first_tokens_in_arrival_order():
    sched = Scheduler(KVCache(10_000, 16), max_num_seqs=1, max_num_batched_tokens=512)
    for i in range(5):
        sched.add(Req(f"r{i}", [], 100, 5, float(i)))
    firsts = [rid for _, first, _ in drive(sched) for rid, _ in first]
    assert firsts == [f"r{i}" for i in range(5)]


def test_decode_runs_alongside_a_chunked_prefill():
    sched = Scheduler(KVCache(10_000, 16), max_num_seqs=8, max_num_batched_tokens=64)
    sched.add(Req("short", [], 10, 50, 0.0))
    sched.add(Req("long", [], 600, 5, 0.0))
    steps = list(drive(sched))
    # while "long" is prefilling in 63-token chunks, "short" decodes one token per step
    assert steps[1][0].decode_seqs == 1 and steps[1][0].prefill_tokens == 63


def test_preemption_by_recompute_when_kv_runs_out_and_everyone_completes():
    # 30 blocks x 16 tokens: 4 requests of 100 prompt + 200 output tokens cannot all fit.
    sched = Scheduler(KVCache(30, 16), max_num_seqs=8, max_num_batched_tokens=2048)
    for i in range(4):
        sched.add(Req(f"r{i}", hashes(f"p{i}", 6), 100, 200, 0.0))
    done = {}
    for _, _, finished in drive(sched):
        for rid, _prompt, _cached, completion, cpu_cached in finished:
            assert cpu_cached is None                   # no CPU tier
            done[rid] = completion
        assert sched.kv.used <= 30
    assert sched.preemptions > 0
    assert done == {f"r{i}": 200 for i in range(4)}
    assert sched.generation_tokens == 800


def test_preempted_request_keeps_its_emitted_token_times_in_order():
    core = EngineCore(EngineSettings(**LLAMA))
    core.sched = Scheduler(KVCache(30, 16), 8, 2048)
    core.kv = core.sched.kv
    core.keep_timelines = True
    for i in range(4):
        core.add_request(f"r{i}", hashes(f"p{i}", 6), 100, 200, 0.0)
    t, lines = 0.0, {}
    while core.has_work():
        res = core.step(t)
        t = res.end_s
        lines.update(dict(res.timelines))
    assert core.sched.preemptions > 0
    for times in lines.values():
        assert len(times) == 200 and (times[1:] > times[:-1]).all()


def test_second_request_hits_the_prefix_cache_in_tokens():
    core = EngineCore(EngineSettings(**LLAMA))
    shared = hashes("system", 40)                    # 640 tokens of shared prefix
    core.add_request("a", shared + hashes("a", 10), 50 * 16 + 7, 4, 0.0)
    t = 0.0
    while core.has_work():
        t = core.step(t).end_s
    core.add_request("b", shared + hashes("b", 10), 50 * 16 + 7, 4, t)
    first = []
    while core.has_work():
        res = core.step(t)
        t = res.end_s
        first += res.first
    assert first == [("b", 640)]
    c = core.counters()
    assert c["prefix_cache_queries_total"] == 2 * (50 * 16 + 7)
    assert c["prefix_cache_hits_total"] == 640
    assert c["request_success_total"] == 2 and c["generation_tokens_total"] == 8


def test_full_prompt_hit_still_recomputes_the_last_token():
    core = EngineCore(EngineSettings(**LLAMA))
    h = hashes("p", 8)
    for rid in ("a", "b"):
        core.add_request(rid, h, 128, 2, 0.0)
        t = 0.0
        while core.has_work():
            res = core.step(t)
            t = res.end_s
            if res.first:
                cached = res.first[0][1]
    assert cached == 112                              # 7 of 8 blocks: the last token is computed


def test_request_longer_than_max_model_len_is_rejected_with_vllm_message():
    core = EngineCore(EngineSettings(max_model_len=4096, **LLAMA))
    with pytest.raises(OpenAIError, match="maximum context length is 4096") as e:
        core.add_request("x", [], 4100, 200, 0.0)
    assert e.value.status == 400 and e.value.param == "input_tokens"
    assert core.check(4000, 200) == 96             # prompt + max_tokens over the context: the output is cut


def test_num_gpu_blocks_override_sizes_the_kv_cache_with_vllms_null_block():
    from benchcamp.sim.engine.cli_args import parse_serve_args, settings_kwargs

    args = parse_serve_args(["m", "--num-gpu-blocks-override", "64", "--block-size", "32"]).args
    assert settings_kwargs(args)["num_gpu_blocks_override"] == 64
    core = EngineCore(EngineSettings(num_gpu_blocks_override=64, block_size=32, max_model_len=2016, **LLAMA))
    assert core.num_blocks == 64 and core.kv.num_blocks == 63   # block 0 is vLLM's null block
    with pytest.raises(ValueError, match=r"exceeds the KV cache of one rank \(2016 tokens\)"):
        EngineCore(EngineSettings(num_gpu_blocks_override=64, block_size=32, max_model_len=2048, **LLAMA))


def test_abort_frees_blocks():
    core = EngineCore(EngineSettings(**LLAMA))
    core.add_request("x", [], 5000, 100, 0.0)
    core.step(0.0)
    assert core.kv.used > 0
    assert core.abort("x") and not core.has_work()
    assert core.kv.used == 0
    assert not core.abort("x")


def test_router_balances_load_and_keeps_prefix_affinity_within_the_slack():
    r = Router(EngineSettings(data_parallel_size=4, **LLAMA))
    sys_prompt = hashes("sys", 20)
    r.add_request("a", sys_prompt, 20 * 16 + 5, 2, 0.0)             # all idle, nothing cached: rank 0
    t = 0.0
    while r.has_work():
        t = r.step(t).end_s
    assert r.replicas[0].kv.match_prefix(sys_prompt) == 20
    r.add_request("x1", hashes("x1", 3), 60, 2, t)                  # no prefix anywhere: least loaded, rank 0
    r.add_request("x2", hashes("x2", 3), 60, 2, t)                  # rank 0 now scores 4: rank 1 is lower
    assert r.where["x1"] is r.replicas[0] and r.where["x2"] is r.replicas[1]
    r.add_request("d", sys_prompt + hashes("d", 2), 22 * 16, 2, t)  # rank 0 within the slack: follows its prefix
    assert r.where["d"] is r.replicas[0]
    r.add_request("e", sys_prompt + hashes("e", 2), 22 * 16, 2, t)  # rank 0 now too busy: least loaded idle rank
    assert r.where["e"] is r.replicas[2]


def test_settings_validation_messages_name_the_flag():
    with pytest.raises(ValueError, match="max-num-batched-tokens"):
        EngineSettings(max_num_seqs=512, max_num_batched_tokens=256, **LLAMA).validate()
    with pytest.raises(ValueError, match="num-gpus"):
        EngineSettings(tensor_parallel_size=2, num_gpus=8, **LLAMA).validate()


def test_random_traffic_with_shared_prefixes_and_preemption_completes_without_leaks():
    import random

    rng = random.Random(11)
    sched = Scheduler(KVCache(120, 16), max_num_seqs=16, max_num_batched_tokens=256)
    want = {}
    t = 0.0
    for i in range(60):
        # block contents: a shared system prompt of 0-12 blocks, then the session's own blocks
        content = [("sys", k) for k in range(rng.randrange(0, 13))]
        content += [(f"own{i % 7}", k) for k in range(rng.randrange(0, 30))]  # some repeat exactly
        h, prev = [], 0
        for c in content:                                    # chained, as real block hashes are
            prev = hash((prev, c))
            h.append(prev)
        prompt = len(h) * 16 + rng.randrange(1, 16)
        want[f"r{i}"] = rng.randrange(1, 120)
        sched.add(Req(f"r{i}", h, prompt, want[f"r{i}"], t))
        for _ in range(rng.randrange(0, 4)):
            if sched.has_work():
                sched.schedule()
                t += 1
                sched.commit(t)
    got = {}
    for _, _, finished in drive(sched):
        got.update({rid: completion for rid, _, _, completion, _ in finished})
    assert sched.preemptions > 0
    assert sched.kv.used == 0 and sched.kv.free + sched.kv.evictable_blocks == 120
    assert sched.finished_requests == 60
    assert sched.generation_tokens == sum(want.values())


# -- the CPU tier ----------------------------------------------------------------
def small_core() -> EngineCore:
    """Llama-3.1-8B on one H100 with ~0.5 GiB of KV (~256 blocks of 16) and a 0.25 GiB CPU tier (128 blocks)."""
    perf = EngineCore(EngineSettings(**LLAMA)).perf
    used = perf.weight_bytes_gpu / 1024 ** 3 + perf.model.activation_headroom_gib + 0.5
    return EngineCore(EngineSettings(gpu_memory_utilization=used / perf.gpu.memory_gib, kv_offloading_size=0.25,
                                     **LLAMA))


def run_alone(core: EngineCore, rid: str, h: list[int], prompt: int, t: float = 0.0):
    """Serve one request on an idle core; -> (its admission step's result, its finished tuple, end time)."""
    core.add_request(rid, h, prompt, 2, t)
    first_step, done = None, None
    while core.has_work():
        res = core.step(t)
        t = res.end_s
        first_step = first_step or res
        done = done or next((f for f in res.finished if f[0] == rid), None)
    return first_step, done, t


def test_a_cpu_tier_hit_costs_the_host_to_gpu_transfer_in_its_step():
    x, other = hashes("x", 125), hashes("y", 188)        # 2000-token prefix; 3000 tokens of something else
    extended = x + hashes("x+", 12)                         # the prefix + 200 tokens
    with_eviction, gpu_only = small_core(), small_core()
    assert 200 < with_eviction.num_blocks < 125 + 188 and with_eviction.cpu_blocks == 128
    for core, others in ((with_eviction, [other]), (gpu_only, [])):
        _, _, t = run_alone(core, "x", x, 2000)
        for o in others:                                    # evicts x's tail from the GPU into the CPU tier
            _, _, t = run_alone(core, "o", o, 3000, t)
    assert with_eviction.kv.offloaded > 0 and gpu_only.kv.offloaded == 0
    a, fa, _ = run_alone(with_eviction, "x2", extended, 2200, t)
    b, fb, _ = run_alone(gpu_only, "x2", extended, 2200, t)
    # the same hit either way (usage.cached_tokens counts both tiers, as vLLM counts connector hits) ...
    assert fa[2] == fb[2] == 2000 and fb[4] == 0
    loaded = fa[4]
    assert loaded > 0 and loaded % 16 == 0                  # ... part of it from the CPU tier
    assert with_eviction.kv.hits == 2000 - loaded and with_eviction.kv.cpu_hits == loaded   # GPU, CPU tier
    # ... and the step that admits it is longer by exactly the transfer over the host link
    per_token = with_eviction.perf.kv_bytes_per_token_gpu / (with_eviction.perf.gpu.host_link_gbps * 1e9)
    assert with_eviction.perf.gpu.host_link_gbps == 64
    assert a.duration_s - b.duration_s == pytest.approx(loaded * per_token, rel=1e-9)
    assert a.duration_s > b.duration_s


def test_a_prepaid_connector_transfer_is_one_shot_after_preemption():
    # "b"'s 200-token prompt came over a prefill/decode link (NIXL): admitted with 199 tokens computed and its 12 full
    # blocks cached; 30 blocks cannot hold both requests' outputs, so "b" (the tail) is preempted and then recomputes
    # (NIXL triggers one transfer per request) from whatever of its blocks is still cached
    sched = Scheduler(KVCache(30, 16), max_num_seqs=8, max_num_batched_tokens=2048)
    a = Req("a", hashes("a", 6), 100, 200, 0.0)
    b = Req("b", hashes("b", 12), 200, 200, 0.0)
    b.ext_tokens, b.ext_prepaid = 200, True
    sched.add(a)
    sched.add(b)
    first, done = {}, {}
    for summary, f, finished in drive(sched):  # drive checks the blocks each request holds, step by step
        if not first:
            assert summary.prefill_tokens == 100 + 1
            assert all(sched.kv.cached(x) for x in b.hashes)
        first.update(f)
        done.update({rid: completion for rid, _p, _c, completion, _cpu in finished})
        assert sched.transferred_tokens == 0  # paid before arrival: never in a step's load
    assert first["b"] == 199
    assert b.preemptions > 0 and b.ext_tokens == 0
    assert done == {"a": 200, "b": 200}
