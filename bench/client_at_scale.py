"""Client speed at AgentX scale: ~140K-token token-id bodies (~1 MB of JSON each), bodies built
and sent per second per core, and the client-added TTFT p99 with 1,000 and 10,000 sessions held
by one client process, beside AIPerf on the same server in the same run.

    uv run --frozen python bench/client_at_scale.py [--sessions 1000,10000] [--context 140000]
        [--rate 10] [--seconds 30] [--skip-aiperf] [--out bench/results/client_at_scale/client_at_scale.json]

The server is benchcamp's simulated engine with ``--time-scale 0`` (every modelled step is free:
it answers as fast as its HTTP front end can) and ``--log-requests``, which logs each request's
own TTFT (arrival to first token, the server's clock) with the client's ``X-Request-Id``.
"Added TTFT" of a request = the client's TTFT - the server's TTFT for that request (joined on
the request id): the client's send path (building nothing: bodies are built ahead), the 1 MB
transfer and parse on loopback, and the client's read of the first chunk.

Sessions (AgentX-like): each session has its own ~``--context``-token context (512-token blocks:
the bodies are the same bytes as with AgentX's 64-token blocks, the block lists 8x shorter,
a 20K-token system prompt + tools shared by all), sends its first turn at a random time in
[0, N / rate) and its next turn (+2K tokens) ``N / rate`` s after that, so all N sessions are
held (alive, waiting out their think time) from t = 0 while the client sends ``--rate``
requests/s. One client worker process (one core); its CPU seconds per request sent give the
"sent per second per core" figure (``cpu_max`` and scheduling lag come from its health).

AIPerf (0.13.0, its own venv under ~/.cache/benchcamp/peers/, created on first use) runs on the
same server right after, at the same request rate with the same prompt and output lengths
(``--request-rate R --isl C --osl 8``, synthetic text of a local one-word-per-token tokenizer,
which the simulated engine counts as one token per word): AIPerf has no notion of idle sessions,
so its row is the same request stream without the N held sessions; its added TTFT joins its
records' ``x_request_id`` with the same server log.

Outputs: a table, the JSON (``--out``) and a PNG beside it. A few minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import plots, tables
from bench.common.paths import output
from bench.common.peers import AIPERF_VERSION
from bench.common.runs import aiperf_profile, aiperf_value, benchcamp_point
from bench.common.servers import Server, start_simulated
from bench.common.stats import pct

MODEL = "deepseek-ai/DeepSeek-V3"
BLOCK = 512  # tokens per block id: AgentX hashes 64-token blocks; 512 keeps 10,000 sessions' block lists small
VOCAB = 32000
SHARED_TOKENS = 20_480  # system prompt + tools, shared by every session
NEXT_TURN_TOKENS = 2_048
OUT_TOKENS = 8
_FINISHED = re.compile(r"ttft=([0-9.]+)s .*request_id=(\S+)")


# ---------------------------------------------------------------------------- the workload
def agentx_like(n: int, context: int, rate: float, seed: int = 0):
    """N sessions, two turns each: turn 0 at U(0, N/rate), turn 1 N/rate later with +2K tokens."""
    from benchcamp.workload.model import Request, Session, Workload

    rng = np.random.default_rng(seed)
    period = n / rate
    shared = tuple(range(1, SHARED_TOKENS // BLOCK + 1))
    own = (context - SHARED_TOKENS) // BLOCK
    nxt = NEXT_TURN_TOKENS // BLOCK
    sessions = []
    base = 1_000_000
    for i in range(n):
        b0 = shared + tuple(range(base, base + own))
        b1 = b0 + tuple(range(base + own, base + own + nxt))
        base += own + nxt
        sessions.append(
            Session(
                f"a{i}",
                [
                    Request(0, b0, len(b0) * BLOCK, OUT_TOKENS, float(rng.uniform(0, period))),
                    Request(1, b1, len(b1) * BLOCK, OUT_TOKENS, period),
                ],
            )
        )
    return Workload("agentx-like-scale", BLOCK, VOCAB, sessions)


def build_rate(context: int, seconds: float = 3.0) -> dict:
    """Bodies built per CPU second in this process: new sessions (every block new) and next turns
    (the context cached, +2K new tokens), with benchcamp's builder (benchcamp.loadgen.body)."""
    from benchcamp.loadgen.body import completions_body

    wl = agentx_like(400, context, 1.0, seed=1)
    out = {}
    for kind in ("new_session", "next_turn"):
        n, size, i = 0, 0, 0
        t0 = time.process_time()
        while time.process_time() - t0 < seconds and i < len(wl.sessions):
            s = wl.sessions[i]
            if kind == "next_turn":
                completions_body(MODEL, s.requests[0].blocks, s.requests[0].prompt_len, 8, BLOCK, VOCAB, 0)
                t_pre = time.process_time()
            r = s.requests[1] if kind == "next_turn" else s.requests[0]
            t_a = time.process_time()
            body = completions_body(MODEL, r.blocks, r.prompt_len, 8, BLOCK, VOCAB, 0)
            if kind == "next_turn":
                t0 += t_a - t_pre  # the warming build does not count
            n += 1
            size += len(body)
            i += 1
        cpu = time.process_time() - t0
        out[kind] = {"bodies_per_cpu_s": n / cpu, "mb_per_body": size / n / 1e6, "mb_per_cpu_s": size / cpu / 1e6}
    return out


# ---------------------------------------------------------------------------- the server
def start_engine(work: Path) -> Server:
    flags = ["-tp", "8", "--gpu", "h200", "--time-scale", "0", "--log-requests", "--max-num-seqs", "1024"]
    return start_simulated(MODEL, work, flags, "simulated engine (--time-scale 0)")


def server_ttfts(server: Server) -> dict[str, float]:
    """X-Request-Id -> the server's own TTFT, from its --log-requests lines."""
    text = (server.work / "engine.log").read_text(errors="replace") if server.work else ""
    return {m.group(2): float(m.group(1)) for m in _FINISHED.finditer(text)}


def p_ms(v: list[float], q: float) -> float | None:
    """The q-th percentile of seconds, in ms; None for no values."""
    return pct(v, q) * 1e3 if len(v) else None


# ---------------------------------------------------------------------------- benchcamp
def run_benchcamp(server: Server, n: int, context: int, rate: float, seconds: float, tmp: Path) -> dict:
    from benchcamp.loadgen import PointSpec

    wl = agentx_like(n, context, rate, seed=n)
    spec = PointSpec(
        f"s{n}", "trace", 1.0, warmup_s=3.0, duration_s=seconds, drain_s=20.0, request_timeout_s=60, workers=1
    )
    run = benchcamp_point(server, wl, spec, tmp / f"bc-{n}", metrics=False)
    res, df, wall = run.result, run.records, run.wall_s
    srv = server_ttfts(server)
    ok = df[df["error"].isna()]
    added = [
        (r.first_token_s - r.sent_s) - srv[f"{r.session_id}:{r.turn}"]
        for r in ok.itertuples()
        if f"{r.session_id}:{r.turn}" in srv
    ]
    h = res.client_health
    w0, w1 = res.window
    sent = int(((df["sent_s"] >= w0) & (df["sent_s"] < w1)).sum()) / max(w1 - w0, 1e-9)
    cpu = (h.get("cpu_mean_per_worker") or [None])[0]  # the worker's mean share of one core over the point
    return {
        "client": "benchcamp",
        "sessions_held": n,
        "requests": int(len(ok)),
        "errors": int(df["error"].notna().sum()),
        "rate_offered": rate,
        "joined": len(added),
        "added_ttft_p50_ms": p_ms(added, 50),
        "added_ttft_p99_ms": p_ms(added, 99),
        "ttft_p99_ms": p_ms((ok.first_token_s - ok.sent_s).to_numpy(), 99),
        "client_cpu_max": h.get("cpu_max"),
        "sched_lag_p99_ms": h.get("sched_lag_p99_ms"),
        "max_rss_mb": h.get("max_rss_mb"),
        "client_cpu_mean": cpu,
        "sent_per_s": sent,
        "wall_s": wall,
        # requests sent per second of one core's time (the rate over the worker's mean CPU share)
        "sent_per_core_s": sent / cpu if cpu else None,
    }


# ---------------------------------------------------------------------------- AIPerf
def run_aiperf(server: Server, context: int, rate: float, count: int, tmp: Path) -> dict:
    args = ["--request-rate", str(rate), "--request-count", str(count), "--isl", str(context), "--isl-stddev", "0",
            "--osl", str(OUT_TOKENS), "--extra-inputs", f"min_tokens:{OUT_TOKENS}", "--extra-inputs", "ignore_eos:true",
            "--use-server-token-count"]
    run = aiperf_profile(server, args, tmp, workers=1)
    client = f"AIPerf {AIPERF_VERSION}"
    if run.returncode != 0 or not run.records:
        return {"client": client, "error": f"exit {run.returncode}: {run.output[-800:]}"}
    srv = server_ttfts(server)
    added, ttft = [], []
    for r in run.records:
        rid = (r.get("metadata") or {}).get("x_request_id")
        t_ms = aiperf_value(r, "time_to_first_token")
        if t_ms is None:
            continue
        ttft.append(t_ms)
        if rid in srv:
            added.append(t_ms / 1e3 - srv[rid])
    return {
        "client": client,
        "sessions_held": 0,
        "requests": len(ttft),
        "rate_offered": rate,
        "joined": len(added),
        "added_ttft_p50_ms": p_ms(added, 50),
        "added_ttft_p99_ms": p_ms(added, 99),
        "ttft_p99_ms": pct(ttft, 99) if ttft else None,
        "wall_s": run.wall_s,
    }


# ---------------------------------------------------------------------------- output
COLUMNS = [  # (title, key, format)
    ("client", "client", "{}"), ("sessions held", "sessions_held", "{:,}"), ("requests", "requests", "{}"),
    ("joined", "joined", "{}"), ("added TTFT p50 ms", "added_ttft_p50_ms", "{:.3f}"),
    ("added TTFT p99 ms", "added_ttft_p99_ms", "{:.3f}"), ("TTFT p99 ms", "ttft_p99_ms", "{:.3f}"),
    ("sent/s", "sent_per_s", "{:.1f}"), ("sent/core-s", "sent_per_core_s", "{:.0f}"),
    ("client CPU max", "client_cpu_max", "{:.0%}"), ("sched lag p99 ms", "sched_lag_p99_ms", "{:.2f}"),
    ("RSS MB", "max_rss_mb", "{:.0f}"),
]


def table(rows: list[dict]) -> str:
    body = [["-" if r.get(k) is None else f.format(r[k]) for _, k, f in COLUMNS] for r in rows]
    return tables.render([c for c, _, _ in COLUMNS], body, align=">" * len(COLUMNS), rule=True)


def plot(rows: list[dict], path: Path) -> None:
    ok = [r for r in rows if r.get("added_ttft_p99_ms") is not None]
    panel = plots.Panel(
        [f"{r['client']}\n{r['sessions_held']:,} held" for r in ok],
        [plots.Series([r["added_ttft_p99_ms"] for r in ok], "p99"),
         plots.Series([r["added_ttft_p50_ms"] for r in ok], "p50", color="#dd8452")],
        [plots.Line(1.0, style="--", label="goal: 1 ms at 1,000 sessions")], value_label="client-added TTFT (ms)")
    plots.write(path, [panel], size=(6.5, 3.4))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1000,10000", help="sessions held, comma-separated")
    ap.add_argument("--context", type=int, default=140_000, help="tokens per request (AgentX median ~142K)")
    ap.add_argument("--rate", type=float, default=10.0, help="requests/s sent (both clients)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per level")
    ap.add_argument("--skip-aiperf", action="store_true")
    ap.add_argument("--aiperf-requests", type=int, default=100, help="AIPerf synthesises each prompt up front")
    ap.add_argument("--out", default=str(output("client_at_scale")))
    a = ap.parse_args()
    levels = [int(x) for x in a.sessions.split(",") if x]

    print(f"body build, {a.context:,}-token token-id bodies, one core:", flush=True)
    build = build_rate(a.context)
    for k, v in build.items():
        print(
            f"  {k:12s} {v['bodies_per_cpu_s']:7.1f} bodies/CPU-s  {v['mb_per_body']:.2f} MB/body  "
            f"{v['mb_per_cpu_s']:6.1f} MB/CPU-s",
            flush=True,
        )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="client-at-scale-") as d:
        tmp = Path(d)
        with start_engine(tmp) as server:
            server.wait_ready(120)
            for n in levels:
                r = run_benchcamp(server, n, a.context, a.rate, a.seconds, tmp)
                rows.append(r)
                print(table([r]).splitlines()[-1], flush=True)
            if not a.skip_aiperf:
                rows.append(run_aiperf(server, a.context, a.rate, a.aiperf_requests, tmp))
    print()
    print(table(rows))
    for r in rows:
        if r.get("error"):
            print(f"{r['client']}: {r['error']}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"build": build, "rows": rows, "args": vars(a)}, indent=2, default=str))
    plot(rows, out.with_suffix(".png"))
    print(f"\n{out}\n{out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
