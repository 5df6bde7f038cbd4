"""The simulated KV connector in the engine core (benchcamp.sim.engine.kv_connector): a decode instance's prompt
whose whole blocks a prefill stored is admitted with them as cached, minus what its own prefix cache holds, and
the admitting step pays for pulling them over the link (modelled time, not wall time)."""

from __future__ import annotations

import pytest

from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.hashing import block_hashes_from_tokens
from benchcamp.sim.engine.settings import EngineSettings

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _core(**kw) -> EngineCore:
    return EngineCore(EngineSettings(model=MODEL, gpu="h200", kv_connector="ExampleConnector", **kw))


def _first(core: EngineCore, prompt: list[int], external: int) -> tuple[float, int]:
    core.add_request("r", block_hashes_from_tokens(prompt, 16), len(prompt), 2, 0.0, external_tokens=external)
    res = core.step(0.0)
    return res.duration_s, dict(res.first)["r"]


def test_external_blocks_count_as_cached_and_cost_the_link():
    prompt = list(range(1000, 1600))
    lat_us, gbps = 40.0, 25.0
    plain, cached0 = _first(_core(kv_link_gbps=gbps, kv_link_latency_us=lat_us), prompt, 0)
    core = _core(kv_link_gbps=gbps, kv_link_latency_us=lat_us)
    pulled, cached = _first(core, prompt, 592)
    assert (cached0, cached) == (0, 592)
    c = core.counters()
    assert c["external_prefix_cache_hits_total"] == c["external_kv_transfer_tokens_total"] == 592
    assert c["external_prefix_cache_queries_total"] == 600
    # the step computes 8 prompt tokens instead of 600, and pays latency + 592 tokens of KV over the link
    link = lat_us * 1e-6 + 592 * core.perf.kv_bytes_per_token_gpu / (gbps * 1e9)
    assert pulled < plain
    cost_only = _core(kv_link_gbps=1e9, kv_link_latency_us=0.0)
    free_pull, _ = _first(cost_only, prompt, 592)
    assert pulled - free_pull == pytest.approx(link, rel=1e-3)


def test_what_the_local_prefix_cache_holds_is_not_pulled_again():
    core = _core()
    prompt = list(range(1000, 1600))
    core.add_request("a", block_hashes_from_tokens(prompt[:320], 16), 320, 2, 0.0)
    while core.has_work():
        core.step(0.0)
    _, cached = _first(core, prompt, 592)
    c = core.counters()
    assert cached == 592 and c["prefix_cache_hits_total"] == 320  # the 20 blocks of the earlier 320-token prompt
    assert c["external_prefix_cache_hits_total"] == 592 - 320


def test_a_transfer_paid_before_arrival_is_cached_at_admission_and_not_charged_again():
    """The topology simulation's decode (NIXL) and the HTTP server's ExampleConnector take one path: the connector
    holds the whole 600-token prompt, the scheduler computes its last token only and caches its 37 full blocks as
    it admits it; only who pays for the transfer differs (the Deployment's link before arrival, or this step)."""
    prompt = list(range(1000, 1600))
    h = block_hashes_from_tokens(prompt, 16)
    costs = {}
    for paid in (True, False):
        core = EngineCore(EngineSettings(model=MODEL, gpu="h200", kv_link_latency_us=40.0))
        core.add_request("r", h, len(prompt), 2, 0.0, external_tokens=len(prompt), transfer_paid=paid)
        summary = core.sched.schedule()
        assert (summary.prefill_seqs, summary.prefill_tokens) == (1, 1)  # vLLM leaves one token to compute
        assert len(h) == 37 and all(core.kv.cached(x) for x in h)  # before the step runs
        costs[paid] = core.load_s()
        core.sched.commit(1.0)
        assert core.sched.requests["r"].cached_tokens == 599
    assert costs[True] == 0.0
    assert costs[False] == pytest.approx(40e-6 + 599 * core.transfer_s_per_token)
