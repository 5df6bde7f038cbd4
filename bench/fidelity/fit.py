"""Grid search of profile factors on the FIT set only (validation points are refused).

Each trial overrides a few profile fields (model, engine or GPU), replays the
fit-set points it names (bench/common/fidelity.py's replay) and scores them by the
median |log(simulated / published)| over their published metrics: robust to the
few points no mechanism of the model explains (DeepSeek-R1's 1000-prompt bursts,
whose first tokens all arrive together ~18 s late), which an RMS would chase. The best trials
are printed; copying a value into a profile is a deliberate, reviewed edit,
with the search that chose it named in the profile's comment.

    uv run python bench/fidelity/fit.py deepseek      # or: gpt-oss, vllm-frontend, ...
    uv run python bench/fidelity/fit.py sglang-launch --outside15   # score: share outside +-15%
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import replace

from bench.common import fidelity
from benchcamp.sim.engine import settings as settings_mod

# Point-id prefixes shared by several searches: every Qwen3 vLLM fit point; every vLLM fit point (the gpustack
# small-model and GLM prefixes also hold their SGLang points, which "engine:vllm" overrides leave as they are)
QWEN3_VLLM = ("q14-h100-vllm", "q32-h100-vllm", "q14-a100-vllm", "q32-a100-vllm", "q235-a100-vllm")
EVERY_VLLM = ("r1-h200-vllm", "oss120-h100-vllm", "q235-a100-vllm", "l8-h100-vllm", "q14-", "q32-", "oss20-", "glmair-")
INTAKE_GRID = {("engine", "frontend_request_us"): [2000, 5000, 10000, 15000, 20000, 30000]}

# search name -> (point id prefixes, {(kind, field): candidate values}[, metrics scored: default all])
SEARCHES = {
    "deepseek": (("r1-h200-vllm",), {("model", "compute_efficiency_scale"): [0.2, 0.25],
                                     ("model", "layer_overhead_us"): [160, 190, 220],
                                     ("engine", "eager_layer_overhead_scale"): [1.0, 2.0, 3.0, 5.0, 8.0]}),
    "deepseek-recheck": (("r1-h200-vllm", "r1-b200-", "v31-mi300x-"),
                         {("model", "compute_efficiency_scale"): [0.2, 0.25, 0.3],
                          ("model", "layer_overhead_us"): [160, 190, 220]}),
    "gpt-oss": (("oss120-h100-vllm",), {("model", "compute_efficiency_scale"): [0.25, 0.35, 0.5],
                                        ("model", "activation_headroom_gib"): [4, 6, 9],
                                        ("model", "kv_elems_per_token_layer"): [512, 1024]}),
    "gpt-oss-gemm": (("oss120-h100-vllm",), {("model", "compute_efficiency_scale"): [0.3, 0.35, 0.4, 0.45, 0.5]}),
    "gpt-oss-joint": (("oss120-h100-vllm",), {("model", "compute_efficiency_scale"): [0.35, 0.4, 0.45],
                                              ("model", "activation_headroom_gib"): [4, 5, 6, 7]}),
    # CPU per sequence: every fit point (R1 without, gpt-oss with and without --async-scheduling)
    "seq-cpu": (("r1-h200-vllm", "oss120-h100-vllm", "q235-a100-vllm", "l8-h100-vllm"),
                {("engine", "seq_overhead_us"): [0, 25, 50, 75, 100, 125, 150]}),
    "seq-cpu-bursts": (("r1-h200-vllm-tp8-sharegpt", "oss120-h100-vllm-tp1-sharegpt", "oss120-h100-vllm-tp1-async-sharegpt",
                        "oss120-h100-vllm-tp2-async-sharegpt", "oss120-h100-vllm-tp4-async-sharegpt"),
                       {("engine", "seq_overhead_us"): [0, 20, 30, 40, 50, 75, 100, 125, 150, 200]}),
    # KV capacity in the KV-limited regime: gpt-oss on one H100 (bursts of long prompts)
    "gpt-oss-kv": (("oss120-h100-vllm-tp1-random", "oss120-h100-vllm-tp1-sharegpt", "oss120-h100-vllm-tp1-async"),
                   {("model", "activation_headroom_gib"): [4, 6, 8],
                    ("model", "kv_elems_per_token_layer"): [512, 1024]}),
    "gpt-oss-wide": (("oss120-h100-vllm",), {("model", "compute_efficiency_scale"): [0.35, 0.4, 0.45, 0.5, 0.6],
                                             ("model", "activation_headroom_gib"): [3, 4, 5, 6],
                                             ("model", "kv_elems_per_token_layer"): [512, 1024]}),
    # with the window-aware KV (512), more headroom still leaves room for the 32K-token prompts
    "gpt-oss-swa": (("oss120-h100-vllm",), {("model", "compute_efficiency_scale"): [0.4, 0.45],
                                            ("model", "activation_headroom_gib"): [6, 7, 8, 8.5, 9, 9.5],
                                            ("model", "kv_elems_per_token_layer"): [512]}),
    # gpt-oss's sliding-window layers read at most 128 tokens of KV per decode token: only the 18 full-attention
    # layers read the whole context (512 elements per token per layer averaged over 36), whatever vLLM allocates
    "gpt-oss-kv-read": (("oss120-h100-vllm",), {("model", "kv_read_elems_per_token_layer"): [512, 1024]}),
    # Qwen3-235B-A22B BF16 (the fit set's BF16 MoE: gpustack on 8 x A100, vLLM): grouped BF16 expert GEMMs
    "qwen3-bf16": (("q235-a100-vllm-tp8-",), {("model", "compute_efficiency_scale"): [0.25, 0.35, 0.5, 0.7],
                                            ("model", "layer_overhead_us"): [40, 60, 100]}),
    # B200 (the fit set's B200 points: SGLang cookbook DeepSeek-R1 on 8 x B200): the GPU generation's per-layer
    # overhead (launch and sync gaps) and SGLang's cost of running prefill batches without CUDA graphs
    "b200": (("r1-b200-",), {("gpu", "layer_overhead_scale"): [0.2, 0.3, 0.4, 0.55, 0.7, 1.0],
                             ("engine", "eager_layer_overhead_scale"): [1.0, 2.0, 3.0, 5.0, 8.0]}),
    # SGLang runs prefill (extend) batches without CUDA graphs: every SGLang fit point
    "sglang-eager": (("r1-b200-", "v31-mi300x-", "r1-h200-sglang", "oss120-h100-sglang", "q235-a100-sglang"),
                     {("engine", "eager_layer_overhead_scale"): [1.0, 2.0, 3.0, 5.0, 8.0, 12.0]}),
    # SGLang's first-token cost split into the front end's fixed latency and the CPU launches of its graph-less
    # prefill batches (per layer, so it grows with the model's depth and MoE; ROCm's launches cost more)
    "sglang-launch": (("r1-b200-", "v31-mi300x-", "r1-h200-sglang", "oss120-h100-sglang", "q235-a100-sglang"),
                      {("engine", "frontend_ms"): [15, 30, 45, 60],
                       ("engine", "eager_layer_overhead_scale"): [4, 6, 8, 10, 12, 16],
                       ("gpu:mi300x", "launch_overhead_scale"): [1.0, 1.5, 2.0]}),
    # MI300X (SGLang cookbook DeepSeek-V3.1 on 8 x MI300X): per-layer overhead and achieved HBM bandwidth
    "mi300x": (("v31-mi300x-",), {("gpu", "layer_overhead_scale"): [1.0, 1.25, 1.5, 1.75, 2.0, 3.0],
                                  ("gpu", "memory_efficiency"): [0.35, 0.4, 0.45, 0.55, 0.65]}),
    # What vLLM keeps outside the KV cache (activation peak, CUDA graphs, NCCL buffers) for Qwen3-235B: it sets how
    # many sequences run at once in the fit set's A100 bursts
    "qwen3-headroom": (("q235-a100-vllm-tp8-",), {("model", "activation_headroom_gib"): [2, 4, 6, 8, 10]}),
    "qwen3-bf16-joint": (("q235-a100-vllm-tp8-",), {("model", "activation_headroom_gib"): [4, 5, 6, 7, 8],
                                                  ("model", "compute_efficiency_scale"): [0.25, 0.3, 0.35, 0.4, 0.5]}),
    "qwen3-fp8-headroom": (("q235-a100-vllm-fp8-",), {("model", "activation_headroom_gib"): [2, 4, 6, 8, 10]}),
    "qwen3-fp8-joint": (("q235-a100-vllm-fp8-",), {("model", "activation_headroom_gib"): [6, 8],
                                                 ("model", "compute_efficiency_scale"): [0.15, 0.2, 0.25, 0.3, 0.35]}),
    # The front end as one FIFO server (benchcamp/sim/engine/frontend.py): every vLLM fit point, bursts and c=4 alike
    "frontend-queue": (("r1-h200-vllm", "oss120-h100-vllm"),
                       {("engine", "frontend_ms"): [10, 15],
                        ("engine", "frontend_request_us"): [0, 1000, 2000, 4000],
                        ("engine", "frontend_chunk_us"): [0, 100]}),
    # the same over every vLLM fit point, Qwen3-235B on A100 included (added to the fit set after that search)
    "frontend-queue-all": (("r1-h200-vllm", "oss120-h100-vllm", "q235-a100-vllm", "l8-h100-vllm"),
                           {("engine", "frontend_request_us"): [1000, 2000],
                            ("engine", "frontend_chunk_us"): [25, 50, 75, 100]}),
    # the same scored on TTFT alone (what the front end shapes; the search above is flat over all metrics)
    "frontend-queue-ttft": (("r1-h200-vllm", "oss120-h100-vllm"),
                            {("engine", "frontend_ms"): [10, 15],
                             ("engine", "frontend_request_us"): [1000, 2000, 3000, 4000],
                             ("engine", "frontend_chunk_us"): [0, 50, 100, 200]},
                            ("ttft_",)),
    # SGLang's fixed first-token cost: every SGLang fit point (the low-load ones are DeepSeek-R1 on B200 and
    # DeepSeek-V3.1 on MI300X), scored on TTFT, which it shapes
    "sglang-frontend": (("r1-b200-sglang", "v31-mi300x-sglang", "r1-h200-sglang", "oss120-h100-sglang", "q235-a100-sglang"),
                        {("engine", "frontend_ms"): [15, 30, 45, 60, 80, 100, 130]}, ("ttft_",)),
    # TTFT's spread (the front end's seeded log-normal jitter): every closed-loop fit point, scored on TTFT
    "frontend-jitter": (("r1-b200-", "v31-mi300x-", "r1-h200-vllm-tp8-sharegpt-c4", "oss120-h100-vllm-tp1-sharegpt-c4",
                         "oss120-h100-vllm-tp2-async-sharegpt-c4"),
                        {("engine", "frontend_jitter_sigma"): [0.2, 0.35, 0.5, 0.7, 0.9, 1.2]}, ("ttft_p99", "ttft_mean")),
    # The front end's serial work per request, by model (chat template and tokenizer differ): each fitted model's
    # vLLM fit points alone
    "intake-r1": (("r1-h200-vllm",), INTAKE_GRID),
    "intake-oss": (("oss120-h100-vllm",), INTAKE_GRID),
    "intake-q235": (("q235-a100-vllm",), INTAKE_GRID),
    "intake-qwen3": (QWEN3_VLLM, INTAKE_GRID),
    "intake-qwen3-ttft": (QWEN3_VLLM, INTAKE_GRID, ("ttft_",)),
    "intake-oss-all": (("oss20-h100-vllm", "oss20-a100-vllm", "oss120-h100-vllm"), INTAKE_GRID),
    # The front end's work per streamed token (detokenize, SSE chunk), every vLLM fit point: with ~1000 streams it
    # could throttle intake in bursts (the search is flat: it does not)
    "frontend-chunk": (("r1-h200-vllm", "oss120-h100-vllm", "q235-a100-vllm"),
                       {("engine", "frontend_chunk_us"): [50, 100, 200, 300, 500]}),
    # Dense BF16 on Hopper vs Ampere (gpustack Qwen3-14B / 32B on one H100, one A100): the GPU's achieved share of
    # its tensor peak, with the gpt-oss kernels' scale (both sizes: same MXFP4 kernels) re-fitted alongside, since
    # that model scale multiplies the GPU's figure
    "h100-gemm": (("q14-h100-vllm", "q32-h100-vllm", "oss20-h100-vllm", "oss120-h100-vllm"),
                  {("gpu:h100-sxm", "compute_efficiency"): [0.35, 0.4, 0.45, 0.55],
                   ("model:gpt-oss-20b,gpt-oss-120b", "compute_efficiency_scale"): [0.4, 0.5, 0.6, 0.7]}),
    "h100-gemm-fine": (("q14-h100-vllm", "q32-h100-vllm", "oss20-h100-vllm", "oss120-h100-vllm", "oss20-a100-vllm"),
                       {("gpu:h100-sxm", "compute_efficiency"): [0.33, 0.35, 0.38, 0.4],
                        ("model:gpt-oss-20b,gpt-oss-120b", "compute_efficiency_scale"): [0.6, 0.7, 0.8, 0.9]}),
    # A BF16 MoE on both GPUs (gpustack GLM-4.5-Air on 4 x A100 / 4 x H100): its expert-GEMM scale, and whether
    # H100's efficiency fitted on dense and MXFP4 models holds for it
    "glm-h100": (("glmair-", "q14-h100-vllm", "q32-h100-vllm", "oss20-h100-vllm", "oss120-h100-vllm"),
                 {("gpu:h100-sxm", "compute_efficiency"): [0.35, 0.4, 0.45],
                  ("model:glm-4.5-air", "compute_efficiency_scale"): [0.3, 0.4, 0.5, 0.6]}),
    # H200 is H100's die with more HBM: does DeepSeek's fit (H200, B200, MI300X; one shared model scale) prefer
    # H100's re-fitted share of peak?
    "h200-recheck": (("r1-h200-", "r1-b200-", "v31-mi300x-"),
                     {("gpu:h200", "compute_efficiency"): [0.35, 0.45, 0.55],
                      ("model:deepseek-v3", "compute_efficiency_scale"): [0.2, 0.25, 0.3, 0.4]}),
    # Dense FP8 checkpoints (gpustack Qwen3-14B / 32B-FP8: SGLang on one H100, vLLM weight-only on one A100)
    "qwen3-dense-fp8": (("q14-a100-vllm-fp8", "q32-a100-vllm-fp8", "q14-h100-sglang-fp8", "q32-h100-sglang-fp8"),
                        {("model:qwen3-14b-fp8,qwen3-32b-fp8", "compute_efficiency_scale"): [0.4, 0.5, 0.6, 0.7, 0.85, 1.0]}),
    # B200's share of its tensor peak (an assumption so far): the fit set's B200 points, DeepSeek-R1 FP8 under SGLang
    "b200-gemm": (("r1-b200-",), {("gpu:b200", "compute_efficiency"): [0.3, 0.35, 0.4, 0.5, 0.6]}),
    "a100-gemm": (("q14-a100-vllm", "q32-a100-vllm", "oss20-a100-vllm", "q235-a100-vllm"),
                  {("gpu:a100-sxm", "compute_efficiency"): [0.45, 0.55, 0.65],
                   ("model:gpt-oss-20b", "compute_efficiency_scale"): [0.3, 0.4, 0.5, 0.7]}),
    # Engine-level factors re-checked over every vLLM fit point once the gpustack small-model and GLM pages joined
    "seq-cpu-all": (EVERY_VLLM, {("engine:vllm", "seq_overhead_us"): [25, 50, 100, 150]}),
    "frontend-all": (EVERY_VLLM, {("engine:vllm", "frontend_request_us"): [1000, 2000, 4000],
                                  ("engine:vllm", "frontend_chunk_us"): [25, 50, 100]}),
    "vllm-frontend-ms": (("r1-h200-vllm-tp8-sharegpt-c4", "oss120-h100-vllm-tp1-sharegpt-c4",
                          "oss120-h100-vllm-tp2-async-sharegpt-c4"), {("engine", "frontend_ms"): [5, 10, 15, 20, 30]}),
    "vllm-frontend": (("r1-h200-vllm-tp8-sharegpt-c4", "oss120-h100-vllm-tp1-sharegpt-c4",
                       "oss120-h100-vllm-tp2-async-sharegpt-c4"),
                      {("engine", "frontend_ms"): [5, 10, 15, 20],
                       ("engine", "frontend_us_per_token"): [0, 10, 20, 40],
                       ("engine", "frontend_jitter_sigma"): [0.2, 0.35, 0.5]}),
}

_OVERRIDE: dict[tuple[str, str], float] = {}
_load_model, _load_engine, _load_gpu = settings_mod.load_model, settings_mod.load_engine, settings_mod.load_gpu


def _patched(kind, loader):
    def load(name):
        prof = loader(name)
        # "gpu:mi300x": one GPU; "model:gpt-oss-20b,gpt-oss-120b": those models
        fields = {f: v for (k, f), v in _OVERRIDE.items()
                  if k == kind or (k.startswith(f"{kind}:") and name in k[len(kind) + 1:].split(","))}
        return replace(prof, **fields) if fields else prof
    return load


settings_mod.load_model = _patched("model", _load_model)
settings_mod.load_engine = _patched("engine", _load_engine)
settings_mod.load_gpu = _patched("gpu", _load_gpu)


def score(points: list[dict], override: dict, metrics: tuple[str, ...] = ("",), outside15: bool = False
          ) -> tuple[float, int]:
    _OVERRIDE.clear()
    _OVERRIDE.update(override)
    try:
        results = fidelity.run_all(points, jobs=2)
    except ValueError as exc:  # e.g. the weights no longer fit: not a candidate
        print(f"  rejected: {exc}")
        return math.inf, 0
    rows = fidelity.rows_of(points, results)
    logs = sorted(abs(math.log(r["ratio"])) for r in rows if r["ratio"] > 0 and r["metric"].startswith(metrics))
    if outside15:  # the share of values outside +-15%: the accuracy target itself, blind to how far
        return sum(not 1 / 1.15 <= math.exp(x) <= 1.15 for x in logs) / len(logs), len(logs)
    return logs[len(logs) // 2], len(logs)


def main() -> int:
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in SEARCHES or sys.argv[2:] not in ([], ["--outside15"]):
        print(f"usage: fit.py {{{'|'.join(SEARCHES)}}} [--outside15]", file=sys.stderr)
        return 2
    outside15 = sys.argv[2:] == ["--outside15"]
    label = "outside +-15%" if outside15 else "median |log err|"
    prefixes, grid, *scored = SEARCHES[sys.argv[1]]
    metrics = scored[0] if scored else ("",)
    _, points = fidelity.load_corpus()
    points = [p for p in points if p["id"].startswith(prefixes)]
    if any(p["set"] != "fit" for p in points):
        print("error: a search may only use fit-set points", file=sys.stderr)
        return 2
    keys = list(grid)
    trials = []
    for values in itertools.product(*(grid[k] for k in keys)):
        override = dict(zip(keys, values))
        rms, n = score(points, override, metrics, outside15)
        trials.append((rms, values))
        print(f"{label} {rms:.3f} ({n} values)  " + "  ".join(f"{k[1]}={v}" for k, v in zip(keys, values)), flush=True)
    print("\nbest:")
    for rms, values in sorted(trials)[:5]:
        print(f"  {rms:.3f}  " + "  ".join(f"{k[0]}.{k[1]}={v}" for k, v in zip(keys, values)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
