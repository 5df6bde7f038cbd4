"""How far to trust the simulated engine: every published real-hardware result in the corpus, replayed in virtual time.

The corpus (bench/fidelity/corpus/*.yaml) holds serving results published for
real GPUs, each with its source, engine, model, GPUs and parallel layout, the
benchmark's workload and load, and the figures as published. This script
rebuilds each point's workload (fixed-length "random" prompts as
`vllm bench serve --dataset-name random` makes them, or ShareGPT-like
log-normal lengths with the published means), replays it through the simulated
engine in virtual time with the same load (all prompts at once, closed-loop
`--max-concurrency`, or Poisson `--request-rate`), computes the same figures as
the benchmark client, and prints simulated / published per metric.

Points are split by source into a fit set (the profiles' efficiency and
overhead factors were chosen on them: in-sample) and a validation set (never
fitted: the accuracy figure). Both are reported apart; only the validation
figures say how far to trust the simulator.

    uv run python bench/fidelity.py [--set fit|validation] [--only SUBSTRING] [--jobs 2] [--out bench/fidelity/out]

Writes the per-metric table (fidelity.csv), the summary (summary.md) and a
ratio plot (ratios.png) to --out.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchcamp.engine.profiles import load_gpu  # noqa: E402  (the repository root is put on the path first)
from benchcamp.engine.settings import EngineSettings  # noqa: E402
from benchcamp.engine.simulate import simulate  # noqa: E402
from benchcamp.workload.model import Request, Session, Workload  # noqa: E402

CORPUS = ROOT / "bench/fidelity/corpus"
OUT = ROOT / "bench/fidelity/out"
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
                          f"add it to CHAT_TEMPLATE_TOKENS in bench/fidelity.py")
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
    tests/engine/test_arg_utils.py::test_defaults_with_usage_context.
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
        df = simulate(wl, s, mode="closed", level=int(p["concurrency"]), warmup_s=0, duration_s=1e7, drain_s=1e7,
                      max_requests=n)
    elif rate not in (None, "inf"):
        df = simulate(wl, s, mode="open", level=float(rate), warmup_s=0, duration_s=n / float(rate) * 2 + 60,
                      drain_s=1e7, max_requests=n, seed=0)
    else:
        df = simulate(wl, s, mode="trace", level=1.0, warmup_s=0, duration_s=1e7, drain_s=1e7)
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


# -- report ---------------------------------------------------------------------------------------
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


def shares(rows: list[dict]) -> dict[str, float]:
    err = np.array([abs(r["ratio"] - 1) for r in rows if math.isfinite(r["ratio"])])
    if not len(err):
        return {"n": 0}
    out: dict[str, float] = {"n": len(err)}
    for tol in TOLERANCES:
        out[f"within {tol:.0%}"] = float((err <= tol).mean())
    out["median |err|"] = float(np.median(err))
    return out


def fmt_share(s: dict[str, float]) -> str:
    if not s.get("n"):
        return "no values"
    return (f"{s['n']:>3} values  +-15%: {s['within 15%']:>4.0%}  +-30%: {s['within 30%']:>4.0%}  "
            f"+-50%: {s['within 50%']:>4.0%}  median |err| {s['median |err|']:.0%}")


def summary_lines(rows: list[dict]) -> list[str]:
    lines = []
    for which in ("validation", "fit"):
        sub = [r for r in rows if r["set"] == which]
        title = ("VALIDATION set (never fitted: the accuracy figures)" if which == "validation"
                 else "FIT set (in-sample: the profiles were tuned on these; not an accuracy figure)")
        lines += ["", title, f"  all       {fmt_share(shares(sub))}"]
        for key in ("gpu", "model", "engine", "regime", "metric"):
            groups = defaultdict(list)
            for r in sub:
                groups[r[key]].append(r)
            for name in sorted(groups):
                lines.append(f"  {key:6} {name:22} {fmt_share(shares(groups[name]))}")
    return lines


# Run-to-run spread of a source's own figures, where known: max / min of the same configuration's published median TPOT
# across nights, median over its configurations, by GPU. InferenceX: `import_inferencex.py --spread` over the
# dashboard's history fixture (benchmarks-history.json, Dec 2025 - May 2026), as run on 2026-12-01 and quoted in
# docs/simulator-fidelity.md; --spread-history recomputes it from the fixture (TPOT and throughput). No other source
# publishes repeated runs.
KNOWN_SPREAD = {"inferencex-dsr1-fp8": {"tpot": {"b200": 1.04, "h200": 1.24, "b300": 1.30, "mi300x": 1.38,
                                                 "mi355x": 1.68}}}


def spread_from_history(path: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{source: {"tpot"|"throughput": {gpu: median max/min}}} from InferenceX's history fixture."""
    import json
    sys.path.insert(0, str(ROOT / "bench/fidelity"))
    import import_inferencex
    out: dict[str, dict[str, float]] = {"tpot": {}, "throughput": {}}
    for gpu, (_, tpot, _, tput, _) in import_inferencex.spread_by_gpu(json.loads(path.read_text())).items():
        out["tpot"][gpu], out["throughput"][gpu] = tpot, tput
    return {"inferencex-dsr1-fp8": out}


def metric_family(metric: str) -> str:
    return "throughput" if metric.endswith("tok_s") else metric.split("_")[0]


def ordering(rows: list[dict]) -> tuple[int, int]:
    """(agreeing, compared) pairs of one source's points on one metric: does the simulator order two configurations
    the way the published figures do? Published ties are not compared."""
    agree = n = 0
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["published"] == b["published"]:
                continue
            n += 1
            agree += (a["simulated"] - b["simulated"]) * (a["published"] - b["published"]) > 0
    return agree, n


def source_lines(rows: list[dict], spread: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Per source: median |err| by metric family beside the source's own run-to-run spread (where known), and the
    pairwise ordering agreement per metric (simulator vs published)."""
    lines = ["", "PER SOURCE: median |err| (values) | own run-to-run spread, where known | pairwise ordering agreement",
             "  (spread: median over configurations of max/min across nights, by GPU, as +-(sqrt(max/min) - 1);"
             " ordering: share of point pairs, same source and metric, ordered as published)"]
    by_source: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_source[r["source"]].append(r)
    all_agree = all_n = 0
    for src in sorted(by_source, key=lambda k: (by_source[k][0]["set"], k)):
        sub = by_source[src]
        fams = defaultdict(list)
        for r in sub:
            fams[metric_family(r["metric"])].append(abs(r["ratio"] - 1))
        errs = "  ".join(f"{f} {np.median(v):.0%} ({len(v)})" for f, v in sorted(fams.items()))
        lines.append(f"  [{sub[0]['set'][:3]}] {src}: {len({r['id'] for r in sub})} points; {errs}")
        for fam, by_gpu in sorted(spread.get(src, {}).items()):
            if by_gpu:
                gpus = sorted({r["gpu"] for r in sub})
                own = [f"{g} +-{math.sqrt(by_gpu[g]) - 1:.0%} (x{by_gpu[g]:.2f})" for g in gpus if g in by_gpu]
                med = {g: np.median([abs(r["ratio"] - 1) for r in sub if r["gpu"] == g
                                     and metric_family(r["metric"]) == fam]) for g in gpus if g in by_gpu}
                lines.append(f"      {fam} spread between nights: " + ", ".join(own))
                lines.append(f"      {fam} simulator median |err| on those GPUs: "
                             + ", ".join(f"{g} {v:.0%}" for g, v in med.items()))
        orders = []
        for metric in METRICS:
            agree, n = ordering([r for r in sub if r["metric"] == metric and math.isfinite(r["ratio"])])
            if n:
                orders.append(f"{metric} {agree / n:.0%} of {n}")
                if sub[0]["set"] == "validation":
                    all_agree, all_n = all_agree + agree, all_n + n
        lines.append("      ordering: " + (", ".join(orders) if orders else "no pair"))
    if all_n:
        lines.append(f"  validation sources, every metric: {all_agree / all_n:.0%} of {all_n} pairs ordered as published")
    return lines


def table_lines(rows: list[dict]) -> list[str]:
    head = f"{'set':4} {'point':44} {'metric':15} {'published':>12} {'simulated':>12} {'ratio':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        flag = "" if abs(r["ratio"] - 1) <= 0.15 else (" *" if abs(r["ratio"] - 1) <= 0.5 else " **")
        lines.append(f"{r['set'][:3]:4} {r['id'][:44]:44} {r['metric']:15} {r['published']:>12,.2f} "
                     f"{r['simulated']:>12,.2f} {r['ratio']:>6.2f}{flag}")
    return lines


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in METRICS if any(r["metric"] == m for r in rows)]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for which, color, dx in (("fit", "tab:blue", -0.15), ("validation", "tab:red", 0.15)):
        for i, m in enumerate(metrics):
            ys = [r["ratio"] for r in rows if r["set"] == which and r["metric"] == m]
            ax.scatter([i + dx] * len(ys), ys, s=18, color=color, alpha=0.7, label=which if i == 0 else None)
    ax.axhspan(0.85, 1.15, color="green", alpha=0.12, label="+-15%")
    ax.axhspan(0.5, 1.5, color="green", alpha=0.05, label="+-50%")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(metrics)), metrics, rotation=30, ha="right")
    ax.set_ylabel("simulated / published")
    ax.set_title("Simulated engine vs published real-hardware results (bench/fidelity/corpus)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["fit", "validation"], help="run one set only")
    ap.add_argument("--only", help="run the points whose id contains this")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--out", type=Path, default=OUT, help="where the table, summary and plot go")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="folder of corpus yaml files")
    ap.add_argument("--table", action="store_true", help="print every metric value, not only the summary")
    ap.add_argument("--spread-history", type=Path, help="InferenceX-app's benchmarks-history.json: recompute "
                    "InferenceX's night-to-night spread (default: the figures import_inferencex.py --spread gave)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    try:
        sources, points = load_corpus(args.corpus)
    except (CorpusError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    points = [p for p in points if (not args.set or p["set"] == args.set) and (not args.only or args.only in p["id"])]
    for p in points:  # profiles and flags, before any worker starts
        try:
            settings_for(p).validate()
        except (ValueError, CorpusError) as exc:
            print(f"error: {p['file']}: point {p['id']}: {exc}", file=sys.stderr)
            return 2
    if not points:
        print("error: no corpus point matches --set/--only; drop the filter", file=sys.stderr)
        return 2
    print("command: uv run python bench/fidelity.py " + " ".join(sys.argv[1:]))
    print(f"{len(points)} points from {len({p['source'] for p in points})} sources "
          f"({sum(p['set'] == 'fit' for p in points)} fit, {sum(p['set'] == 'validation' for p in points)} validation)")
    results = run_all(points, args.jobs)
    rows = rows_of(points, results)
    spread = spread_from_history(args.spread_history) if args.spread_history else KNOWN_SPREAD
    table, summary = table_lines(rows), summary_lines(rows) + source_lines(rows, spread)
    if args.table:
        print("\n".join(table))
    print("\n".join(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    import pandas as pd
    pd.DataFrame(rows).to_csv(args.out / "fidelity.csv", index=False)
    (args.out / "summary.md").write_text(
        "# Simulated engine vs published results\n\n`uv run python bench/fidelity.py`\n\n```\n"
        + "\n".join(table + summary) + "\n```\n\nSources:\n\n"
        + "\n".join(f"- {k} ({v['set']}): {v['title']}, {v['url']} ({v['date']})" for k, v in sorted(sources.items()))
        + "\n")
    plot(rows, args.out / "ratios.png")
    slow = ", ".join(f"{r['id']} {r['wall_s']:.0f} s" for r in sorted(results.values(), key=lambda r: -r["wall_s"])[:3])
    print(f"\nwritten: {args.out}/fidelity.csv, summary.md, ratios.png; {time.perf_counter() - t0:.0f} s "
          f"(slowest points: {slow})")
    print("ratio = simulated / published; '*' outside +-15%, '**' outside +-50%.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
