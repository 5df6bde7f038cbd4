"""The published-results corpus (bench/fidelity/corpus/*.yaml) and its replay on the virtual clock: what
``bench.fidelity.replay`` reports and ``bench.fidelity.fit`` searches over.

Each point is a serving result published for real GPUs (source, engine, model, GPUs, parallel layout, the
benchmark's workload and load, the figures as published). ``workload`` rebuilds its requests (fixed-length
"random" prompts as `vllm bench serve --dataset-name random` makes them, SGLang's sampling, or ShareGPT-like
log-normal lengths with the published means), ``run_point`` replays them through the simulated engine with the
same load (all prompts at once, closed-loop ``--max-concurrency``, or Poisson ``--request-rate``) and computes the
same figures as the benchmark client.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.common.paths import ROOT
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.profiles import available, load_gpu
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.workload.model import Request, Session, Workload

CORPUS = ROOT / "bench/fidelity/corpus"
BLOCK = 16
# ShareGPT-like lengths: log-normal around the published means. The spread is an assumption (ShareGPT
# conversations span a few to a few thousand tokens; a coefficient of variation near 1), not a published figure.
SHAREGPT_SIGMA = 0.9
TOLERANCES = (0.15, 0.30, 0.50)
METRICS = ("total_tok_s", "output_tok_s", "ttft_mean_ms", "ttft_median_ms", "ttft_p99_ms",
           "tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms", "e2e_median_ms")
REQUIRED = ("id", "set", "source", "engine", "model", "gpu", "tp", "dataset", "num_prompts", "published")


class CorpusError(ValueError):
    """A corpus entry that cannot be run; the message names the file, point and field."""


def load_corpus(folder: Path = CORPUS) -> tuple[dict[str, dict], list[dict]]:
    sources: dict[str, dict] = {}
    points: list[dict] = []
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        sources.update(data.get("sources") or {})
        for p in data.get("points") or []:
            missing = [k for k in REQUIRED if k not in p]
            if missing:
                raise CorpusError(f"{path.name}: point {p.get('id', '?')}: missing {', '.join(missing)}; add them")
            if p["set"] not in ("fit", "validation"):
                raise CorpusError(f"{path.name}: point {p['id']}: set={p['set']!r}; use fit or validation")
            src = sources.get(p["source"])
            if src is None:
                raise CorpusError(f"{path.name}: point {p['id']}: source {p['source']!r} is not under sources:")
            if src.get("set") != p["set"]:
                raise CorpusError(f"{path.name}: point {p['id']}: set {p['set']} differs from its source's "
                                  f"({src.get('set')}); a source goes to one set")
            if p.get("length_sampling", "vllm") not in ("vllm", "sglang"):
                raise CorpusError(f"{path.name}: point {p['id']}: length_sampling={p['length_sampling']!r}; "
                                  f"use vllm (the default) or sglang")
            unknown = set(p["published"]) - set(METRICS)
            if unknown:
                raise CorpusError(f"{path.name}: point {p['id']}: unknown published metrics {sorted(unknown)}; "
                                  f"use {', '.join(METRICS)}")
            api = src.get("api", "completions")
            if api not in ("chat", "completions"):
                raise CorpusError(f"{path.name}: source {p['source']}: api={api!r}; use chat or completions")
            p["file"], p["api"] = path.name, api
            points.append(p)
    ids = [p["id"] for p in points]
    if len(ids) != len(set(ids)):
        raise CorpusError(f"duplicate point ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return sources, points


# -- workload -------------------------------------------------------------------------------------
def lengths(p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per-request (prompt, output) lengths for point ``p``, seeded."""
    n = int(p["num_prompts"])
    if p["dataset"] == "random" and p.get("length_sampling") == "sglang":
        return sglang_random(p, n, rng)
    if p["dataset"] == "random":
        isl, osl, r = int(p["input_len"]), int(p["output_len"]), float(p.get("range_ratio", 0.0))
        # vllm bench serve --random-range-ratio r: uniform in [L (1 - r), L (1 + r)]; r = 0 is a fixed length
        ins = rng.integers(max(1, round(isl * (1 - r))), round(isl * (1 + r)) + 1, size=n)
        out_mean = p.get("total_output_tokens", n * osl) / n
        if out_mean >= osl - 0.5:
            outs = np.full(n, osl)
        else:  # some answers stopped at EOS before --random-output-len: spread them to the published mean
            low = max(1, round(2 * out_mean - osl))
            outs = rng.integers(low, osl + 1, size=n)
        return ins.astype(int), np.maximum(outs, 1).astype(int)
    if p["dataset"] == "sharegpt":
        mean_in = p.get("total_input_tokens", 0) / n or float(p["mean_input_len"])
        mean_out = p.get("total_output_tokens", 0) / n or float(p["mean_output_len"])
        return sharegpt_like(n, mean_in, mean_out, rng)
    raise CorpusError(f"point {p['id']}: dataset={p['dataset']!r}; use random or sharegpt")


def sglang_random(p: dict, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`sglang.bench_serving --dataset-name random` lengths: uniform integers in [max(1, L r), L] for
    --random-range-ratio r (default 0: anything from 1 to L), not vLLM's [L (1 - r), L (1 + r)]
    (sample_random_requests in sglang's bench_serving.py). Few prompts draw noisy means, so the draws
    are scaled to the published totals' means when the point gives them."""
    r = float(p.get("range_ratio", 0.0))
    out = []
    for length, total in ((int(p["input_len"]), p.get("total_input_tokens")),
                          (int(p["output_len"]), p.get("total_output_tokens"))):
        low = max(1, int(length * r))
        draws = rng.integers(low, length + 1, size=n).astype(float)
        if total:
            draws *= float(total) / draws.sum()
        out.append(np.clip(np.round(draws), low, length).astype(int))
    return out[0], out[1]


def sharegpt_like(n: int, mean_in: float, mean_out: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Log-normal (prompt, output) lengths kept as the benchmark clients keep ShareGPT pairs (both >= 4 tokens,
    prompt <= 1024, prompt + output <= 2048: vllm/benchmarks/datasets.py is_valid_sequence defaults, which
    sglang.bench_serving copies), with the log-normal scales adjusted until the kept pairs have the published means."""
    s = SHAREGPT_SIGMA
    scale_in, scale_out = mean_in, mean_out
    for _ in range(6):
        a = np.round(rng.lognormal(math.log(scale_in) - s * s / 2, s, size=8 * n))
        b = np.round(rng.lognormal(math.log(scale_out) - s * s / 2, s, size=8 * n))
        keep = (a >= 4) & (b >= 4) & (a <= 1024) & (a + b <= 2048)
        ins, outs = a[keep][:n], b[keep][:n]
        scale_in *= mean_in / ins.mean()
        scale_out *= mean_out / outs.mean()
    return ins.astype(int), outs.astype(int)


# What the server's chat template adds around one user message, for sources whose client sent chat requests
# (`api: chat`): the published input totals count the dataset's prompts only, the engine prefills the rendered one.
# (tokens every request shares at its start, tokens each request adds), counted on the rendered templates (o200k /
# Qwen / DeepSeek tokenizers; a special token is one token):
# - gpt-oss (harmony; vLLM's serving_chat -> harmony_utils.get_system_message, SGLang via the repo's chat_template.jinja):
#   the system message "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n
#   Knowledge cutoff: 2024-06\nCurrent date: YYYY-MM-DD\n\nReasoning: medium\n\n# Valid channels: analysis, final.
#   Channel must be included for every message.<|end|>" is the same ~59 tokens for every request (its 3 full 16-token
#   blocks hit the prefix cache), then "<|start|>user<|message|>" + prompt + "<|end|><|start|>assistant": 6 more.
# - Qwen3 (tokenizer_config.json chat_template, no system message): "<|im_start|>user\n" + prompt +
#   "<|im_end|>\n<|im_start|>assistant\n": 8 tokens, none in a shared full block.
# - DeepSeek-R1-0528: "<｜begin▁of▁sentence｜><｜User｜>" + prompt + "<｜Assistant｜>": 3 tokens.
# - GLM-4.5 (chat_template.jinja): "[gMASK]<sop><|user|>\n" + prompt + "<|assistant|>": 5 tokens.
CHAT_TEMPLATE_TOKENS = {"gpt-oss-120b": (59, 6), "gpt-oss-20b": (59, 6), "deepseek-v3": (0, 3), "glm-4.5-air": (0, 5),
                        **{q: (0, 8) for q in ("qwen3-235b-a22b", "qwen3-235b-a22b-fp8", "qwen3-8b", "qwen3-14b",
                                               "qwen3-14b-fp8", "qwen3-32b", "qwen3-32b-fp8")}}


def template_tokens(p: dict) -> tuple[int, int]:
    """(shared, per-request) tokens the chat template adds to each prompt of point ``p``; (0, 0) for completions."""
    if p.get("api") != "chat":
        return 0, 0
    profile = p.get("model_profile") or p["model"]
    if profile not in CHAT_TEMPLATE_TOKENS:
        raise CorpusError(f"point {p['id']}: api chat but no chat-template length for {profile!r}; "
                          f"add it to CHAT_TEMPLATE_TOKENS in bench/common/fidelity.py")
    return CHAT_TEMPLATE_TOKENS[profile]


def workload(p: dict, seed: int = 0) -> Workload:
    rng = np.random.default_rng([seed, abs(hash_id(p["id"]))])
    ins, outs = lengths(p, rng)
    shared, own = template_tokens(p)
    system_blocks = tuple(range(1, shared // BLOCK + 1))  # the same block ids in every prompt: prefix-cache hits
    sessions, nxt = [], len(system_blocks) + 1
    for i, (a, b) in enumerate(zip(ins, outs)):
        n = int(a) + shared + own
        blocks = system_blocks + tuple(range(nxt, nxt + math.ceil(n / BLOCK) - len(system_blocks)))
        sessions.append(Session(f"q{i}", [Request(0, blocks, n, int(b), 0.0)]))
        nxt = blocks[-1] + 1
    return Workload(p["id"], BLOCK, 32000, sessions)


def hash_id(text: str) -> int:
    import zlib
    return zlib.crc32(text.encode())


def vllm_server_defaults(gpu: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that vLLM V1's OpenAI server picks when the command line does not.

    vllm/engine/arg_utils.py (EngineArgs.get_batch_defaults, since PR #17885, May 2025, i.e. vLLM >= 0.9): 1024 and
    8192 on GPUs with >= 70 GiB whose name does not contain "a100" ("Setting large max_num_batched_tokens for A100
    reduces throughput"); 256 and 2048 on every other GPU, A100 80GB included. vLLM's own test of it:
    tests/sim/engine/test_arg_utils.py::test_defaults_with_usage_context.
    """
    big = load_gpu(gpu).memory_gib >= 70 and not gpu.startswith("a100")
    return (1024, 8192) if big else (256, 2048)


def sglang_chunked_prefill_default(gpu: str) -> int:
    """SGLang's --chunked-prefill-size when the command line does not set it, by the device's memory.

    python/sglang/srt/server_args.py (0.4-0.5, ServerArgs.__post_init__ / _handle_gpu_memory_settings): 2048 under
    35 GiB, 8192 under 160 GiB ("H100, H200, A100, H20"), 16384 from 160 GiB ("B200, MI300").
    """
    memory = load_gpu(gpu).memory_gib
    return 2048 if memory < 35 else 8192 if memory < 160 else 16384


def settings_for(p: dict) -> EngineSettings:
    version = tuple(int(x) for x in str(p.get("engine_version", "0")).split(".")[:2] if x.isdigit())
    old_vllm = p["engine"] == "vllm" and version < (0, 7)
    # SGLang >= 0.4 overlaps CPU scheduling with the GPU step by default (its "zero-overhead" overlap scheduler)
    sglang_overlaps = p["engine"] == "sglang" and version >= (0, 4)
    # vLLM 0.6 with max_model_len 4096 and no chunked prefill: 256 sequences, one whole prompt per step (4096).
    if p["engine"] == "sglang":
        seqs, batched = 1024, sglang_chunked_prefill_default(p["gpu"])
    else:
        seqs, batched = (256, 4096) if old_vllm else vllm_server_defaults(p["gpu"])
    return EngineSettings(
        model=p["model"], model_profile=p.get("model_profile", ""), gpu=p["gpu"],
        tensor_parallel_size=int(p["tp"]), data_parallel_size=int(p.get("dp", 1)),
        enable_expert_parallel=bool(p.get("ep", False)),
        max_num_seqs=int(p.get("max_num_seqs", seqs)),
        max_num_batched_tokens=int(p.get("max_num_batched_tokens", batched)),
        max_model_len=p.get("max_model_len"), kv_cache_dtype=p.get("kv_cache_dtype", "auto"),
        gpu_memory_utilization=float(p.get("gpu_memory_utilization", 0.9)),
        enable_prefix_caching=bool(p.get("prefix_caching", True)), engine_profile=p["engine"],
        async_scheduling=bool(p.get("async_scheduling", sglang_overlaps)),
        num_scheduler_steps=int(p.get("num_scheduler_steps", 1)))


def regime(p: dict) -> str:
    if p.get("concurrency"):
        return "low (c<=16)" if int(p["concurrency"]) <= 16 else "closed c>16"
    if p.get("request_rate") not in (None, "inf"):
        return "open-loop rate"
    return "burst (all at once)"


# -- one point -----------------------------------------------------------------------------------
def run_point(p: dict) -> dict[str, Any]:
    t0 = time.perf_counter()
    wl, s = workload(p), settings_for(p)
    n = int(p["num_prompts"])
    rate = p.get("request_rate")
    if p.get("concurrency"):
        df = simulate(wl, s,
                      SimLoad(mode="closed", level=int(p["concurrency"]), warmup_s=0, duration_s=1e7, drain_s=1e7, max_requests=n))
    elif rate not in (None, "inf"):
        df = simulate(wl, s,
                      SimLoad(mode="open", level=float(rate), warmup_s=0, duration_s=n / float(rate) * 2 + 60, drain_s=1e7, max_requests=n, seed=0))
    else:
        df = simulate(wl, s, SimLoad(mode="trace", level=1.0, warmup_s=0, duration_s=1e7, drain_s=1e7))
    ok = df[df.status == 200]
    if ok.empty:
        raise CorpusError(f"point {p['id']}: no simulated request succeeded ({df.status.iloc[0]}: "
                          f"{df.error.iloc[0] if 'error' in df else ''}); check its lengths, max_model_len and GPUs")
    duration = ok.done_s.max() - ok.sent_s.min()
    ttft = (ok.first_token_s - ok.sent_s) * 1e3
    multi = ok[ok.completion_tokens > 1]
    tpot = (multi.last_token_s - multi.first_token_s) / (multi.completion_tokens - 1) * 1e3
    e2e = (ok.done_s - ok.sent_s) * 1e3
    client_prompt_tokens = ok.prompt_tokens.sum() - sum(template_tokens(p)) * len(ok)  # what the client counted
    sim = {"total_tok_s": (client_prompt_tokens + ok.completion_tokens.sum()) / duration,
           "output_tok_s": ok.completion_tokens.sum() / duration,
           "ttft_mean_ms": ttft.mean(), "ttft_median_ms": ttft.median(), "ttft_p99_ms": np.percentile(ttft, 99),
           "tpot_mean_ms": tpot.mean(), "tpot_median_ms": tpot.median(), "tpot_p99_ms": np.percentile(tpot, 99),
           "e2e_median_ms": e2e.median()}
    c = df.attrs["server_counters"]
    return {"id": p["id"], "sim": sim, "requests": len(ok), "failed": int((df.status != 200).sum()),
            "preemptions": c["num_preemptions_total"], "wall_s": time.perf_counter() - t0}


def run_all(points: list[dict], jobs: int) -> dict[str, dict]:
    if jobs <= 1:
        return {r["id"]: r for r in map(run_point, points)}
    # longest first: the 32K-prompt points dominate
    order = sorted(points, key=lambda p: -int(p["num_prompts"]) * int(p.get("input_len") or 300))
    with ProcessPoolExecutor(jobs) as pool:
        return {r["id"]: r for r in pool.map(run_point, order)}



def rows_of(points: list[dict], results: dict[str, dict]) -> list[dict]:
    rows = []
    for p in points:
        r = results[p["id"]]
        for metric, pub in p["published"].items():
            sim = float(r["sim"][metric])
            rows.append({"set": p["set"], "id": p["id"], "source": p["source"], "gpu": p["gpu"],
                         "model": p.get("model_profile") or p["model"], "engine": p["engine"], "regime": regime(p),
                         "metric": metric, "published": float(pub), "simulated": sim, "ratio": sim / float(pub),
                         "per_gpu": int(p.get("per_gpu_divisor", p["tp"]))})
    return rows



# -- InferenceX rows (bench/fidelity/import_inferencex.py reads them; the spread feeds the replay's report)
MODELS = {"dsr1": ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3")}


def skip_reason(row: dict, gpus_known: set[str]) -> str | None:
    if row["framework"] not in ("sglang", "vllm"):
        return f"engine {row['framework']} is not modelled"
    if row["disagg"] or row["is_multinode"]:
        return "disaggregated or multi-node serving is not modelled"
    if row["spec_method"] != "none":
        return f"speculative decoding ({row['spec_method']}) is not modelled"
    if row["model"] not in MODELS:
        return f"model {row['model']} has no profile"
    if row["precision"] != "fp8":
        return f"precision {row['precision']}: no {row['precision'].upper()} profile of {row['model']}"
    if row["hardware"] not in gpus_known:
        return f"GPU {row['hardware']} has no profile"
    if row["num_decode_gpu"] != row["decode_tp"] or row["prefill_tp"] != row["decode_tp"]:
        return f"{row['num_decode_gpu']} decode GPUs at TP {row['decode_tp']}: not one replica on one node"
    return None


def config_id(row: dict) -> str:
    """The point id of a row's configuration: one per engine, model, GPU, TP, ISL/OSL and concurrency."""
    return (f"ix-{row['model']}-{row['hardware']}-{row['framework']}-tp{row['decode_tp']}-{row['isl'] // 1024}k-"
            f"{row['osl'] // 1024}k-c{row['conc']}")


def spread_by_gpu(rows: list[dict]) -> dict[str, tuple[int, float, float, float, float]]:
    """GPU -> (configurations on several nights, median and largest max/min of median TPOT, the same of throughput);
    bench/fidelity/replay.py sets the simulator's error beside it."""
    gpus_known = set(available("gpus"))
    nights: dict[str, list[dict]] = {}
    gpu_of: dict[str, str] = {}
    for row in rows:
        if skip_reason(row, gpus_known) is None:
            key = config_id(row)
            nights.setdefault(key, []).append(row["metrics"])
            gpu_of[key] = row["hardware"]
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for key, ms in nights.items():
        if len(ms) > 1:
            tpot = [m["median_tpot"] for m in ms]
            tput = [m["tput_per_gpu"] for m in ms]
            by_gpu.setdefault(gpu_of[key], []).append((max(tpot) / min(tpot), max(tput) / min(tput)))
    out = {}
    for gpu, spans in sorted(by_gpu.items()):
        tpot_spans, tput_spans = sorted(s[0] for s in spans), sorted(s[1] for s in spans)
        mid = len(spans) // 2
        out[gpu] = (len(spans), tpot_spans[mid], tpot_spans[-1], tput_spans[mid], tput_spans[-1])
    return out
