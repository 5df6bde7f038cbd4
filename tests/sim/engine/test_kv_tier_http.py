"""The CPU KV tier and refused requests over real loopback HTTP, against virtual time.

A request the server refuses gets, in virtual time, a failed record with the
status and error text the real client records from the real server; the CPU
tier shows in the server's usage (``cached_tokens`` counts both tiers, as vLLM
counts connector hits, plus benchcamp's ``benchcamp_cpu_cached_tokens``) and in
/metrics under vLLM's external prefix-cache names.
"""

from __future__ import annotations

import asyncio

from benchcamp.loadgen.body import completions_body
from benchcamp.loadgen.http_stream import Pool
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.cli_args import parse_serve_args, settings_kwargs
from benchcamp.sim.engine.core import EngineCore
from benchcamp.sim.engine.prom import parse_text
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _send_all(url: str, bodies: list[bytes]) -> list:
    async def go():
        pool = Pool(url)
        try:
            return [await pool.request("/v1/completions", f"r{i}", b, 30.0) for i, b in enumerate(bodies)]
        finally:
            pool.close()
    return asyncio.run(go())


def test_refused_requests_fail_alike_in_virtual_time_and_over_http(start_server, eh):
    flags = eh.base_args("--max-model-len", "4096")
    srv = start_server(*flags, wait=False)
    # (prompt tokens, output tokens): too long a prompt; prompt + max_tokens too long (sent as min_tokens too,
    # which the output cut by the context is below); no output; no prompt
    cases = [(4800, 8), (4000, 200), (100, 0), (0, 8)]
    wl = Workload("refused", 16, 32000, [Session(f"s{i}", [Request(0, tuple(range(1000 * i, 1000 * i + 300)), p, o)],
                                                 arrival_s=float(i)) for i, (p, o) in enumerate(cases)])
    settings = EngineSettings(**settings_kwargs(parse_serve_args(flags).args))
    df = simulate(wl, settings, SimLoad(mode="trace", level=1.0, warmup_s=0.0, duration_s=10.0, drain_s=10.0))
    srv.wait_listening()
    outs = _send_all(srv.url, [completions_body(MODEL, s.requests[0].blocks, s.requests[0].prompt_len,
                                                s.requests[0].output_len, 16, 32000) for s in wl.sessions])
    assert len(df) == len(cases)
    for s, out in zip(wl.sessions, outs):
        rec = df[df.session_id == s.id].iloc[0]
        assert out.status == 400, out.error
        assert (rec.status, rec.error) == (out.status, out.error)
    assert "maximum context length is 4096" in df.error[0] and "min_tokens must be less than" in df.error[1]
    assert "max_tokens must be at least 1" in df.error[2] and "You must pass at least one prompt" in df.error[3]


def test_usage_and_metrics_carry_the_cpu_tier(start_server, eh):
    perf = EngineCore(EngineSettings(model=MODEL, gpu="h200")).perf
    util = (perf.weight_bytes_gpu / 1024 ** 3 + perf.model.activation_headroom_gib + 0.5) / perf.gpu.memory_gib
    common = ("--gpu-memory-utilization", f"{util:.6f}", "--enable-prompt-tokens-details")
    on = start_server(*eh.base_args(*common, "--kv-offloading-size", "0.25", "--kv-offloading-backend", "native"))
    off = start_server(*eh.base_args(*common))
    x, other = tuple(range(125)), tuple(range(1000, 1188))    # a 2000-token prefix; 3000 other tokens
    bodies = [completions_body(MODEL, x, 2000, 2, 16, 32000), completions_body(MODEL, other, 3000, 2, 16, 32000),
              completions_body(MODEL, x + tuple(range(5000, 5013)), 2200, 2, 16, 32000)]
    got = {name: _send_all(srv.url, bodies) for name, srv in (("on", on), ("off", off))}
    assert all(o.status == 200 and o.error is None for outs in got.values() for o in outs)
    details = got["on"][2].usage["prompt_tokens_details"]
    cpu = details["benchcamp_cpu_cached_tokens"]
    assert details["cached_tokens"] == 2000 and 0 < cpu < 2000     # the tail of x came back from the CPU tier
    assert "benchcamp_cpu_cached_tokens" not in got["off"][2].usage["prompt_tokens_details"]
    assert got["off"][2].usage["prompt_tokens_details"]["cached_tokens"] < 2000   # evicted, recomputed
    status, text = eh.http_get(on.url + "/metrics")
    assert status == 200
    m = parse_text(text.decode())
    lab = f'{{engine="0",model_name="{MODEL}"}}'
    assert m[f"vllm:external_prefix_cache_hits_total{lab}"] == cpu
    assert m[f"vllm:prefix_cache_hits_total{lab}"] == 2000 - cpu          # the GPU tier's part only
    assert m[f"vllm:external_prefix_cache_queries_total{lab}"] == 2000 + 3000 + 2200 - (2000 - cpu)
