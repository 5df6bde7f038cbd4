"""How fast is the benchmark client? Streamed chunks/s it sustains on one core,
counted at the server, side by side with GuideLLM and AIPerf.

    uv run python bench/loadgen_ceiling.py [--seconds 5] [--concurrency 256] [--bursts 1,4] [--skip-peers]

One streaming server (uvloop, non-blocking sockets, vLLM-shaped SSE chunks,
one HTTP chunk and one SSE event per token; requests stamped with the kernel's
receive time) runs pinned to one core; each client runs pinned to another. Every rate is counted by the server over the same
steady-state interval: what the client really read (the server stops writing
to a connection whose socket buffer is full), not what the client reports.

Burst k: the server writes k token chunks per socket write. With k = 1 every
token costs the server one send and the client one wake-up and one read; on
a VM those kernel costs (measured here: ~12 us per read for a client that does
nothing else) cap any client near 80K reads/s per core, and the server near
100K sends/s. k > 1 is what a busy server looks like anyway (the kernel
coalesces when either side lags); it lets the server outrun the client, so the
client's own ceiling shows.

Phases, per burst:
 1. server ceiling: a trivial raw client that reads and discards; and the
    floor: that client paced at 30K chunks/s, one token per read: its CPU per
    read is what any Python client pays before parsing anything;
 2. benchcamp at max speed (the server writes as fast as the client reads);
 3. benchcamp paced: offered rates up to 90% of the server's ceiling, with the
    validity rule (client CPU, scheduling lag, rate delivered) and the
    client-added TTFT (client TTFT minus the server's own arrival-to-first-write
    time, same CLOCK_MONOTONIC);
 4. 1,000 streams at 20,000 chunks/s in total: concurrency held (server's max
    in flight), client-added TTFT p50/p99, memory per active session;
 5. GuideLLM 0.8.1 and AIPerf 0.13.0 at the same concurrency, from their own
    venvs under ~/.cache/benchcamp/peers/ (bench/common/peers.py creates them on first use),
    with a tiny local tokenizer (no model hub is reachable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import peers
from bench.common.runs import benchcamp_point
from bench.common.servers import stop_group

MODEL = "bench-model"
_BODY = (b'{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"bench-model",'
         b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}],'
         b'"usage":null}')
_CHAT = (b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model",'
         b'"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}')


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


CHUNK = {False: _http_chunk(b"data: " + _BODY + b"\n\n"), True: _http_chunk(b"data: " + _CHAT + b"\n\n")}
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
MAX_TOKENS = re.compile(rb'"max_(?:completion_)?tokens"\s*:\s*(\d+)')


# ---------------------------------------------------------------------------- server
class StreamServer:
    """The state of this script's own streaming server (not an engine: vLLM-shaped chunks, no model)."""

    def __init__(self) -> None:
        self.tpot_s = 0.0
        self.ttft_s = 0.0
        self.burst = 1                           # token chunks per socket write
        self.buckets: dict[int, list] = {}       # paced mode: tick index -> streams due then
        self.next_tick = 1 << 62
        self.chunks = 0
        self.requests = 0
        self.active = 0
        self.max_active = 0
        self.log: dict[str, list[float]] = {}   # X-Request-Id -> [arrival, first write]
        self.ready: list = []                    # max-speed mode: streams due now
        self.scheduled = False


class Stream:
    __slots__ = ("conn", "left", "total", "chat", "rid", "prompt", "first", "due")

    def __init__(self, conn, left, chat, rid, prompt):
        self.conn, self.left, self.total, self.chat, self.rid, self.prompt = conn, left, left, chat, rid, prompt
        self.first = True
        self.due = 0.0


class Conn(asyncio.Protocol):
    def __init__(self, srv: StreamServer) -> None:
        self.srv = srv
        self.buf = bytearray()
        self.tr = None

    def connection_made(self, tr) -> None:
        self.tr = tr
        self.stream = None

    def connection_lost(self, exc) -> None:
        st = self.stream
        if st is not None and st.left > 0:  # the client went away mid-stream
            st.left = 0
            self.srv.active -= 1

    def feed(self, data: bytes, arrival: float) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = bytes(self.buf[:i])
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            n = int(m.group(1)) if m else 0
            if len(self.buf) < i + 4 + n:
                return
            body = bytes(self.buf[i + 4:i + 4 + n])
            del self.buf[:i + 4 + n]
            self.handle(head, body, arrival)

    def reply(self, obj: object, status: str = "200 OK") -> None:
        b = json.dumps(obj).encode()
        self.tr.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (status.encode(), len(b), b))

    def handle(self, head: bytes, body: bytes, arrival: float) -> None:
        srv = self.srv
        line = head.split(b"\r\n", 1)[0].split(b" ")
        method, path = line[0], line[1].split(b"?")[0]
        if path == b"/_stats":
            return self.reply({"chunks": srv.chunks, "t": time.monotonic(), "active": srv.active,
                               "max_active": srv.max_active, "requests": srv.requests})
        if path == b"/_config":
            cfg = json.loads(body or b"{}")
            srv.tpot_s, srv.ttft_s = float(cfg.get("tpot_s", srv.tpot_s)), float(cfg.get("ttft_s", srv.ttft_s))
            srv.burst = max(1, int(cfg.get("burst", srv.burst)))
            srv.max_active = srv.active
            if cfg.get("reset_log"):
                srv.log.clear()
            return self.reply({"ok": True})
        if path == b"/_log":
            return self.reply(srv.log)
        if path in (b"/v1/models", b"/models"):
            return self.reply({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]})
        if path in (b"/health", b"/metrics"):
            return self.reply({})
        if method != b"POST" or not path.endswith(b"completions"):
            return self.reply({"error": "not found"}, "404 Not Found")
        m = MAX_TOKENS.search(body)
        left = int(m.group(1)) if m else 16
        rid_m = re.search(rb"(?i)x-request-id:\s*(\S+)", head)
        rid = rid_m.group(1).decode() if rid_m else None
        if rid:
            srv.log[rid] = [arrival, 0.0]
        prompt = body.count(b",") + 1 if b'"prompt":[' in body else len(body) // 5
        srv.requests += 1
        srv.active += 1
        srv.max_active = max(srv.max_active, srv.active)
        self.tr.write(HEAD)
        st = Stream(self, left, path.endswith(b"chat/completions"), rid, prompt)
        self.stream = st
        if srv.ttft_s > 0 or srv.tpot_s > 0:
            st.due = asyncio.get_running_loop().time() + srv.ttft_s
            emit_paced(srv, st) if srv.ttft_s <= 0 else schedule(srv, st)
        else:
            queue_ready(srv, st)


def write_chunks(srv: StreamServer, st: Stream) -> None:
    """Up to ``srv.burst`` token chunks in one write (each its own HTTP chunk and SSE event);
    nothing while the client is not reading (the socket buffer holds 64 KiB)."""
    tr = st.conn.tr
    if tr.is_closing() or st.left <= 0 or tr.get_write_buffer_size() > 65536:
        return
    if st.first:
        st.first = False
        if st.rid and st.rid in srv.log:
            srv.log[st.rid][1] = time.monotonic()
    k = min(srv.burst, st.left)
    st.left -= k
    srv.chunks += k
    data = CHUNK[st.chat] * k
    if st.left <= 0:
        usage = {"prompt_tokens": st.prompt, "completion_tokens": st.total, "total_tokens": st.prompt + st.total,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        tail = b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"
        data += _http_chunk(tail) + b"0\r\n\r\n"
        srv.active -= 1
    tr.write(data)


TICK_S = 0.001    # paced mode: one timer per tick for all streams, not one per chunk


def emit_paced(srv: StreamServer, st: Stream) -> None:
    if st.left <= 0:
        return
    write_chunks(srv, st)
    if st.left > 0:
        # absolute schedule (no drift from timer lateness): write j at start + ttft + j * burst * tpot
        st.due += srv.tpot_s * srv.burst
        schedule(srv, st)


def schedule(srv: StreamServer, st: Stream) -> None:
    k = -int(-st.due // TICK_S)          # the first tick at or after the due time
    bucket = srv.buckets.get(k)
    if bucket is None:
        srv.buckets[k] = [st]
    else:
        bucket.append(st)
    if k < srv.next_tick:
        srv.next_tick = k
        asyncio.get_running_loop().call_at(k * TICK_S, tick, srv, k)


def tick(srv: StreamServer, k: int) -> None:
    if k != srv.next_tick:
        return                           # superseded by an earlier tick
    loop = asyncio.get_running_loop()
    # uvloop's timers have 1 ms granularity and may fire early: this tick's bucket is due
    # regardless (a chunk up to 1 ms early; the log keeps the real write time)
    now_k = max(k, int(loop.time() // TICK_S))
    for due in sorted(d for d in srv.buckets if d <= now_k):
        for st in srv.buckets.pop(due):
            emit_paced(srv, st)
    srv.next_tick = min(srv.buckets, default=1 << 62)
    if srv.buckets:
        loop.call_at(srv.next_tick * TICK_S, tick, srv, srv.next_tick)


def queue_ready(srv: StreamServer, st: Stream) -> None:
    srv.ready.append(st)
    if not srv.scheduled:
        srv.scheduled = True
        asyncio.get_running_loop().call_soon(emit_round, srv)


def emit_round(srv: StreamServer) -> None:
    """Max speed: one write to every stream per loop iteration (reads get their turn between)."""
    ready, srv.ready = srv.ready, []
    for st in ready:
        if st.left > 0:
            write_chunks(srv, st)
            if st.left > 0:
                srv.ready.append(st)
    loop = asyncio.get_running_loop()
    if srv.ready:
        loop.call_soon(emit_round, srv) if len(srv.ready) == len(ready) else loop.call_later(0.0002, emit_round, srv)
    else:
        srv.scheduled = False


def serve(port_file: str) -> None:
    import uvloop
    uvloop.install()

    import socket

    from benchcamp.loadgen.kernel_stamped import StampedConnection, read_buffer

    async def main() -> None:
        srv = StreamServer()
        loop = asyncio.get_running_loop()
        # Connections read requests with the kernel's receive stamps (benchcamp's own
        # kernel_stamped transport): a request "arrives" when it reached this machine, not when
        # this (busy) loop got to it, so the client-added TTFT excludes this server's queueing.
        # Writes are plain non-blocking sends, as fast as uvloop's transport (measured: same
        # ceiling within noise).
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4096)
        lsock.setblocking(False)
        buf = read_buffer()

        def accept() -> None:
            while True:
                try:
                    conn, _ = lsock.accept()
                except BlockingIOError:
                    return
                conn.setblocking(False)
                StampedConnection(loop, conn, Conn(srv), buf)
        loop.add_reader(lsock.fileno(), accept)
        Path(port_file).write_text(str(lsock.getsockname()[1]))
        await asyncio.Event().wait()
    asyncio.run(main())


# ---------------------------------------------------------------------------- trivial raw client
def raw_client(url: str, concurrency: int, max_tokens: int, seconds: float) -> None:
    """Reads and discards: a protocol that only watches for the end of each response and
    sends the next request. Its CPU per read is the floor any Python client pays."""
    import uvloop
    uvloop.install()
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": max_tokens, "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
           % len(body)) + body

    class Discard(asyncio.Protocol):
        def connection_made(self, tr) -> None:
            self.tr, self.tail = tr, b""
            tr.write(req)

        def data_received(self, data: bytes) -> None:
            self.tail = (self.tail + data[-5:])[-5:]
            if self.tail == b"0\r\n\r\n":   # the response's last chunk
                self.tail = b""
                self.tr.write(req)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(concurrency):
            await loop.create_connection(Discard, "127.0.0.1", port)
        await asyncio.sleep(seconds)
    asyncio.run(main())


# ---------------------------------------------------------------------------- benchcamp client run
def ours(url: str, concurrency: int, max_tokens: int, seconds: float, out: str, spread: float = 0.0) -> None:
    import numpy as np

    from benchcamp.loadgen import PointSpec
    from benchcamp.workload.model import Request, Session, Workload

    # spread > 0: output lengths uniform in max_tokens * [1 - spread, 1 + spread], so the
    # closed loop's sessions drift apart instead of starting and ending in lockstep waves
    rng = np.random.default_rng(7)
    lengths = np.maximum(1, np.round(max_tokens * rng.uniform(1 - spread, 1 + spread, concurrency * 4))).astype(int)
    sessions = [Session(f"s{i}", [Request(0, tuple(range(4 * i, 4 * i + 4)), 64, int(lengths[i]), 0.0)])
                for i in range(concurrency * 4)]
    wl = Workload("ceiling", 16, 32000, sessions)
    spec = PointSpec("ceiling", "closed", concurrency, warmup_s=1.0, duration_s=seconds, drain_s=10.0,
                     request_timeout_s=120, workers=1)
    run = benchcamp_point(url, wl, spec, Path(out), model=MODEL, metrics=False)
    res, df = run.result, run.records
    epoch = json.loads((Path(out) / "point.json").read_text())["epoch_monotonic"]
    log = json.loads(urllib.request.urlopen(url + "/_log").read())
    ok = df[df["error"].isna() & (df["sent_s"] >= 1.0)]
    added, request_leg, response_leg = [], [], []
    for r in ok.itertuples():
        arrival, first = log.get(f"{r.session_id}:{r.turn}", [0, 0])
        if first:
            added.append((r.first_token_s - r.sent_s) - (first - arrival))
            request_leg.append(arrival - (epoch + r.sent_s))          # client send -> server has it
            response_leg.append((epoch + r.first_token_s) - first)    # server wrote it -> client has it
    tpot = ((ok["last_token_s"] - ok["first_token_s"]) / (ok["chunks"] - 1)).to_numpy()
    h = res.client_health
    print(json.dumps({
        "requests": int(len(ok)), "errors": int(df["error"].notna().sum()),
        "client_added_ttft_p50_ms": float(np.percentile(added, 50) * 1e3) if added else None,
        "client_added_ttft_p99_ms": float(np.percentile(added, 99) * 1e3) if added else None,
        "request_leg_p99_ms": float(np.percentile(request_leg, 99) * 1e3) if added else None,
        "response_leg_p99_ms": float(np.percentile(response_leg, 99) * 1e3) if added else None,
        "tpot_p50_ms": float(np.nanpercentile(tpot, 50) * 1e3) if len(tpot) else None,
        "cpu_max": h.get("cpu_max"), "sched_lag_p99_ms": h.get("sched_lag_p99_ms"),
        "max_rss_mb": h.get("max_rss_mb"), "rss_start_mb": h.get("rss_start_mb"), "epoch": epoch,
        "chunks_per_read": h.get("chunks_per_read"), "in_flight_max": int(_max_in_flight(df, epoch)),
    }))


def _max_in_flight(df, epoch: float) -> int:
    """Most requests in flight at once, from the client's own records (sent .. done)."""
    import numpy as np
    ev = np.concatenate([np.c_[df["sent_s"].to_numpy(), np.ones(len(df))],
                         np.c_[df["done_s"].to_numpy(), -np.ones(len(df))]])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]
    return int(np.cumsum(ev[:, 1]).max()) if len(ev) else 0


# ---------------------------------------------------------------------------- orchestration
def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def _config(url: str, **kw: float) -> None:
    urllib.request.urlopen(urllib.request.Request(url + "/_config", json.dumps(kw).encode(), method="POST"), timeout=10)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pinned(cpu: int | None):
    return (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None


def measure(url: str, proc: subprocess.Popen, seconds: float, settle_s: float = 1.5,
            start_timeout: float = 180, cpu_of: int | None = None) -> dict:
    """Server-counted chunks/s over ``seconds`` once the client's chunks flow; with
    ``cpu_of`` (a pid), also that process's CPU microseconds per chunk over the same interval."""
    t0 = time.monotonic()
    base = _get(url + "/_stats")["chunks"]
    while _get(url + "/_stats")["chunks"] == base:
        if proc.poll() is not None or time.monotonic() - t0 > start_timeout:
            return {"error": f"client produced no traffic (exit {proc.poll()})"}
        time.sleep(0.2)
    time.sleep(settle_s)
    _config(url)                                   # resets max_active to the current in-flight count
    a, cpu_a = _get(url + "/_stats"), _cpu_seconds(cpu_of) if cpu_of else 0.0
    time.sleep(seconds)
    b, cpu_b = _get(url + "/_stats"), _cpu_seconds(cpu_of) if cpu_of else 0.0
    res = {"chunks_per_s": (b["chunks"] - a["chunks"]) / (b["t"] - a["t"]), "max_in_flight": b["max_active"],
           "in_flight_end": b["active"]}
    if cpu_of:
        res["cpu_us_per_chunk"] = (cpu_b - cpu_a) / max(1, b["chunks"] - a["chunks"]) * 1e6
    return res


def stop(proc: subprocess.Popen) -> str:
    """Stop a client (SIGINT to its group, as Ctrl-C would) and return what it printed."""
    stop_group(proc, signal.SIGINT, 15)
    return proc.stdout.read() if proc.stdout else ""


def run_client(argv: list[str], cpu: int | None, env: dict | None = None, cwd: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_pinned(cpu),
                            start_new_session=True, env=env, cwd=cwd)


def _run_peer(url: str, argv: list[str], seconds: float, cpu: int | None, env: dict, tmp: Path) -> dict:
    proc = run_client(argv, cpu, env, cwd=str(tmp))
    res = measure(url, proc, seconds, settle_s=5.0)   # time to ramp up to the target concurrency
    log = stop(proc)
    if "error" in res:
        res["log_tail"] = log[-1500:]
    return res


def peer_guidellm(url: str, concurrency: int, max_tokens: int, seconds: float, cpu: int | None, tmp: Path) -> dict:
    exe = peers.guidellm_exe()
    tok = peers.make_tokenizer(str(exe.parent / "python"), tmp / "tok-guidellm")
    if tok is None:
        return {"error": "could not build a local tokenizer in the guidellm venv"}
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": MODEL, "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": concurrency},
        "data": [{"kind": "synthetic_text", "prompt_tokens": 64, "output_tokens": max_tokens}],
        "tokenizer": {"kind": "huggingface_auto", "model": tok},
        "constraints": [{"kind": "max_duration", "seconds": seconds + 60}],
    }}
    sc = tmp / "guidellm-scenario.json"
    sc.write_text(json.dumps(scenario))
    env = dict(peers.offline_env(), GUIDELLM__MAX_CONCURRENCY=str(concurrency))
    argv = [str(exe), "run", "--scenario", str(sc), "--disable-console-interactive",
            "--output", f"kind=json,path={tmp / 'guidellm.json'}"]
    return _run_peer(url, argv, seconds, cpu, env, tmp)


def peer_aiperf(url: str, concurrency: int, max_tokens: int, seconds: float, cpu: int | None, tmp: Path,
                workers: int = 1) -> dict:
    # the word tokenizer as a repo of a private HF cache, offline (bench/common/peers.py says why not a path)
    hf = tmp / "hf"
    tok, env = peers.aiperf_tokenizer(hf), peers.offline_env(hf)
    argv = [str(peers.aiperf_exe()), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", tok, "--concurrency", str(concurrency), "--benchmark-duration", str(seconds + 60),
            "--prompt-input-tokens-mean", "64", "--prompt-output-tokens-mean", str(max_tokens),
            "--workers-max", str(workers), "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
            "--output-artifact-dir", str(tmp / f"aiperf-w{workers}")]
    return _run_peer(url, argv, seconds, cpu, env, tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="measurement interval per run")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=500, help="tokens per request at max speed")
    ap.add_argument("--bursts", default="1,4", help="token chunks per server write, one set of runs each")
    ap.add_argument("--rates", default="20000,30000,40000,60000,80000,100000,120000,140000,160000",
                    help="paced offered rates (chunks/s) for phase 3")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    ap.add_argument("--raw-client", nargs=4, metavar=("URL", "C", "N", "S"), help=argparse.SUPPRESS)
    ap.add_argument("--ours", nargs=6, metavar=("URL", "C", "N", "S", "OUT", "SPREAD"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return 0
    if a.raw_client:
        u, c, n, s = a.raw_client
        raw_client(u, int(c), int(n), float(s))
        return 0
    if a.ours:
        u, c, n, s, out, spread = a.ours
        ours(u, int(c), int(n), float(s), out, float(spread))
        return 0

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="bc-ceiling-"))
    port_file = tmp / "port"
    py = sys.executable
    me = str(Path(__file__).resolve())
    server = subprocess.Popen([py, me, "--serve", str(port_file)], preexec_fn=_pinned(server_cpu),
                              start_new_session=True)
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        C, N, S = a.concurrency, a.max_tokens, a.seconds
        bursts = [int(x) for x in a.bursts.split(",") if x]
        print(f"server pinned to cpu {server_cpu}, clients to cpu {client_cpu}; concurrency {C}, "
              f"{N} tokens per request, {S:g} s measured per run (load average {os.getloadavg()[0]:.1f})")
        print("burst k = token chunks the server writes per socket write (each its own HTTP chunk and SSE event)")
        rows: dict[str, dict] = {}

        def report(name: str, res: dict, extra: str = "") -> None:
            rows[name] = res
            if "error" in res:
                print(f"  {name:<36} FAILED: {res['error']}")
                if res.get("log_tail"):
                    print("    " + res["log_tail"].strip().replace("\n", "\n    ")[-800:])
                return
            print(f"  {name:<36} {res['chunks_per_s']:>10,.0f} chunks/s   max in flight {res['max_in_flight']:>5}"
                  f"{extra}", flush=True)

        def run_ours(c: int, n: int, seconds: float, label: str, spread: float = 0.0) -> tuple[dict, dict]:
            out = tmp / f"ours-{label}"
            proc = run_client([py, me, "--ours", url, str(c), str(n), str(seconds + 4), str(out), str(spread)],
                              client_cpu)
            res = measure(url, proc, seconds)
            try:
                text = proc.communicate(timeout=seconds + 120)[0]
            except subprocess.TimeoutExpired:
                text = stop(proc)
            info = {}
            for line in text.splitlines()[::-1]:
                if line.startswith("{"):
                    info = json.loads(line)
                    break
            if not info:
                res.setdefault("error", "no result from the client")
                res["log_tail"] = text[-1500:]
            res["client"] = info
            return res, info

        def health(info: dict, ttft: bool = True) -> str:
            if not info:
                return ""
            text = (f"   client cpu {info['cpu_max'] or 0:.0%}  sched lag p99 {info['sched_lag_p99_ms'] or 0:.1f} ms"
                    f"  chunks/read {info.get('chunks_per_read') or 0:.1f}")
            if ttft and info.get("client_added_ttft_p99_ms") is not None:
                # only meaningful when the server is not saturated (paced runs)
                text += (f"  added TTFT p50/p99 {info['client_added_ttft_p50_ms']:.2f}/"
                         f"{info['client_added_ttft_p99_ms']:.2f} ms")
            return text + f"  requests {info['requests']} errors {info['errors']}"

        ceiling: dict[int, float] = {}
        print("1. server ceiling (trivial raw client, reads and discards)")
        for k in bursts:
            _config(url, tpot_s=0.0, ttft_s=0.0, burst=k)
            proc = run_client([py, me, "--raw-client", url, str(C), str(N), str(S + 30)], client_cpu)
            res = measure(url, proc, S)
            stop(proc)
            report(f"raw client, burst {k}", res)
            ceiling[k] = res.get("chunks_per_s", 0.0)

        floor_rate = 30000.0
        _config(url, tpot_s=C / floor_rate, ttft_s=0.0, burst=1)
        proc = run_client([py, me, "--raw-client", url, str(C), str(max(20, int(floor_rate / C))), str(S + 30)],
                          client_cpu)
        rows["floor"] = res = measure(url, proc, S, cpu_of=proc.pid)
        stop(proc)
        per_read = res.get("cpu_us_per_chunk") or float("nan")
        print(f"  floor: the raw client paced at {floor_rate:,.0f}/s, burst 1 (one token per read): "
              f"{per_read:.1f} us of CPU per read (user+sys) -> at most {1e6 / per_read:,.0f} reads/s "
              f"on a whole core for any client that reads each token on its own")

        print("2. benchcamp client, one worker on one core, server at max speed (the client is saturated)")
        for k in bursts:
            _config(url, tpot_s=0.0, ttft_s=0.0, burst=k)
            res, info = run_ours(C, N, S, f"max-b{k}")
            report(f"benchcamp max speed, burst {k}", res, health(info, ttft=False))

        print("3. benchcamp client, paced (server tpot = concurrency / rate); valid = client cpu <= 90% "
              "and sched lag p99 <= 50 ms and >= 97% of the offered rate delivered")
        best: dict[int, float] = {}
        for k in bursts:
            for rate in [float(x) for x in a.rates.split(",") if x]:
                if rate > 0.9 * ceiling.get(k, 0.0):
                    print(f"  (burst {k}: {rate:,.0f}/s and up skipped: above 90% of this server's ceiling)")
                    break
                tpot = C / rate
                _config(url, tpot_s=tpot, ttft_s=0.0, burst=k, reset_log=1)
                res, info = run_ours(C, max(20, int(1.0 / tpot)), S, f"r{int(rate)}-b{k}", spread=0.5)
                ok = ("error" not in res and info and (info["cpu_max"] or 0) <= 0.9
                      and (info["sched_lag_p99_ms"] or 0) <= 50 and res["chunks_per_s"] >= 0.97 * rate)
                res["valid"] = bool(ok)
                if ok:
                    best[k] = max(best.get(k, 0.0), res["chunks_per_s"])
                report(f"offered {rate:,.0f}/s, burst {k}", res, health(info) + ("  VALID" if ok else "  invalid"))
            print(f"   burst {k}: highest valid rate {best.get(k, 0.0):,.0f} chunks/s "
                  f"(server ceiling {ceiling.get(k, 0.0):,.0f})")

        print("4. benchcamp, 1,000 streams at 20,000 chunks/s total (tpot 50 ms, burst 1, outputs 30-90 tokens)")
        _config(url, tpot_s=0.05, ttft_s=0.0, burst=1, reset_log=1)
        res, info = run_ours(1000, 60, S, "c1000", spread=0.5)
        report("benchcamp 1000 streams", res, health(info))
        if info:
            held = min(res.get("max_in_flight", 0), info.get("in_flight_max", 0))
            p99 = info.get("client_added_ttft_p99_ms")
            valid = (info["cpu_max"] or 0) <= 0.9 and (info["sched_lag_p99_ms"] or 0) <= 50
            print(f"   client validity: {'VALID' if valid else 'invalid'} (cpu {info['cpu_max'] or 0:.0%}, "
                  f"sched lag p99 {info['sched_lag_p99_ms'] or 0:.1f} ms)")
            print(f"   legs at p99: client send -> server kernel {info.get('request_leg_p99_ms') or 0:.3f} ms, "
                  f"server write -> client kernel {info.get('response_leg_p99_ms') or 0:.3f} ms")
            print(f"   streams held: {held} (server max in flight {res.get('max_in_flight')}, client records "
                  f"{info.get('in_flight_max')}); added TTFT p99 {p99 if p99 is not None else float('nan'):.2f} ms: "
                  f"target < 1 ms "
                  f"{'MET' if p99 is not None and p99 < 1.0 and valid else 'NOT met'}")
        if info and info.get("max_rss_mb") and info.get("rss_start_mb"):
            print(f"   memory per active session: {(info['max_rss_mb'] - info['rss_start_mb']) * 1024 / 1000:.1f} KiB "
                  f"(worker RSS {info['rss_start_mb']:.0f} -> {info['max_rss_mb']:.0f} MiB)")

        if not a.skip_peers:
            print(f"5. peers at concurrency {C}, server at max speed, same client core")
            for k in bursts:
                _config(url, tpot_s=0.0, ttft_s=0.0, burst=k)
                report(f"GuideLLM {peers.GUIDELLM_VERSION}, burst {k}", peer_guidellm(url, C, N, S, client_cpu, tmp))
                report(f"AIPerf {peers.AIPERF_VERSION} (1 worker), burst {k}", peer_aiperf(url, C, N, S, client_cpu, tmp, workers=1))
        print("summary (chunks/s counted at the server):")
        for k in bursts:
            line = (f"  burst {k}: server ceiling {ceiling.get(k, 0):,.0f}; benchcamp max "
                    f"{rows.get(f'benchcamp max speed, burst {k}', {}).get('chunks_per_s', 0):,.0f}, "
                    f"highest valid paced {best.get(k, 0.0):,.0f}")
            for peer in (f"GuideLLM {peers.GUIDELLM_VERSION}", f"AIPerf {peers.AIPERF_VERSION} (1 worker)"):
                r = rows.get(f"{peer}, burst {k}")
                if r and "chunks_per_s" in r:
                    line += f"; {peer} {r['chunks_per_s']:,.0f} (max in flight {r['max_in_flight']})"
            print(line)
        print(json.dumps({name: {k: v for k, v in r.items() if k != "log_tail"} for name, r in rows.items()}))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
