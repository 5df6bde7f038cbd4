"""The peers' clients on the same server as benchcamp, side by side: AIPerf's ``mooncake_trace``
mode on the public Mooncake conversation trace, and benchcamp replaying the same trace file.

    uv run --frozen python bench/peers_side_by_side.py [--engine simulated|real] [--lines 200]
        [--time-scale 1] [--max-isl N] [--max-osl N] [--dp 4] [--out bench/peers_side_by_side.json]

One trace file, both clients. The script writes the slice (the first ``--lines`` requests of
/work/shared/traces/mooncake/conversation_trace.jsonl, or ``--trace``; requests above
``--max-isl`` dropped, outputs capped at ``--max-osl``, timestamps divided by ``--time-scale``)
and gives the same file to AIPerf (``--custom-dataset-type mooncake_trace``: fixed schedule,
text prompts synthesised per hash id, 512 tokens a block) and to benchcamp
(``benchcamp.workload.mooncake.read_mooncake``, trace mode at time scale 1: each request at its
timestamp, token-id prompts built per hash id, 512 tokens a block). Each client gets a fresh
engine (same flags), so neither finds the other's prefixes cached.

Engines: ``simulated`` = benchcamp's simulated engine, Llama-3.1-8B on ``--dp`` H200s (data
parallel: the per-replica cache hit rates show); ``real`` = the CPU vLLM of ``make real-engine``
(tiny model, 8K context: use a short, slow slice, e.g. ``--max-isl 3000 --max-osl 16
--time-scale 0.2 --lines 40``).

Token counts agree by construction on the simulated engine: AIPerf's tokenizer here is a
one-word-per-token vocabulary (bench/peers.py) and the simulated engine counts a text prompt's
words. On the real engine, the server's own tokenizer counts AIPerf's text: prompt lengths differ
from the trace's (AIPerf's synthesised words are not one token each), so its rows compare
latency at the same request schedule, not the same token counts (the script prints both
clients' mean prompt tokens).

Definitions. Per request both clients measure TTFT (send -> first content token), TPOT
((E2E - TTFT) / (out - 1): AIPerf calls it "inter_token_latency") and E2E; percentiles here are
numpy's linear ones over each client's own per-request records (AIPerf's profile_export.jsonl,
benchcamp's records), the same function for both. Throughput differs by definition: AIPerf's
"output token throughput" is all output tokens over the span from the first request's start to
the last response's end; benchcamp's is output tokens of the requests *sent in the window*
over the window. The table prints AIPerf's span definition computed from both clients' records
(like with like) and benchcamp's window rule apart. Cache hit rate: the server's /metrics delta
over each client's run (prefix-cache hits / queries, the same counters for both), total and per
DP engine. Routing: by default neither client sends a routing key the engine honors (benchcamp
with ``load.session_header=""``; AIPerf's X-Correlation-ID is not read), so both are routed by
load and cached prefix. Each Mooncake line is its own conversation: with ``--session-header
X-Session-ID`` both clients' keys are hashed to ranks, and two clients' different ids land on
different ranks by a hash that ignores load. Hash routing of one-request sessions unbalances the
ranks: with it, the simulator's own answer for this slice has TTFT p90 10.3 s instead of 6.2 s.

Why AIPerf's mooncake run "timed out" (6 of 300 done in 100 s, issue 23): the first 300
requests of this trace arrive within 102 s and ask for 4.3M prompt tokens (~42K prompt
tokens/s, 8% of them reusable): Mooncake's production cluster's load. One simulated H200
serving Llama-3.1-8B (or anything smaller than that cluster) falls behind, its queue grows,
TTFTs reach minutes and AIPerf's request timeout cuts them. benchcamp's virtual clock on the same
slice and engine shows the same (78 of 300 done by t = 100 s, TTFT p50 45 s): the server is
saturated by the trace's pacing, not slowed by the engine or the client. Here the default
server has 4 data-parallel H200s (``--dp``), which keep up in real time.

AA-AgentPerf (agentperf-local): bench/agentperf_side_by_side.py (``agentperf_side`` /
``benchcamp_side_for_agentperf`` here call it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from peers import AIPERF_VERSION, aiperf_env, aiperf_exe, aiperf_tokenizer  # noqa: E402 - bench helpers
from vllm_bench_side_by_side import Server, free_port, start_real  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REAL_MODEL = "benchcamp/tiny-llama"
PROMPT_FORM: dict[str, str | None] = {"benchcamp": None}  # --benchcamp-prompt


# ---------------------------------------------------------------------------- the trace slice
def write_slice(src: Path, dst: Path, lines: int, max_isl: int | None, max_osl: int | None, scale: float) -> int:
    rows = []
    with src.open() as f:
        for line in f:
            if len(rows) >= lines:
                break
            r = json.loads(line)
            if max_isl and r["input_length"] > max_isl:
                continue
            if max_osl:
                r["output_length"] = min(int(r["output_length"]), max_osl)
            r["timestamp"] = int(round(r["timestamp"] / scale))
            rows.append(r)
    t0 = rows[0]["timestamp"] if rows else 0
    dst.write_text("".join(json.dumps(dict(r, timestamp=r["timestamp"] - t0)) + "\n" for r in rows))
    return len(rows)


# ---------------------------------------------------------------------------- servers
def start_simulated(work: Path, dp: int) -> Server:
    port = free_port()
    exe = Path(sys.executable).parent / "benchcamp"
    argv = [
        str(exe),
        "engine",
        "serve",
        "--model",
        SIM_MODEL,
        "--gpu",
        "h200",
        "--data-parallel-size",
        str(dp),
        "--num-gpus",
        str(dp),
        "--max-model-len",
        "131072",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--enable-prompt-tokens-details",
    ]
    log = open(work / "engine.log", "wb")  # noqa: SIM115 - the engine writes it until stopped
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Server(
        f"simulated engine ({dp} x H200, Llama-3.1-8B)",
        f"http://127.0.0.1:{port}",
        None,
        SIM_MODEL,
        proc,
        work,
        [],
        argv,
    )


def engine(kind: str, work: Path, dp: int) -> Server:
    work.mkdir(parents=True, exist_ok=True)
    s = start_simulated(work, dp) if kind == "simulated" else start_real(REAL_MODEL, work)
    s.wait_ready(600)
    return s


def cache_delta(before: dict | None, after: dict | None) -> dict[str, Any]:
    from benchcamp.loadgen.scrape import delta
    from benchcamp.metrics import engine_hit_rates, server_hit_rate

    d = delta(before, after)
    return {
        "hit_rate": server_hit_rate(d),
        "per_engine": engine_hit_rates(d),
        "queries": d.get("vllm:prefix_cache_queries"),
    }


def scrape(server: Server) -> dict | None:
    from benchcamp.loadgen.scrape import scrape as scrape_metrics

    return scrape_metrics(server.url, server.api_key)


# ---------------------------------------------------------------------------- statistics (one function, both clients)
def stats(ttft_s, tpot_s, e2e_s, prompt, out, start_s, end_s, n_sent: int) -> dict[str, float]:
    ttft, tpot = np.asarray(ttft_s, float), np.asarray(tpot_s, float)
    tpot = tpot[np.isfinite(tpot)]
    span = float(np.max(end_s) - np.min(start_s)) if len(start_s) else float("nan")
    res: dict[str, float] = {
        "sent": n_sent,
        "completed": int(len(ttft)),
        "prompt_tokens_mean": float(np.mean(prompt)) if len(prompt) else float("nan"),
        "output_tokens": float(np.sum(out)),
        "span_s": span,
        "output_tok_s_span": float(np.sum(out)) / span if span > 0 else float("nan"),
        "total_tok_s_span": float(np.sum(out) + np.sum(prompt)) / span if span > 0 else float("nan"),
        "e2e_p50_ms": float(np.percentile(e2e_s, 50) * 1e3) if len(e2e_s) else float("nan"),
    }
    for q in (50, 90, 99):
        res[f"ttft_p{q}_ms"] = float(np.percentile(ttft, q) * 1e3) if len(ttft) else float("nan")
        res[f"tpot_p{q}_ms"] = float(np.percentile(tpot, q) * 1e3) if len(tpot) else float("nan")
    return res


# ---------------------------------------------------------------------------- AIPerf
def run_aiperf(server: Server, trace: Path, n: int, tmp: Path, timeout_s: float, header: str) -> dict[str, Any]:
    art = tmp / "aiperf"
    hf = tmp / "hf"
    argv = [
        str(aiperf_exe()),
        "profile",
        "--model",
        server.model,
        "--url",
        server.url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--tokenizer",
        aiperf_tokenizer(hf),
        "--input-file",
        str(trace),
        "--custom-dataset-type",
        "mooncake_trace",
        "--extra-inputs",
        "ignore_eos:true",
        "--use-server-token-count",
        "--request-timeout-seconds",
        str(int(timeout_s)),
        "--workers-max",
        "2",
        "--record-processors",
        "1",
        "--ui-type",
        "none",
        "--no-gpu-telemetry",
        "--export-level",
        "records",
        "--output-artifact-dir",
        str(art),
    ]
    if server.api_key:
        argv += ["--api-key", server.api_key]
    if header:  # AIPerf's per-conversation id travels in X-Correlation-ID unless told otherwise
        argv += ["--session-header", header]
    before = scrape(server)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=aiperf_env(hf), cwd=str(tmp), timeout=timeout_s + 900)
    wall = time.monotonic() - t
    cache = cache_delta(before, scrape(server))
    recs = []
    for f in art.rglob("profile_export.jsonl"):
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    if not recs:
        return {"client": f"AIPerf {AIPERF_VERSION}", "error": f"exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}"}

    def v(r, k):
        return ((r.get("metrics") or {}).get(k) or {}).get("value")

    ok = [r for r in recs if v(r, "time_to_first_token") is not None and not (r.get("error"))]
    start = [r["metadata"]["request_start_ns"] / 1e9 for r in ok]
    end = [r["metadata"]["request_end_ns"] / 1e9 for r in ok]
    res = stats(
        [v(r, "time_to_first_token") / 1e3 for r in ok],
        [(v(r, "inter_token_latency") or float("nan")) / 1e3 for r in ok],
        [v(r, "request_latency") / 1e3 for r in ok],
        [v(r, "input_sequence_length") or 0 for r in ok],
        [v(r, "output_sequence_length") or 0 for r in ok],
        start,
        end,
        n,
    )
    reported = {}
    for f in art.rglob("profile_export_aiperf.json"):
        doc = json.loads(f.read_text())
        for k in ("output_token_throughput", "time_to_first_token", "inter_token_latency"):
            if isinstance(doc.get(k), dict):
                reported[k] = {q: doc[k].get(q) for q in ("avg", "p50", "p90", "p99") if q in doc[k]}
    return {
        "client": f"AIPerf {AIPERF_VERSION}",
        **res,
        "cache": cache,
        "wall_s": wall,
        "reported": reported,
        "errors": len(recs) - len(ok),
        "exit": p.returncode,
    }


# ---------------------------------------------------------------------------- benchcamp
def run_benchcamp(server: Server, trace: Path, n: int, tmp: Path, timeout_s: float, header: str) -> dict[str, Any]:
    from benchcamp.loadgen import PointSpec, run_point
    from benchcamp.metrics import summarize
    from benchcamp.records import read_records
    from benchcamp.workload.mooncake import read_mooncake

    wl = read_mooncake(trace)
    horizon = max((s.arrival_s for s in wl.sessions), default=0.0) + 1e-3
    prompt = PROMPT_FORM["benchcamp"] or ("text" if server.name.startswith("real") else "ids")
    spec = PointSpec(
        "trace",
        "trace",
        1.0,
        warmup_s=0.0,
        duration_s=horizon,
        drain_s=timeout_s,
        request_timeout_s=timeout_s,
        workers=1,
        prompt=prompt,
        session_header=header,
    )
    before = scrape(server)
    t = time.monotonic()
    res = run_point(server.url, server.api_key, server.model, wl, spec, tmp / "benchcamp")
    wall = time.monotonic() - t
    cache = cache_delta(before, scrape(server))
    df = read_records(res.records_path)
    ok = df[df["error"].isna() & (df["status"] == 200)]
    r = stats(*record_arrays(ok), len(df))
    from types import SimpleNamespace

    prices = SimpleNamespace(name="none", cached_input=0.0, uncached_input=0.0, output=0.0)
    s = summarize(df, tuple(res.window), 1, prices, 0.0, {"ttft_s": 1e9, "tpot_s": 1e9})
    r["output_tok_s_window"] = float(s["output_tokens_per_s_per_gpu"])
    r["cache_hit_client"] = s.get("cache_hit_rate_client")
    return {"client": "benchcamp", **r, "cache": cache, "wall_s": wall, "errors": int(len(df) - len(ok))}


def record_arrays(ok: Any, end: str = "done_s") -> tuple[np.ndarray, ...]:
    """benchcamp's successful records -> what ``stats`` takes: ttft, tpot, e2e, prompt tokens, output
    tokens, send and end times (``end``: the record column that ends a request)."""
    e2e = (ok["last_token_s"] - ok["sent_s"]).to_numpy(float)
    ttft = (ok["first_token_s"] - ok["sent_s"]).to_numpy(float)
    out = ok["completion_tokens"].to_numpy(float)
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
    sent, last = ok["sent_s"].to_numpy(float), ok[end].to_numpy(float)
    return ttft, tpot, e2e, ok["prompt_tokens"].to_numpy(float), out, sent, last


def run_virtual(trace: Path, n: int, dp: int, timeout_s: float, header: str) -> dict[str, Any]:
    """The simulator's own answer for the slice (virtual clock, no HTTP, no client): what a client
    that adds nothing would measure on the simulated engine."""
    from benchcamp.engine.settings import EngineSettings
    from benchcamp.simulation.simulate import simulate
    from benchcamp.workload.mooncake import read_mooncake

    wl = read_mooncake(trace)
    horizon = max((s.arrival_s for s in wl.sessions), default=0.0) + 1e-3
    st = EngineSettings(model=SIM_MODEL, gpu="h200", data_parallel_size=dp, num_gpus=dp, max_model_len=131072)
    df = simulate(
        wl,
        st,
        mode="trace",
        level=1.0,
        warmup_s=0.0,
        duration_s=horizon,
        drain_s=timeout_s,
        seed=0,
        session_affinity=bool(header),
    )
    ok = df[df["error"].isna() & (df["status"] == 200)]
    r = stats(*record_arrays(ok), len(df))
    c = df.attrs["server_counters"]
    hit = c["prefix_cache_hits_total"] / c["prefix_cache_queries_total"] if c["prefix_cache_queries_total"] else None
    return {"client": "virtual clock", **r, "cache": {"hit_rate": hit}}


# ---------------------------------------------------------------------------- AA-AgentPerf
# bench/agentperf_side_by_side.py: agentperf-local 0.3.4 and benchcamp (import-agentperf, text
# replay, load.api=chat, closed loop at 1) on the same replay and server, by agentperf's definitions.
def benchcamp_side_for_agentperf(server: Server, replay_dir: Path, tmp: Path) -> dict[str, Any]:
    from agentperf_side_by_side import run_benchcamp as run_benchcamp_agentperf
    from agentperf_side_by_side import write_replay

    manifest, n = write_replay(replay_dir, tmp / "replay", None)
    return run_benchcamp_agentperf(server, manifest.parent, n, tmp, "none", 600.0)


def agentperf_side(server: Server, tmp: Path) -> dict[str, Any]:
    from agentperf_side_by_side import replay_source, run_agentperf, write_replay

    manifest, n = write_replay(replay_source("agentperf-default-v1"), tmp / "replay", None)
    return run_agentperf(server, manifest, n, tmp, "none", 600.0)


# ---------------------------------------------------------------------------- output
ROWS = [
    ("requests completed / sent", None),
    ("mean prompt tokens", "prompt_tokens_mean"),
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TTFT p90 (ms)", "ttft_p90_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("TPOT p50 (ms) [AIPerf: ITL]", "tpot_p50_ms"),
    ("TPOT p90 (ms)", "tpot_p90_ms"),
    ("E2E p50 (ms)", "e2e_p50_ms"),
    ("output tok/s, span rule (AIPerf's)", "output_tok_s_span"),
    ("total tok/s, span rule (AgentX's)", "total_tok_s_span"),
    ("span (s)", "span_s"),
    ("server cache hit (/metrics)", "cache_hit"),
]


def value(r: dict, key: str | None) -> Any:
    if key is None:
        return f"{r.get('completed', '-')}/{r.get('sent', '-')}"
    if key == "cache_hit":
        return (r.get("cache") or {}).get("hit_rate")
    return r.get(key)


def fmt(v: Any, key: str | None) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.1%}" if key == "cache_hit" else f"{v:,.1f}"


def table(a: dict, b: dict, virt: dict | None = None) -> str:
    lines = [f"{'':38s}{'AIPerf':>14s}{'benchcamp':>14s}{'ratio':>9s}" + (f"{'virtual clock':>16s}" if virt else "")]
    for label, key in ROWS:
        va, vb = value(a, key), value(b, key)
        vv = f"{fmt(value(virt, key), key):>16s}" if virt else ""
        ratio = (
            f"{vb / va:.3f}"
            if isinstance(va, (int, float))
            and isinstance(vb, (int, float))
            and va
            and np.isfinite(va)
            and np.isfinite(vb)
            else ""
        )
        lines.append(f"{label:38s}{fmt(va, key):>14s}{fmt(vb, key):>14s}{ratio:>9s}{vv}")
    win = fmt(b.get("output_tok_s_window"), "")
    lines.append(f"{'output tok/s, window rule (benchcamp)':38s}{'n/a':>14s}{win:>14s}")
    for r in (a, b):
        per = (r.get("cache") or {}).get("per_engine") or {}
        if per:
            lines.append(
                f"{r['client']} server cache hit per DP engine: "
                + ", ".join(f"engine {e} {v:.1%}" for e, v in per.items())
            )
    if a.get("reported"):
        lines.append(f"AIPerf's own summary: {json.dumps(a['reported'])}")
    return "\n".join(lines)


def plot(a: dict, b: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [(lab, k) for lab, k in ROWS if k and k not in ("span_s",)]
    ratios = []
    for _, k in keys:
        va, vb = value(a, k), value(b, k)
        ok = (
            isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va and np.isfinite(va) and np.isfinite(vb)
        )
        ratios.append(vb / va if ok else np.nan)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.barh(range(len(keys)), ratios, color="#4c72b0")
    ax.axvline(1.0, color="k", lw=0.8)
    for x in (0.95, 1.05):
        ax.axvline(x, color="grey", lw=0.6, ls="--")
    ax.set_yticks(range(len(keys)), [lab for lab, _ in keys], fontsize=7)
    ax.set_xlabel("benchcamp / AIPerf (same trace, same server)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["simulated", "real"], default="simulated")
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--lines", type=int, default=200, help="the first N requests of the trace")
    ap.add_argument("--max-isl", type=int, default=None, help="drop requests with more input tokens")
    ap.add_argument("--max-osl", type=int, default=None, help="cap output tokens")
    ap.add_argument("--time-scale", type=float, default=1.0, help="trace speed (0.5 = half as fast)")
    ap.add_argument("--dp", type=int, default=4, help="simulated engine: data-parallel H200s")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per-request timeout (both clients)")
    ap.add_argument(
        "--session-header",
        default="",
        help="both clients send each request's session id in this "
        "header (X-Session-ID: the simulated engine routes by it); default none: routed by load and cache",
    )
    ap.add_argument(
        "--benchcamp-prompt",
        choices=["ids", "text"],
        default=None,
        help="benchcamp's prompt form (default: token ids on the simulated engine, text on the real one)",
    )
    ap.add_argument("--out", default=None, help="default bench/peers_side_by_side[.real].json")
    a = ap.parse_args()
    PROMPT_FORM["benchcamp"] = a.benchcamp_prompt
    out = Path(a.out or ROOT / "bench" / f"peers_side_by_side{'.real' if a.engine == 'real' else ''}.json")
    with tempfile.TemporaryDirectory(prefix="peers-") as d:
        tmp = Path(d)
        trace = tmp / "slice.jsonl"
        n = write_slice(Path(a.trace), trace, a.lines, a.max_isl, a.max_osl, a.time_scale)
        print(f"trace slice: {n} requests -> {trace}", flush=True)
        rows = {}
        for name, fn in (("aiperf", run_aiperf), ("benchcamp", run_benchcamp)):
            server = engine(a.engine, tmp / f"engine-{name}", a.dp)
            try:
                print(f"{name} on {server.name} ...", flush=True)
                rows[name] = fn(server, trace, n, tmp, a.timeout_s, a.session_header)
            finally:
                server.stop()
            if rows[name].get("error"):
                print(f"{name}: {rows[name]['error']}")
        if a.engine == "simulated":
            rows["virtual"] = run_virtual(trace, n, a.dp, a.timeout_s, a.session_header)
    print()
    print(
        f"Mooncake conversation trace, first {a.lines} requests (time scale {a.time_scale:g}), "
        f"on {a.engine} engine; both clients' records, one statistics function:"
    )
    print(table(rows["aiperf"], rows["benchcamp"], rows.get("virtual")))
    out.write_text(json.dumps({"args": vars(a), "requests": n, **rows}, indent=2, default=str))
    plot(rows["aiperf"], rows["benchcamp"], out.with_suffix(".png"))
    print(f"\n{out}\n{out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
