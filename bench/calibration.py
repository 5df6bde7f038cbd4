"""The simulated engine's predictions beside published real-hardware results.

Each row of PUBLISHED is a figure someone measured on real GPUs with vLLM,
with its source and date and the exact load (model, GPUs, parallel layout,
input/output lengths, number of prompts, concurrency). The script replays the
same load through the simulated engine in virtual time and prints predicted /
published for each figure: a ratio near 1 means the roofline model and its
efficiency factors (benchcamp/profiles/gpus/*.yaml) fit that regime.

In-sample, on purpose: DeepSeek-V3's ``compute_efficiency_scale`` (0.25),
``attention_efficiency_scale`` (0.7) and ``layer_overhead_us`` (190) in
profiles/models/deepseek-v3.yaml were chosen by a grid search minimising the RMS
log ratio over exactly these eight figures (GEMM scale {0.25, 0.33, 0.4, 0.5},
attention scale {0.33, 0.5, 0.7}, overhead {40..220} us; best RMS log error
0.125, i.e. ~13%). The ratios show how well three parameters fit both the
prefill-bound throughputs and the latency-bound TPOTs, not an out-of-sample
validation; new published rows are the way to validate. The Llama profiles
are not fitted (no row for them yet).

These eight rows are part of the fit set of bench/fidelity/replay.py, which replays
the whole published-results corpus (bench/fidelity/corpus/: fit and
validation sets apart) with every metric as published; bench/fidelity/fit.py
re-checked the three DeepSeek factors there together with the engine profile's
(profiles/engines/vllm.yaml) and kept them.

``--measure`` (needs PyTorch with CUDA, e.g. on an H200): times real prefill and
decode steps of a randomly initialised Llama-3.1-8B-shaped transformer (fewer
layers, BF16, plain torch, CUDA graphs for decode), derives the achieved
fraction of peak FLOP/s (prefill) and of peak HBM bandwidth (small-batch
decode), and writes them with the GPU name and software versions to ``--out``
(JSON) as fitted ``compute_efficiency`` / ``memory_efficiency``. Without CUDA
it says so and exits 0 after the comparison. It takes well under 5 minutes.

    uv run python bench/calibration.py [--measure --out calibration.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import tables
from bench.common.paths import command
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.workload.model import Request, Session, Workload

GPUSTACK = ("https://docs.gpustack.ai/latest/performance-lab/deepseek-r1/h200/ "
            "(github.com/gpustack/gpustack docs/performance-lab/deepseek-r1/h200.md)")


@dataclass(frozen=True)
class Published:
    name: str
    model: str            # model name as served
    gpu: str
    tp: int
    prompts: int          # requests in the run
    concurrency: int      # 0 = all at once (vllm bench serve --request-rate inf, no --max-concurrency)
    isl: int              # input tokens per request
    osl: int              # output tokens per request
    total_tok_s: float    # vllm bench "Total Token throughput (tok/s)"
    mean_tpot_ms: float   # vllm bench "Mean TPOT (ms)"
    source: str
    date: str
    notes: str


# vLLM v0.11.0, `vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8` on 8 x H200, measured with
# `vllm bench serve --dataset-name random --random-input-len ISL --random-output-len OSL --num-prompts N`.
PUBLISHED = [
    Published("r1-8xh200-random-2000/100", "deepseek-ai/DeepSeek-R1-0528", "h200", 8, 500, 0, 2000, 100,
              17690.89, 237.02, GPUSTACK, "2025-11", "vLLM 0.11.0 baseline, 500 prompts at once"),
    Published("r1-8xh200-random-4000/200", "deepseek-ai/DeepSeek-R1-0528", "h200", 8, 500, 0, 4000, 200,
              15808.55, 164.23, GPUSTACK, "2025-11", "vLLM 0.11.0 baseline, 500 prompts at once"),
    Published("r1-8xh200-random-32000/100", "deepseek-ai/DeepSeek-R1-0528", "h200", 8, 100, 0, 32000, 100,
              15514.57, 365.79, GPUSTACK, "2025-11", "vLLM 0.11.0 baseline, 100 prompts at once"),
    Published("r1-8xh200-sharegpt-c4", "deepseek-ai/DeepSeek-R1-0528", "h200", 8, 100, 4, 228, 213,
              407.45, 19.36, GPUSTACK, "2025-11",
              "ShareGPT, --max-concurrency 4; simulated with the run's mean lengths (22836/100 in, 21338/100 out)"),
]


def bench_workload(p: Published, block_size: int = 16) -> Workload:
    """``prompts`` independent single-turn sessions with unshared random prompts, all at t=0."""
    blocks = math.ceil(p.isl / block_size)
    sessions = [Session(f"q{i}", [Request(0, tuple(range(i * blocks + 1, (i + 1) * blocks + 1)), p.isl, p.osl, 0.0)])
                for i in range(p.prompts)]
    return Workload(p.name, block_size, 32000, sessions)


def predict(p: Published) -> dict[str, float]:
    # vLLM V1 defaults for the OpenAI server on >= 70 GiB GPUs: max_num_seqs 1024, max_num_batched_tokens 8192.
    s = EngineSettings(model=p.model, gpu=p.gpu, tensor_parallel_size=p.tp, data_parallel_size=1,
                       max_num_seqs=1024, max_num_batched_tokens=8192)
    wl = bench_workload(p)
    if p.concurrency:
        df = simulate(wl, s,
                      SimLoad(mode="closed", level=p.concurrency, warmup_s=0, duration_s=1e6, drain_s=1e6, max_requests=p.prompts))
    else:
        df = simulate(wl, s, SimLoad(mode="trace", level=1.0, warmup_s=0, duration_s=1e6, drain_s=1e6))
    ok = df[df.status == 200]
    duration = ok.done_s.max() - ok.sent_s.min()
    tpot = ((ok.last_token_s - ok.first_token_s) / (ok.completion_tokens - 1)).mean()
    return {"total_tok_s": (ok.prompt_tokens.sum() + ok.completion_tokens.sum()) / duration,
            "mean_tpot_ms": tpot * 1e3, "requests": len(ok)}


def compare() -> list[dict]:
    rows = []
    body = []
    for p in PUBLISHED:
        got = predict(p)
        for metric in ("total_tok_s", "mean_tpot_ms"):
            pub, pred = getattr(p, metric), got[metric]
            rows.append({"scenario": p.name, "metric": metric, "published": pub, "predicted": pred,
                         "ratio": pred / pub})
            body.append([p.name, metric, f"{pub:,.2f}", f"{pred:,.2f}", f"{pred / pub:.2f}"])
    print(tables.render(["scenario", "metric", "published", "predicted", "ratio"], body, widths=[29, 15, 11, 12, 7],
                        align="<<>>>"))
    print("\nsources:")
    for p in PUBLISHED:
        print(f"  {p.name}: {p.source}, {p.date}; {p.notes}")
    print("ratio = predicted / published; throughput > 1 or TPOT < 1 means the model is optimistic.")
    return rows


# -- --measure: fit the efficiency factors on a real GPU ---------------------------------------
def measure(out: Path, device: str = "cuda", smoke: bool = False) -> int:
    """``smoke``: a tiny shape run (1 layer, 256 tokens) that checks the code path on any device."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("--measure: PyTorch is not installed; nothing measured (install torch with CUDA on a GPU machine)")
        return 0
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("--measure: no CUDA device visible to PyTorch; nothing measured")
        return 0
    from benchcamp.profiles import available, load_gpu

    dev = torch.device(device)
    name = torch.cuda.get_device_name(0) if cuda else device
    low = name.lower()
    profile = ("h200" if "h200" in low else "b200" if "b200" in low else "h100-sxm" if "h100" in low
               else "mi300x" if "mi300" in low else None)
    gpu = load_gpu(profile) if profile in available("gpus") else None
    hidden, inter, heads, kv_heads, hd, layers = 4096, 14336, 32, 8, 128, 8   # Llama-3.1-8B shapes, 8 layers
    T, ctx, batches = (256, 128, (1, 2)) if smoke else (8192, 2048, (1, 8, 32))
    if smoke:
        layers = 1
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dt = torch.bfloat16
    torch.manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, device=dev, dtype=dt) * 0.02)

    params = [dict(qkv=w(hidden, (heads + 2 * kv_heads) * hd), o=w(heads * hd, hidden),
                   gu=w(hidden, 2 * inter), d=w(inter, hidden)) for _ in range(layers)]
    n_params = sum(t.numel() for p in params for t in p.values())
    gqa_native = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")

    def layer(x, p, k_cache=None, v_cache=None):
        b, t, _ = x.shape
        qkv = x @ p["qkv"]
        q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
        q = q.view(b, t, heads, hd).transpose(1, 2)
        k = k.view(b, t, kv_heads, hd).transpose(1, 2)
        v = v.view(b, t, kv_heads, hd).transpose(1, 2)
        if k_cache is not None:
            k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        if gqa_native:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=k_cache is None, enable_gqa=True)
        else:  # torch < 2.5: expand the KV heads (extra traffic: a pessimistic bandwidth figure)
            rep = heads // kv_heads
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               is_causal=k_cache is None)
        x = x + a.transpose(1, 2).reshape(b, t, heads * hd) @ p["o"]
        g, u = (x @ p["gu"]).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ p["d"]

    def timed(fn, iters):
        for _ in range(1 if smoke else 3):
            fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        return (time.perf_counter() - t0) / iters

    results: dict = {"gqa_native": gqa_native, "gpu": name, "profile": profile, "torch": torch.__version__, "cuda": torch.version.cuda,
                     "model": f"random Llama-3.1-8B-shaped, {layers} layers, BF16", "date": time.strftime("%Y-%m-%d")}
    with torch.inference_mode():
        # prefill: one 8192-token sequence (compute-bound)
        x = w(1, T, hidden)

        def prefill():
            y = x
            for p in params:
                y = layer(y, p)
            return y
        t_pre = timed(prefill, 1 if smoke else 10)
        flops = 2 * n_params * T + 4 * heads * hd * layers * T * (T + 1) / 2
        results["prefill"] = {"tokens": T, "seconds": t_pre, "tflops": flops / t_pre / 1e12}
        # decode: one token for each of B sequences over a 2048-token cache (memory-bound at small B)
        dec = []
        for B in batches:
            caches = [(w(B, kv_heads, ctx, hd), w(B, kv_heads, ctx, hd)) for _ in range(layers)]
            xin = w(B, 1, hidden)

            def step(xin=xin, caches=caches):  # bound now: `caches` is deleted after each batch
                y = xin
                for p, (kc, vc) in zip(params, caches):
                    y = layer(y, p, kc, vc)
                return y
            try:
                if not cuda:
                    raise RuntimeError("CUDA graphs need CUDA")
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    step()
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    step()
                run = g.replay
            except Exception:  # noqa: BLE001 - eager fallback still measures, with launch overhead
                run = step
            t = timed(run, 2 if smoke else 50)
            nbytes = n_params * 2 + layers * 2 * B * kv_heads * ctx * hd * 2
            dec.append({"batch": B, "context": ctx, "seconds": t, "gbps": nbytes / t / 1e9})
            del caches
        results["decode"] = dec
    best_bw = max(d["gbps"] for d in dec)
    results["achieved"] = {"tflops_bf16": results["prefill"]["tflops"], "hbm_gbps": best_bw}
    if gpu is not None:
        results["fitted"] = {"compute_efficiency": round(results["prefill"]["tflops"] / gpu.bf16_tflops, 3),
                             "memory_efficiency": round(best_bw / gpu.hbm_gbps, 3),
                             "against": f"benchcamp/profiles/gpus/{profile}.yaml peaks "
                                        f"({gpu.bf16_tflops} TFLOP/s BF16, {gpu.hbm_gbps} GB/s)"}
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"written to {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="time real steps with PyTorch + CUDA and fit efficiencies")
    ap.add_argument("--out", default="calibration.json", help="where --measure writes its JSON")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)   # cpu: with --smoke, a code-path check
    ap.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    print("command: " + command())
    compare()
    if args.measure:
        return measure(Path(args.out), args.device, args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
