"""SemiAnalysis' AgentX harness (``agentx-harness`` 1.0.12, its ``agentx profile``) and benchcamp's
``load.agentx`` on the same simulated engine, both scenarios, a few seeds, side by side.

    uv run --frozen python bench/agentx_side_by_side.py [--traces workloads/agentx-sample.json]
        [--seeds 0,1] [--scenarios agentx,inferencex-agentx-mvp] [--concurrency 4] [--duration-s 30]
        [--grace-s 15] [--warmup-s 10] [--dp 1] [--servers simulated,real] [--no-chat-variant] [--keep DIR]
        [--out bench/results/agentx_side_by_side/agentx_side_by_side.json]     # ~7 min at the defaults

The harness: ``agentx-harness==1.0.12`` (Apache-2.0, an AIPerf fork) in its own Python 3.11 venv,
``~/.cache/benchcamp/peers/agentx-harness-1.0.12`` (``bench.common.peers.agentx_harness_exe``; the full
install, ~1.5 min, beside scripts/agentx_harness/fetch.sh's loader-only ``-loader`` venv). Its ``agentx`` CLI
is AIPerf's with ``profile`` defaulting to ``--scenario agentx`` (``agentx_cli.py``); ``aiperf`` in the same
venv is the fork without that default. Run as ``agentx profile --scenario S --unsafe-override
--custom-dataset-type weka_trace --input-file DIR --endpoint-type chat --streaming --concurrency N
--benchmark-duration D --benchmark-grace-period G --random-seed K --tokenizer T``, T the served model's
tokenizer put in a private hub cache (no model hub here): Llama 3's for the simulated Llama-3.1-8B
(bench.common.peers.llama3_tokenizer), the tiny model's for the real CPU vLLM (``--servers real``: a copy of it
with a 262,144-position context and a 1,024-token sliding window, bench/frontend_costs.py's, since the sample's
prompts reach 11.6K tokens, past its 8,192). A local folder is never a valid submission to the harness
(``submission_valid: false``, reason ``unsafe_override``), and the harness takes one trace object per
``.json`` file: the script writes the sample's four traces one per file and gives that folder to both.

benchcamp: ``load.agentx.scenario: S`` with every other rule at that scenario's values except
``duration_s = D``: the **short window is an override for both clients** (the scenarios' windows are
3,600 s and 1,800 s, the floor 900 s; a shared 2-core box cannot hold them), named in benchcamp's
``overrides`` and in the harness's ``--benchmark-duration``; neither run is a valid submission. Token-id
prompts on /v1/completions (benchcamp's default), ``load.warmup_s`` before the window, drain G; with
``--chat-variant`` (default on) one more benchcamp run with ``load.api: chat`` (the same turns as chat text
that the server tokenizes: ``t<hex>`` words, exact) on the first scenario and seed. A fresh engine for every
client run (neither finds another run's prefixes cached).

The rules now shared (benchcamp.workload.agentx.scenarios, from the harness's own scenario files): start
ratios on recorded time (agentx 0.25-0.75, mvp 0-1), a per-lane warm-up primer with its barrier (agentx: 10
more max_tokens=1 requests per lane, no idle delays), the bust of every trace tree with a digest of the
benchmark id, the 10 s system idle cap (agentx also 300 s per tree), ``ignore_eos``, streaming, no
truncation; the harness's trace structure (preamble split, subagent joins, fan-out chains).

What still differs, and what each counts:

- prompts: the harness sends chat text (system/user/assistant segments synthesised per 64-token hash block
  from its ``coding`` corpus, tokenized and decoded with ``--tokenizer``: here the served model's; later
  turns carry the live answers), the server tokenizes it (the simulated engine: benchcamp.workload.tokencount's
  estimate of the served model's family, ``llama-3``; the real engine: the tiny model's tokenizer);
  benchcamp sends the trace's token ids (exact ``in``/``out``).
  ISL: agentx counts the server's usage, mvp its own tokenizer's count of what it sent.
- t*: the harness's recorded time holds each request's duration; benchcamp's holds the root's end-to-start
  gaps only (its workload keeps no durations), so t* may land on other turns. Under ``agentx`` both clients'
  10 extra warm-ups per lane run past the end of the sample's short traces (4-9 turns), so the windows open
  in recycled plays: benchcamp's opens at turn 0 of the next play in every lane whatever the seed (ISL total
  345,358 on seeds 0 and 1, though their start turns differed).
- stamping: the harness stamps ``start_perf_ns`` just before ``session.request`` (its body already built, a
  new ClientSession per request over a pooled connector: 98% of profiling requests reuse a connection) and
  its TTFT at the first content SSE message as its event loop reads it; benchcamp stamps ``sent_s`` when a
  lane claims its send (before the write) and the first token at the kernel's receive time
  (``SO_TIMESTAMPNS``, benchcamp.loadgen.kernel_stamped).
- which requests count: the harness's profiling records (credits issued in the profiling phase, answered
  within duration + grace); benchcamp's window records (sent in the window). One statistics function over
  both (``bench.common.stats.request_stats``); span-rule total tokens/s is AgentX's (ISL + OSL of successful
  requests over last end - first start).
- interactivity: the harness's ``output_token_throughput_per_user`` is 1/ITL per request, percentiled over
  requests (its slow tail is p10); benchcamp's P90 per-user rate is 1/P90(TPOT). Per request both clients'
  ITL and TPOT are (last token - first token) / (output - 1), so p10(1/ITL) and 1/P90(TPOT) are the same
  figure (equal in the table); the harness's own summary p10 equals the script's.
- server side: the engine's /metrics over each run (cache hit; its own TTFT histogram, from the request's
  arrival at the HTTP handler, warm-up included, so the table puts beside it each client's mean TTFT over the
  whole run too: their difference is the client's own share of TTFT).

Measured 2026-12-02 (the defaults: c4, 30 s window and 15 s grace for both, seeds 0 and 1, ~10 min on this
shared 2-core box at load 21-36; bench/results/agentx_side_by_side/agentx_side_by_side.txt; docs/benchmarks/agentx-harness.md
quotes the tables and the real engine's), benchcamp / harness, mean over seeds, on the simulated engine:

- agentx: span total tok/s 1.141, TTFT p50 0.877, p90 0.775, ITL/TPOT p50 1.025, interactivity 0.941, ISL
  total 1.113, OSL 1.140, server cache hit 76.1% vs 77.2%.
- inferencex-agentx-mvp: span total tok/s 1.112, TTFT p50 0.967, p90 0.637, ITL/TPOT p50 1.012,
  interactivity 0.988, ISL total 1.121, OSL 1.100, cache hit 74.4% vs 74.6%.

Token accounting, fixed: the harness synthesises with the served model's tokenizer, as a user's run does
(``run_server``), and the simulated engine counts chat text as Llama 3 counts it (benchcamp.workload.tokencount's
``llama-3`` family). Before, the harness ran with the one-word-per-token tokenizer, whose vocabulary lacks
the corpus's words: it sent ``[UNK]`` runs, counted at 1.31 tokens a word (1.32x ``in``; server prompt
tokens per agentx run 777-787K vs 554-574K, TTFT p90 0.45-0.52x). Now 546-601K (mvp 328-352K) vs 554-574K
(388-396K), and the mean prompt per request is 5.3-6.1K tokens for both. ISL, OSL and tok/s at 1.10-1.14x:
benchcamp completes 6-9% more requests in the window, not longer prompts.

The TTFT left: each client's share (its mean TTFT over the run minus the engine's /metrics mean) is 8.6-13.4
ms for benchcamp (kernel receive stamps) against 11.3-28.6 ms for the harness (in-loop stamps in a
multi-process Python client, growing with the box's load); and the harness's chat text costs the server's
event loop ~24 ms more per request to parse than token ids at this load (``parse_cost``: 29 ms vs 4.8 ms
at 5.7K tokens), delaying other streams too. benchcamp with ``load.api: chat`` (seed 0) has TTFT p50 1.04x
and p90 0.99x the harness's: under this load chat vs ids is the gap. Interactivity: not a definition (p10
of 1/ITL and 1/P90(TPOT) are equal on both clients' records); 0.94x (agentx) and 0.99x (mvp) are the ITL
tails (1.01x with ``load.api: chat``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import plots, tables
from bench.common.paths import ROOT, output
from bench.common.peers import AGENTX_HARNESS_VERSION, agentx_harness_exe, llama3_tokenizer
from bench.common.runs import aiperf_arrays, aiperf_ok, aiperf_profile, aiperf_summary, aiperf_value, benchcamp_point
from bench.common.servers import (
    REAL_MODEL,
    SIM_MODEL,
    Server,
    engine,
    engine_flags,
    http,
    long_context_model,
    start_real,
)
from bench.common.stats import pct, record_arrays, request_stats, succeeded

SAMPLE = ROOT / "workloads" / "agentx-sample.json"
SCENARIOS = ("agentx", "inferencex-agentx-mvp")
HARNESS = f"agentx-harness {AGENTX_HARNESS_VERSION}"


# ---------------------------------------------------------------------------- the traces, the harness's way
def write_trace_folder(src: Path, dst: Path) -> list[dict]:
    """One trace object per ``<id>.json`` (what the harness's weka_trace loader reads); the traces."""
    doc = json.loads(src.read_text())
    traces = doc if isinstance(doc, list) else [doc]
    dst.mkdir(parents=True, exist_ok=True)
    for t in traces:
        (dst / f"{t['id']}.json").write_text(json.dumps(t))
    return traces


def interactivity(itl_s: Any, tpot_s: Any) -> dict[str, float]:
    """Both definitions of the per-user rate over one client's requests: the harness's (p10 over requests of
    1 / the request's ITL, tokens/s) and benchcamp's P90 per-user rate (1 / P90(TPOT))."""
    itl = np.asarray(itl_s, float)
    itl = itl[np.isfinite(itl) & (itl > 0)]
    tpot = np.asarray(tpot_s, float)
    tpot = tpot[np.isfinite(tpot) & (tpot > 0)]
    return {
        "interactivity_p10_tok_s": pct(1.0 / itl, 10) if len(itl) else float("nan"),
        "p90_user_rate_tok_s": 1.0 / pct(tpot, 90) if len(tpot) else float("nan"),
    }


def agentx_stats(ttft, tpot, e2e, isl, osl, start, end, n_sent) -> dict[str, float]:
    r = request_stats(ttft, tpot, e2e, isl, osl, start, end, n_sent)
    r["isl_total"] = float(np.sum(isl))
    r["osl_total"] = float(np.sum(osl))
    stamped = np.asarray(ttft, float)[np.isfinite(ttft)]  # an answer with no content chunk has no TTFT (pct)
    r["ttft_mean_ms"] = float(np.mean(stamped)) * 1e3 if len(stamped) else float("nan")
    r.update(interactivity(tpot, tpot))  # per request, ITL = TPOT = (last - first) / (out - 1) in both
    return r


def _server(run: Any) -> dict[str, Any]:
    return {
        "cache": run.cache,
        "server_prompt_tokens": run.server_prompt_tokens,
        "server_ttft_mean_ms": run.server_ttft_mean_s * 1e3 if run.server_ttft_mean_s is not None else None,
        "wall_s": run.wall_s,
    }


# ---------------------------------------------------------------------------- the harness
def run_harness(server: Server, folder: Path, scenario: str, seed: int, a: argparse.Namespace,
                tmp: Path, tokenizer: tuple[Path, str] | None = None) -> dict[str, Any]:
    args = ["--input-file", str(folder), "--custom-dataset-type", "weka_trace", "--scenario", scenario,
            "--unsafe-override", "--concurrency", str(a.concurrency), "--benchmark-duration", str(a.duration_s),
            "--benchmark-grace-period", str(a.grace_s), "--random-seed", str(seed), "--request-timeout-seconds",
            str(int(a.timeout_s))]
    run = aiperf_profile(server, args, tmp, endpoint="chat", timeout_s=a.timeout_s + 900, exe=agentx_harness_exe(),
                         tokenizer=tokenizer)
    (tmp / "harness.log").write_text(run.output)
    if (err := run.error(HARNESS, tail=3000)) is not None:
        return err
    v = aiperf_value
    recs = run.records
    phases = Counter(str(r["metadata"].get("benchmark_phase")) for r in recs)
    prof = [r for r in recs if str(r["metadata"].get("benchmark_phase")).lower().endswith("profiling")]
    ok = aiperf_ok(prof)
    res = agentx_stats(*aiperf_arrays(ok), len(prof))
    every = [v(r, "time_to_first_token") for r in recs if v(r, "time_to_first_token") is not None]
    res["ttft_mean_all_ms"] = float(np.mean(every)) if every else float("nan")  # warm-up too: as /metrics counts
    res.update(http_phases(ok))
    summary = aiperf_summary(run.artifacts)
    own = _find(summary, ("submission_valid", "submission_invalid_reasons", "scenario_name"))
    return {
        "client": HARNESS,
        **res,
        **_server(run),
        "own_summary": _own_figures(summary),
        "phases": dict(phases),
        "errors": len(prof) - len(ok),
        "exit": run.returncode,
        "outcome": own,
        "argv": run.argv,
    }


def http_phases(ok: list[dict]) -> dict[str, float]:
    """What the harness's TTFT holds besides the server's work, from its aiohttp trace per request: a new TCP
    connection (share of requests not reusing one, mean connect time) and the body's send time."""
    def mean(metric: str) -> float:
        xs = [x for r in ok if (x := aiperf_value(r, metric)) is not None]
        return float(np.mean(xs)) if xs else float("nan")

    return {"connection_reused": mean("http_req_connection_reused"), "connect_ms": mean("http_req_connecting"),
            "send_ms": mean("http_req_sending"), "body_kb": mean("http_req_data_sent")}


def _own_figures(summary: dict) -> dict[str, Any]:
    """The harness's own summary figures this table compares (its percentiles, its interactivity)."""
    out: dict[str, Any] = {}
    for k, x in summary.items():
        if isinstance(x, dict) and any(w in k for w in ("time_to_first_token", "inter_token", "interactiv",
                                                         "throughput", "sequence_length")):
            out[k] = {q: x.get(q) for q in ("unit", "avg", "p10", "p50", "p90", "p99") if q in x}
    return out


def _find(doc: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The first value of each of ``keys`` anywhere in a nested JSON document."""
    found: dict[str, Any] = {}
    stack = [doc]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            for k, x in d.items():
                if k in keys and k not in found:
                    found[k] = x
                stack.append(x)
        elif isinstance(d, list):
            stack.extend(d)
    return found


# ---------------------------------------------------------------------------- benchcamp
def run_benchcamp(server: Server, folder: Path, scenario: str, seed: int, a: argparse.Namespace, tmp: Path,
                  api: str = "completions", vocab_size: int | None = None) -> dict[str, Any]:
    from benchcamp.config import AgentxRules
    from benchcamp.loadgen import PointSpec
    from benchcamp.metrics import Metric, span_throughput
    from benchcamp.workload.agentx.traces import read_agentx

    wl = read_agentx(folder, vocab_size=vocab_size) if vocab_size else read_agentx(folder)
    rules = AgentxRules(scenario=scenario, duration_s=a.duration_s)  # the short window: the one override
    spec = PointSpec(
        f"c{a.concurrency}",
        "closed",
        float(a.concurrency),
        warmup_s=a.warmup_s,
        duration_s=a.duration_s,
        drain_s=a.grace_s,
        request_timeout_s=a.timeout_s,
        workers=1,
        api=api,
        prompt="text" if api == "chat" else "ids",
        seed=seed,
        session_header="",
        agentx=rules.model_dump(),
    )
    run = benchcamp_point(server, wl, spec, tmp / f"benchcamp-{scenario}-{seed}-{api}")
    df = run.records
    t0, t1 = (float(x) for x in run.result.window)
    win = df[(df["sent_s"] >= t0) & (df["sent_s"] < t1)]
    ok = succeeded(win)
    r = agentx_stats(*record_arrays(ok, end="last_token_s"), len(win))
    # the same figure by benchcamp.metrics (AgentX's definition as benchcamp's summaries compute it)
    first = (df["first_token_s"] - df["sent_s"]).dropna()
    r["ttft_mean_all_ms"] = float(first.mean()) * 1e3 if len(first) else float("nan")  # warm-up too
    r["span_throughput_metrics"] = float(span_throughput(ok, 1)[Metric.THROUGHPUT_PER_GPU_SPAN])
    return {
        "client": "benchcamp" + (" (load.api chat)" if api == "chat" else ""),
        **r,
        **_server(run),
        "warmup_records": int((df["sent_s"] < t0).sum()),
        "errors": int(len(win) - len(ok)),
        "overrides": rules.overrides(),
    }


# ---------------------------------------------------------------------------- the server's parse, per form
def parse_cost(prompt_tokens: int, repeat: int = 20) -> dict[str, float]:
    """ms per request of the simulated engine's own request parse (``benchcamp.sim.engine.server.parse_body``: JSON,
    tokenize or count, block hashes; on the server's event loop below 256 KiB) for a prompt of
    ``prompt_tokens``, in each client's form: benchcamp's token ids, benchcamp's chat (``t<hex>`` words, exact),
    and chat text like the harness's (plain words in system/user/assistant messages: the chat-template
    estimate of ``benchcamp.workload.tokencount``). The HTTP engine has no modelled front-end cost
    (``benchcamp.sim.engine.frontend`` is virtual time only): this is what its front end costs."""
    import time

    from benchcamp.sim.engine.server import ServerConfig, parse_body

    cfg = ServerConfig(["m"], "m", None, 131072, 16, True, vocab_size=128256)
    n, per = prompt_tokens, max(1, prompt_tokens // 10)
    words = [f"w{i % 5000}" for i in range(n)]
    roles = ["system"] + ["user", "assistant"] * 5
    bodies = {
        "ids (benchcamp)": {"model": "m", "prompt": list(range(1000, 1000 + n)), "max_tokens": 1},
        "chat, t<hex> words (benchcamp load.api chat)": {
            "model": "m", "max_tokens": 1,
            "messages": [{"role": "user", "content": " ".join(f"t{1000 + i:x}" for i in range(n))}]},
        "chat, plain text (the harness)": {
            "model": "m", "max_tokens": 1,
            "messages": [{"role": r, "content": " ".join(words[k * per:(k + 1) * per])} for k, r in enumerate(roles)]},
    }
    out: dict[str, float] = {}
    for name, body in bodies.items():
        raw, chat = json.dumps(body).encode(), "messages" in body
        parse_body(raw, chat, cfg)
        t = time.perf_counter()
        for _ in range(repeat):
            parse_body(raw, chat, cfg)
        out[name] = (time.perf_counter() - t) / repeat * 1e3
    return out


# ---------------------------------------------------------------------------- the servers
def run_server(kind: str, folder: Path, scenarios: list[str], seeds: list[int], a: argparse.Namespace,
               tmp: Path) -> dict[str, Any]:
    """Both clients, each scenario and seed, a fresh engine of ``kind`` per client run (the real one: one engine,
    its prefix cache reset before each run, as a start takes minutes here). The harness synthesises
    its prompts with the served model's own tokenizer, as a user's run does (``--tokenizer``, resolved from a
    private hub cache): Llama 3's for the simulated Llama-3.1-8B (bench.common.peers.llama3_tokenizer), the tiny
    model's for the real engine."""
    tmp.mkdir(parents=True, exist_ok=True)
    if kind == "simulated":
        tokenizer, vocab = (llama3_tokenizer(), SIM_MODEL), None

        def start(work: Path) -> Server:
            return engine("simulated", work, a.dp)
    elif kind == "real":
        model = long_context_model(tmp)  # the sample's prompts reach 11.6K tokens: past the tiny model's 8,192
        tokenizer, vocab = (model, REAL_MODEL), int(json.loads((model / "config.json").read_text())["vocab_size"])
        # one engine for every run (a start takes minutes on this box), its prefix cache emptied before each
        real = start_real(str(model), tmp / "engine", engine_flags())
        real.wait_ready(900)

        def start(work: Path) -> Server:
            if http(real.url + "/reset_prefix_cache", real.api_key, timeout=60)[0] != 200:
                raise SystemExit(f"{real.name}: /reset_prefix_cache refused")
            return Server(real.name, real.url, real.api_key, real.model)  # leaving it stops nothing
    else:
        raise SystemExit(f"--servers {kind!r}: use simulated or real")
    out: dict[str, Any] = {"harness_tokenizer": tokenizer[1]}
    try:
        run_scenarios(out, start, folder, scenarios, seeds, a, tmp, tokenizer, vocab)
    finally:
        if kind == "real":
            real.stop()
    return out


def run_scenarios(out: dict[str, Any], start: Any, folder: Path, scenarios: list[str], seeds: list[int],
                  a: argparse.Namespace, tmp: Path, tokenizer: tuple[Path, str], vocab: int | None) -> None:
    for sc in scenarios:
        out[sc] = {"harness": [], "benchcamp": []}
        for seed in seeds:
            for name in ("harness", "benchcamp"):
                work = tmp / f"{name}-{sc}-{seed}"
                with start(work / "engine") as server:
                    out["server"] = server.name
                    print(f"{sc} seed {seed}: {name} on {server.name} ...", flush=True)
                    row = (run_harness(server, folder, sc, seed, a, work, tokenizer) if name == "harness" else
                           run_benchcamp(server, folder, sc, seed, a, work, vocab_size=vocab))
                out[sc][name].append({"seed": seed, **row})
                if row.get("error"):
                    print(f"{name}: {row['error']}")
        if a.chat_variant and sc == scenarios[0]:
            work = tmp / f"benchcamp-chat-{sc}"
            with start(work / "engine") as server:
                print(f"{sc} seed {seeds[0]}: benchcamp load.api chat ...", flush=True)
                row = run_benchcamp(server, folder, sc, seeds[0], a, work, api="chat", vocab_size=vocab)
            out[sc]["benchcamp_chat"] = [{"seed": seeds[0], **row}]


# ---------------------------------------------------------------------------- output
ROWS = [
    ("total tok/s, span rule (AgentX's)", "total_tok_s_span"),
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TTFT p90 (ms)", "ttft_p90_ms"),
    ("ITL/TPOT p50 (ms)", "tpot_p50_ms"),
    ("ITL/TPOT p90 (ms)", "tpot_p90_ms"),
    ("interactivity p10 of 1/ITL (tok/s)", "interactivity_p10_tok_s"),
    ("P90 per-user rate 1/P90(TPOT)", "p90_user_rate_tok_s"),
    ("ISL total", "isl_total"),
    ("OSL total", "osl_total"),
    ("requests counted", "completed"),
    ("server cache hit (/metrics)", "cache_hit"),
    ("harness: share on a reused connection", "connection_reused"),
    ("harness: TCP connect (ms, mean)", "connect_ms"),
    ("harness: body send (ms, mean)", "send_ms"),
    ("harness: body (KB, mean)", "body_kb"),
    ("server TTFT mean (/metrics, ms)", "server_ttft_mean_ms"),
    ("client TTFT mean, whole run (ms)", "ttft_mean_all_ms"),
    ("  minus the server's (ms)", "ttft_over_server_ms"),
]


def figure(r: dict, key: str) -> float:
    if key == "cache_hit":
        return float((r.get("cache") or {}).get("hit_rate") or float("nan"))
    if key == "ttft_over_server_ms":
        s = r.get("server_ttft_mean_ms")
        return float(r["ttft_mean_all_ms"] - s) if s is not None and "ttft_mean_all_ms" in r else float("nan")
    x = r.get(key)
    return float(x) if isinstance(x, (int, float)) and x is not None else float("nan")


def spread(runs: list[dict], key: str) -> tuple[float, float, float]:
    """(mean, min, max) of a figure over seeds."""
    xs = [figure(r, key) for r in runs if not r.get("error")]
    xs = [x for x in xs if x == x]
    return (float(np.mean(xs)), min(xs), max(xs)) if xs else (float("nan"),) * 3


def _fmt(key: str, x: float) -> str:
    if x != x:
        return "-"
    return f"{x:.1%}" if key == "cache_hit" else f"{x:,.1f}"


def table(harness: list[dict], bench: list[dict], markdown: bool = False) -> str:
    head = ["", "harness mean [min-max]", "benchcamp mean [min-max]", "ratio"]
    rows = []
    for label, key in ROWS:
        h, b = spread(harness, key), spread(bench, key)
        r = tables.ratio(h[0], b[0]) if key != "ttft_over_server_ms" else None  # a difference: no ratio
        rows.append([label, f"{_fmt(key, h[0])} [{_fmt(key, h[1])}-{_fmt(key, h[2])}]",
                     f"{_fmt(key, b[0])} [{_fmt(key, b[1])}-{_fmt(key, b[2])}]", f"{r:.3f}" if r else "-"])
    return tables.render(head, rows, widths=None if markdown else [36, 33, 33, 6], markdown=markdown)


def chart(path: Path, results: dict[str, Any], server: str) -> Path:
    panels = []
    for sc in SCENARIOS:
        h, b = results[sc]["harness"], results[sc]["benchcamp"]
        ratios = plots.Ratios()
        for label, key in ROWS[:9]:
            hm, bm = spread(h, key)[0], spread(b, key)[0]
            ratios.labels.append(label)
            ratios.values.append(tables.ratio(hm, bm) or float("nan"))
        panels.append(ratios.panel("benchcamp / harness (mean over seeds)", title=sc))
    return plots.write(path, panels, size=(11.0, 4.2), columns=2,
                       title=f"{HARNESS} vs benchcamp load.agentx, same engine (fresh per run): {server}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(SAMPLE), help="AgentX-format trace file (an object or a list) or folder")
    ap.add_argument("--concurrency", type=int, default=4, help="lanes of session trees, both clients")
    ap.add_argument("--duration-s", type=float, default=30.0, help="profiling window, both clients (AgentX: 900+)")
    ap.add_argument("--warmup-s", type=float, default=10.0, help="benchcamp's load.warmup_s (its primers go out then)")
    ap.add_argument("--grace-s", type=float, default=15.0, help="the harness's grace period = benchcamp's drain")
    ap.add_argument("--dp", type=int, default=1, help="simulated engine: data-parallel H200s")
    ap.add_argument("--servers", default="simulated", help="comma-separated: simulated (Llama-3.1-8B on H200s), "
                    "real (the CPU vLLM's tiny model, a long-context copy)")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds, each client each scenario")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--chat-variant", action=argparse.BooleanOptionalAction, default=True,
                    help="also benchcamp with load.api chat (text, the server tokenizes), first scenario, first seed")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per-request timeout (both clients)")
    ap.add_argument("--out", default=None, help="default bench/results/agentx_side_by_side/agentx_side_by_side"
                    "[.<servers>].json (no suffix for the simulated engine alone)")
    ap.add_argument("--keep", default=None, help="keep the run's folder (traces, the harness's artifacts) here")
    a = ap.parse_args()
    seeds = [int(x) for x in a.seeds.split(",")]
    scenarios = [x for x in a.scenarios.split(",") if x]
    kinds = [x for x in a.servers.split(",") if x]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentx-side-") as d:
        tmp = Path(a.keep) if a.keep else Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        src = Path(a.traces)
        folder = src if src.is_dir() else tmp / "traces"
        if not src.is_dir():
            write_trace_folder(src, folder)
        for kind in kinds:
            results[kind] = run_server(kind, folder, scenarios, seeds, a, tmp / kind)
    print()
    for kind in kinds:
        for sc in scenarios:
            r = results[kind][sc]
            print(f"{sc} on {results[kind]['server']}: {HARNESS} (agentx profile --scenario {sc} --unsafe-override) vs "
                  f"benchcamp load.agentx.scenario {sc}; concurrency {a.concurrency}, {a.duration_s:g} s window and "
                  f"{a.grace_s:g} s grace for both (an override: the scenario's window is "
                  f"{'3600' if sc == 'agentx' else '1800'} s; neither run is valid), seeds {seeds}, a fresh engine "
                  f"per run; the harness's tokenizer: {results[kind]['harness_tokenizer']}:")
            print(table(r["harness"], r["benchcamp"]))
            if r.get("benchcamp_chat"):
                print(f"benchcamp with load.api chat (seed {seeds[0]}) against the harness:")
                print(table(r["harness"], r["benchcamp_chat"]))
            print(f"benchcamp overrides: {r['benchcamp'][0].get('overrides')}")
            print(f"harness outcome: {json.dumps(r['harness'][0].get('outcome'), default=str)[:400]}\n")
    isls = [r["prompt_tokens_mean"] for k in kinds for sc in scenarios for r in results[k][sc]["harness"]
            if "prompt_tokens_mean" in r]
    isl = int(np.mean(isls)) if isls else 8000
    results["server_parse_ms"] = {"prompt_tokens": isl, **parse_cost(isl)}
    print(f"the simulated engine's request parse at {isl} prompt tokens (ms per request, this shared box): "
          + ", ".join(f"{k} {v:.2f}" for k, v in results["server_parse_ms"].items() if k != "prompt_tokens"))
    args = vars(a)
    out = Path(a.out or output("agentx_side_by_side", "" if kinds == ["simulated"] else "-".join(kinds)))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": args, **results}, indent=2, default=str))
    for kind in kinds:
        if all(sc in results[kind] for sc in SCENARIOS):
            png = out.with_suffix(".png") if len(kinds) == 1 else out.with_name(f"{out.stem}-{kind}.png")
            print(chart(png, results[kind], results[kind]["server"]))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
