"""The peers' clients on the same server as benchcamp, side by side: AIPerf's ``mooncake_trace``
mode on the public Mooncake conversation trace, and benchcamp replaying the same trace file.

    uv run --frozen python bench/peers_side_by_side.py [--engine simulated|real] [--lines 200]
        [--time-scale 1] [--max-isl N] [--max-osl N] [--dp 4]
        [--out bench/results/peers_side_by_side/peers_side_by_side.json]

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
one-word-per-token vocabulary (bench/common/peers.py) and the simulated engine counts a text prompt's
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

AA-AgentPerf (agentperf-local) beside benchcamp: bench/agentperf_side_by_side.py.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.common import plots, tables
from bench.common.paths import ROOT, output
from bench.common.peers import AIPERF_VERSION
from bench.common.runs import aiperf_arrays, aiperf_ok, aiperf_profile, aiperf_summary, benchcamp_point
from bench.common.servers import SIM_MODEL, Server, engine
from bench.common.stats import LATENCY_ROWS, record_arrays, request_stats, succeeded, window_summary

TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
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


# ---------------------------------------------------------------------------- AIPerf
def run_aiperf(server: Server, trace: Path, n: int, tmp: Path, timeout_s: float, header: str) -> dict[str, Any]:
    args = ["--input-file", str(trace), "--custom-dataset-type", "mooncake_trace", "--extra-inputs", "ignore_eos:true",
            "--use-server-token-count", "--request-timeout-seconds", str(int(timeout_s))]
    if header:  # AIPerf's per-conversation id travels in X-Correlation-ID unless told otherwise
        args += ["--session-header", header]
    run = aiperf_profile(server, args, tmp, timeout_s=timeout_s + 900)
    client = f"AIPerf {AIPERF_VERSION}"
    if (err := run.error(client)) is not None:
        return err

    ok = aiperf_ok(run.records)
    res = request_stats(*aiperf_arrays(ok), n)
    doc = aiperf_summary(run.artifacts)
    reported = {k: {q: doc[k].get(q) for q in ("avg", "p50", "p90", "p99") if q in doc[k]}
                for k in ("output_token_throughput", "time_to_first_token", "inter_token_latency")
                if isinstance(doc.get(k), dict)}
    return {"client": client, **res, "cache": run.cache, "wall_s": run.wall_s, "reported": reported,
            "errors": len(run.records) - len(ok), "exit": run.returncode}


# ---------------------------------------------------------------------------- benchcamp
def run_benchcamp(server: Server, trace: Path, n: int, tmp: Path, timeout_s: float, header: str) -> dict[str, Any]:
    from benchcamp.loadgen import PointSpec
    from benchcamp.workload.mooncake import read_mooncake

    wl = read_mooncake(trace)
    horizon = max((s.arrival_s for s in wl.sessions), default=0.0) + 1e-3
    prompt = PROMPT_FORM["benchcamp"] or ("text" if server.name.startswith("real") else "ids")
    spec = PointSpec("trace", "trace", 1.0, warmup_s=0.0, duration_s=horizon, drain_s=timeout_s,
                     request_timeout_s=timeout_s, workers=1, prompt=prompt, session_header=header)
    run = benchcamp_point(server, wl, spec, tmp / "benchcamp")
    df = run.records
    ok = succeeded(df)
    r = request_stats(*record_arrays(ok), len(df))
    s = window_summary(df, run.result.window)
    r["output_tok_s_window"] = float(s["output_tokens_per_s_per_gpu"])
    r["cache_hit_client"] = s.get("cache_hit_rate_client")
    return {"client": "benchcamp", **r, "cache": run.cache, "wall_s": run.wall_s, "errors": int(len(df) - len(ok))}


def run_virtual(trace: Path, n: int, dp: int, timeout_s: float, header: str) -> dict[str, Any]:
    """The simulator's own answer for the slice (virtual clock, no HTTP, no client): what a client
    that adds nothing would measure on the simulated engine."""
    from benchcamp.sim.engine.settings import EngineSettings
    from benchcamp.sim.clock.simulate import SimLoad, simulate
    from benchcamp.workload.mooncake import read_mooncake

    wl = read_mooncake(trace)
    horizon = max((s.arrival_s for s in wl.sessions), default=0.0) + 1e-3
    st = EngineSettings(model=SIM_MODEL, gpu="h200", data_parallel_size=dp, num_gpus=dp, max_model_len=131072)
    df = simulate(
        wl,
        st,
        SimLoad(mode="trace", level=1.0, warmup_s=0.0, duration_s=horizon, drain_s=timeout_s, seed=0, session_affinity=bool(header)),
    )
    ok = succeeded(df)
    r = request_stats(*record_arrays(ok), len(df))
    c = df.attrs["server_counters"]
    hit = c["prefix_cache_hits_total"] / c["prefix_cache_queries_total"] if c["prefix_cache_queries_total"] else None
    return {"client": "virtual clock", **r, "cache": {"hit_rate": hit}}


# ---------------------------------------------------------------------------- output
ROWS = [
    ("requests completed / sent", None),
    ("mean prompt tokens", "prompt_tokens_mean"),
    *LATENCY_ROWS,
    ("output tok/s, span rule (AIPerf's)", "output_tok_s_span"),
    ("total tok/s, span rule (AgentX's)", "total_tok_s_span"),
    ("span (s)", "span_s"),
    ("server cache hit (/metrics)", "cache_hit"),
]


value, fmt = tables.figure, tables.figure_format(",.1f")


def table(a: dict, b: dict, virt: dict | None = None) -> str:
    lines = tables.compare(ROWS, [a, b], ["AIPerf", "benchcamp"], value, fmt, label_width=38,
                           after=[("virtual clock", virt)] if virt else []).splitlines()
    lines.append(tables.render([], [["output tok/s, window rule (benchcamp)", "n/a",
                                     fmt(b.get("output_tok_s_window"), "")]], widths=[38, 14, 14]))
    for r in (a, b):
        per = (r.get("cache") or {}).get("per_engine") or {}
        if per:
            lines.append(f"{r['client']} server cache hit per DP engine: "
                         + ", ".join(f"engine {e} {v:.1%}" for e, v in per.items()))
    if a.get("reported"):
        lines.append(f"AIPerf's own summary: {json.dumps(a['reported'])}")
    return "\n".join(lines)


def plot(a: dict, b: dict, path: Path) -> None:
    keys = [(lab, k) for lab, k in ROWS if k and k not in ("span_s",)]
    ratios = plots.Ratios([lab for lab, _ in keys], [tables.ratio(value(a, k), value(b, k)) or float("nan")
                                                     for _, k in keys])
    plots.write(path, [ratios.panel("benchcamp / AIPerf (same trace, same server)")], size=(7, 3.8))


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
    ap.add_argument("--out", default=None, help="default bench/results/peers_side_by_side/peers_side_by_side[.real].json")
    a = ap.parse_args()
    PROMPT_FORM["benchcamp"] = a.benchcamp_prompt
    out = Path(a.out or output("peers_side_by_side", "real" if a.engine == "real" else ""))
    with tempfile.TemporaryDirectory(prefix="peers-") as d:
        tmp = Path(d)
        trace = tmp / "slice.jsonl"
        n = write_slice(Path(a.trace), trace, a.lines, a.max_isl, a.max_osl, a.time_scale)
        print(f"trace slice: {n} requests -> {trace}", flush=True)
        rows = {}
        for name, fn in (("aiperf", run_aiperf), ("benchcamp", run_benchcamp)):
            with engine(a.engine, tmp / f"engine-{name}", a.dp) as server:
                print(f"{name} on {server.name} ...", flush=True)
                rows[name] = fn(server, trace, n, tmp, a.timeout_s, a.session_header)
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
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(a), "requests": n, **rows}, indent=2, default=str))
    plot(rows["aiperf"], rows["benchcamp"], out.with_suffix(".png"))
    print(f"\n{out}\n{out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
