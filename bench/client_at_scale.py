"""Client speed at AgentX scale: ~140K-token token-id bodies (~1 MB of JSON each), bodies built
and sent per second per core, and the client-added TTFT p99 with 1,000 and 10,000 sessions held
by 1, 2, ... client processes, beside AIPerf on the same server in the same run.

    uv run --frozen python bench/client_at_scale.py [--sessions 1000,10000] [--processes 1,2] [--context 140000]
        [--rate 10] [--osl 8] [--seconds 30] [--skip-aiperf] [--out bench/results/client_at_scale/client_at_scale.json]

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
requests/s per process. With ``--processes P`` the point runs P client worker processes (PointSpec
``workers``) at P x ``--rate`` requests/s, the N sessions split among them by the load generator's
own plan (``trace_plan``). "Sent per core-second" = the point's sent rate over the sum of its
workers' mean CPU shares (each worker's CPU time over the window, from its health); "chunks/s per
process" = the content chunks (the records' ``chunks`` column: one per output token on the simulated
engine) of the requests sent in the window, per second of the window, over P. Beside it, the CPU of
the whole client (this process, the load generator's coordinator, plus every descendant but the
server: psutil, sampled every 0.5 s) over the window, per request sent ("tree" columns): the figure
that compares with AIPerf's, which is measured the same way over its process tree.

AIPerf (0.13.0, its own venv under ~/.cache/benchcamp/peers/, created on first use) runs on the
same server right after, at the same request rate with the same prompt and output lengths
(``--request-rate R --isl C --osl O``, synthetic text of a local one-word-per-token tokenizer,
which the simulated engine counts as one token per word): AIPerf has no notion of idle sessions,
so its row is the same request stream without the N held sessions; its added TTFT joins its
records' ``x_request_id`` with the same server log. For P processes AIPerf runs with
``--workers-max P`` at P x ``--rate`` (``--aiperf-requests`` x P requests); its CPU is its process
tree's (all its services: workers, timing, dataset and records managers) between its first and its
last request's start (the records' ``request_start_ns``).

Outputs: a table, the JSON (``--out``) and a PNG beside it. A few minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
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
def agentx_like(n: int, context: int, rate: float, seed: int = 0, out_tokens: int = OUT_TOKENS):
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
                    Request(0, b0, len(b0) * BLOCK, out_tokens, float(rng.uniform(0, period))),
                    Request(1, b1, len(b1) * BLOCK, out_tokens, period),
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


class TreeCpu:
    """CPU seconds (user + system) of this process and all its descendants but ``exclude``'s tree (the
    server), sampled every ``interval_s`` on a thread; each process counts with its last sample, so
    processes that exit (the load generator's workers) keep their CPU in the running total."""

    def __init__(self, exclude: int | None, interval_s: float = 0.5) -> None:
        import threading

        self.exclude, self.interval_s = exclude, interval_s
        self.samples: list[tuple[float, float]] = []  # (monotonic, cumulative CPU seconds)
        self._last: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        skip: set[int] = set()
        if self.exclude is not None:
            try:
                srv = psutil.Process(self.exclude)
                skip = {srv.pid} | {c.pid for c in srv.children(recursive=True)}
            except psutil.Error:
                pass
        for p in [me, *me.children(recursive=True)]:
            if p.pid in skip:
                continue
            try:
                t = p.cpu_times()
                self._last[(p.pid, p.create_time())] = t.user + t.system
            except psutil.Error:
                continue
        self.samples.append((time.monotonic(), sum(self._last.values())))

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                self._sample()
                return

    def between(self, t0: float, t1: float) -> float | None:
        """CPU seconds between two monotonic times (interpolated between samples)."""
        if len(self.samples) < 2 or t1 <= t0:
            return None
        ts, cs = zip(*self.samples)
        return float(np.interp(t1, ts, cs) - np.interp(t0, ts, cs))


# ---------------------------------------------------------------------------- benchcamp
def run_benchcamp(server: Server, n: int, context: int, rate: float, seconds: float, tmp: Path,
                  processes: int = 1, osl: int = OUT_TOKENS) -> dict:
    """One point: ``processes`` client workers at ``processes`` x ``rate`` requests/s, ``n`` sessions held."""
    from benchcamp.loadgen import PointSpec

    wl = agentx_like(n, context, rate * processes, seed=n, out_tokens=osl)
    spec = PointSpec(
        f"s{n}-p{processes}", "trace", 1.0, warmup_s=3.0, duration_s=seconds, drain_s=20.0, request_timeout_s=60,
        workers=processes,
    )
    with TreeCpu(server.proc.pid if server.proc else None) as tree:
        run = benchcamp_point(server, wl, spec, tmp / f"bc-{n}-p{processes}", metrics=False)
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
    in_window = (df["sent_s"] >= w0) & (df["sent_s"] < w1)
    sent = int(in_window.sum()) / max(w1 - w0, 1e-9)
    chunks = float(df.loc[in_window, "chunks"].sum()) / max(w1 - w0, 1e-9)
    shares = h.get("cpu_mean_per_worker") or []  # each worker's mean share of one core over the window
    cpu = sum(shares) if len(shares) == processes else None
    epoch = json.loads((Path(res.records_path).parent / "point.json").read_text())["epoch_monotonic"]
    tree_cpu = tree.between(epoch + w0, epoch + w1)
    tree_share = tree_cpu / (w1 - w0) if tree_cpu is not None else None
    return {
        "client": "benchcamp",
        "processes": processes,
        "sessions_held": n,
        "requests": int(len(ok)),
        "errors": int(df["error"].notna().sum()),
        "rate_offered": rate * processes,
        "joined": len(added),
        "added_ttft_p50_ms": p_ms(added, 50),
        "added_ttft_p99_ms": p_ms(added, 99),
        "ttft_p99_ms": p_ms((ok.first_token_s - ok.sent_s).to_numpy(), 99),
        "client_cpu_max": h.get("cpu_max"),
        "sched_lag_p99_ms": h.get("sched_lag_p99_ms"),
        "max_rss_mb": h.get("max_rss_mb"),
        "client_cpu_mean_per_worker": shares,
        "client_cpu_mean": cpu / processes if cpu is not None else None,
        "sent_per_s": sent,
        "sent_per_s_per_process": sent / processes,
        "chunks_per_s_per_process": chunks / processes,
        "chunks_per_read": h.get("chunks_per_read"),
        "wall_s": wall,
        # requests sent per second of one core's time (the rate over the sum of the workers' mean CPU shares)
        "sent_per_core_s": sent / cpu if cpu else None,
        # the same over the whole client's CPU (coordinator + workers), as AIPerf's is measured
        "tree_cores": tree_share,
        "tree_sent_per_core_s": sent / tree_share if tree_share else None,
        # the whole point's client CPU (worker start, warm-up, drain included)
        "run_cpu_s": tree.between(tree.samples[0][0], tree.samples[-1][0]),
        "error_kinds": {str(k)[:120]: int(v) for k, v in df["error"].value_counts().head(3).items()},
    }


# ---------------------------------------------------------------------------- AIPerf
def run_aiperf(server: Server, context: int, rate: float, count: int, tmp: Path, processes: int = 1,
               osl: int = OUT_TOKENS) -> dict:
    """AIPerf with ``--workers-max processes`` at ``processes`` x ``rate`` requests/s, ``count`` x processes requests."""
    total = rate * processes
    args = ["--request-rate", str(total), "--request-count", str(count * processes), "--isl", str(context),
            "--isl-stddev", "0", "--osl", str(osl), "--extra-inputs", f"min_tokens:{osl}", "--extra-inputs",
            "ignore_eos:true", "--use-server-token-count"]
    wall_minus_mono = time.time() - time.monotonic()
    with TreeCpu(server.proc.pid if server.proc else None) as tree:
        run = aiperf_profile(server, args, tmp / f"aiperf-p{processes}", workers=processes)
    client = f"AIPerf {AIPERF_VERSION}"
    if run.returncode != 0 or not run.records:
        return {"client": client, "processes": processes, "error": f"exit {run.returncode}: {run.output[-800:]}"}
    srv = server_ttfts(server)
    added, ttft, starts, chunks = [], [], [], 0.0
    for r in run.records:
        meta = r.get("metadata") or {}
        if meta.get("request_start_ns"):
            starts.append(meta["request_start_ns"] / 1e9 - wall_minus_mono)
        chunks += aiperf_value(r, "output_sequence_length") or 0
        rid = (r.get("metadata") or {}).get("x_request_id")
        t_ms = aiperf_value(r, "time_to_first_token")
        if t_ms is None:
            continue
        ttft.append(t_ms)
        if rid in srv:
            added.append(t_ms / 1e3 - srv[rid])
    span = (max(starts) - min(starts)) if len(starts) > 1 else None
    # requests started after the first, over the span between the first and the last start
    sent = (len(starts) - 1) / span if span else None
    tree_cpu = tree.between(min(starts), max(starts)) if span else None
    tree_share = tree_cpu / span if tree_cpu is not None and span else None
    return {
        "client": client,
        "processes": processes,
        "sessions_held": 0,
        "requests": len(ttft),
        "rate_offered": total,
        "joined": len(added),
        "added_ttft_p50_ms": p_ms(added, 50),
        "added_ttft_p99_ms": p_ms(added, 99),
        "ttft_p99_ms": pct(ttft, 99) if ttft else None,
        "sent_per_s": sent,
        "sent_per_s_per_process": sent / processes if sent else None,
        # output tokens of all requests (one chunk each) over the span of the starts, per worker
        "chunks_per_s_per_process": chunks / span / processes if span else None,
        "wall_s": run.wall_s,
        "wall_minus_monotonic_s": wall_minus_mono,
        "tree_cores": tree_share,
        # the whole run's client CPU, its prompt synthesis and start included
        "run_cpu_s": tree.between(tree.samples[0][0], tree.samples[-1][0]),
        "tree_sent_per_core_s": sent / tree_share if sent and tree_share else None,
    }


# ---------------------------------------------------------------------------- output
COLUMNS = [  # (title, key, format)
    ("client", "client", "{}"), ("processes", "processes", "{}"), ("sessions held", "sessions_held", "{:,}"),
    ("requests", "requests", "{}"),
    ("joined", "joined", "{}"), ("added TTFT p50 ms", "added_ttft_p50_ms", "{:.3f}"),
    ("added TTFT p99 ms", "added_ttft_p99_ms", "{:.3f}"), ("TTFT p99 ms", "ttft_p99_ms", "{:.3f}"),
    ("sent/s", "sent_per_s", "{:.1f}"), ("sent/core-s", "sent_per_core_s", "{:.0f}"),
    ("tree cores", "tree_cores", "{:.2f}"), ("tree sent/core-s", "tree_sent_per_core_s", "{:.0f}"),
    ("chunks/s/process", "chunks_per_s_per_process", "{:,.0f}"),
    ("client CPU max", "client_cpu_max", "{:.0%}"), ("sched lag p99 ms", "sched_lag_p99_ms", "{:.2f}"),
    ("RSS MB", "max_rss_mb", "{:.0f}"),
]


def table(rows: list[dict]) -> str:
    body = [["-" if r.get(k) is None else f.format(r[k]) for _, k, f in COLUMNS] for r in rows]
    return tables.render([c for c, _, _ in COLUMNS], body, align=">" * len(COLUMNS), rule=True)


def plot(rows: list[dict], path: Path) -> None:
    ok = [r for r in rows if r.get("added_ttft_p99_ms") is not None]
    labels = [f"{r['client']}\n{r.get('processes', 1)} proc, "
              + (f"{r['sessions_held']:,} held" if r["sessions_held"] else "rate only") for r in ok]
    ttft = plots.Panel(
        labels,
        [plots.Series([r["added_ttft_p99_ms"] for r in ok], "p99"),
         plots.Series([r["added_ttft_p50_ms"] for r in ok], "p50", color="#dd8452")],
        [plots.Line(1.0, style="--", label="goal: 1 ms at 1,000 sessions")], value_label="client-added TTFT (ms)",
        label_size=7.0)
    per_core = plots.Panel(
        labels,
        [plots.Series([r.get("sent_per_core_s") or 0.0 for r in ok], "workers' CPU", width=0.4, offset=-0.2),
         plots.Series([r.get("tree_sent_per_core_s") or 0.0 for r in ok], "whole client's CPU", color="#55a868",
                      width=0.4, offset=0.2)],
        value_label="requests sent per core-second", label_size=7.0)
    plots.write(path, [ttft, per_core], size=(7.5, 6.4))


def uptime() -> list[float]:
    """The load average (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1000,10000", help="sessions held, comma-separated")
    ap.add_argument("--context", type=int, default=140_000, help="tokens per request (AgentX median ~142K)")
    ap.add_argument("--processes", default="1", help="client processes per point, comma-separated (both clients)")
    ap.add_argument("--rate", type=float, default=10.0, help="requests/s sent per process (both clients)")
    ap.add_argument("--osl", type=int, default=OUT_TOKENS, help="output tokens (= SSE chunks) per request")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per level")
    ap.add_argument("--skip-aiperf", action="store_true")
    ap.add_argument("--aiperf-requests", type=int, default=100,
                    help="AIPerf's requests per process (it synthesises each prompt up front)")
    ap.add_argument("--out", default=str(output("client_at_scale")))
    a = ap.parse_args()
    levels = [int(x) for x in a.sessions.split(",") if x]
    procs = [int(x) for x in a.processes.split(",") if x]
    load_before = uptime()

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
            for p in procs:
                for n in levels:
                    r = run_benchcamp(server, n, a.context, a.rate, a.seconds, tmp, p, a.osl)
                    rows.append(r)
                    print(table([r]).splitlines()[-1], flush=True)
                if not a.skip_aiperf:
                    rows.append(run_aiperf(server, a.context, a.rate, a.aiperf_requests, tmp, p, a.osl))
                    print(table([rows[-1]]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    for r in rows:
        if r.get("error"):
            print(f"{r['client']}: {r['error']}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load = {"before": load_before, "after": uptime()}
    print(f"load average (1, 5, 15 min): before {load['before']}, after {load['after']}")
    doc = {"build": build, "rows": rows, "args": vars(a), "load_average": load, "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d", time.gmtime())}
    out.write_text(json.dumps(doc, indent=2, default=str))
    plot(rows, out.with_suffix(".png"))
    print(f"\n{out}\n{out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
