"""The simulated vLLM HTTP server's ceiling in streamed SSE chunks per second on one core.

The server runs pinned to one CPU with ``--time-scale 0`` (a benchmark-only flag:
modelled GPU step times are zero, so the server's own Python work - the engine
core's scheduling plus HTTP/SSE - is the bottleneck). The client runs pinned to
another CPU: raw asyncio protocols, C keep-alive connections each streaming
completions back to back, counting ``data: `` events. Prints the median chunks/s
over the repeats and the command line to reproduce it.

    uv run python bench/engine_server_speed.py [--streams 256] [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class StreamClient(asyncio.Protocol):
    """One keep-alive connection that streams completion after completion."""

    def __init__(self, request: bytes, counter: list[int]) -> None:
        self.request, self.counter, self.tail = request, counter, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buf = self.tail + data
        self.counter[0] += buf.count(b"data: {")
        if b"data: [DONE]" in buf:
            # chunked body ends with 0\r\n\r\n right after [DONE]; send the next request
            self.transport.write(self.request)
        self.tail = buf[-11:]  # shorter than "data: [DONE]": never detected twice
        # avoid double counting across the overlap
        self.counter[0] -= self.tail.count(b"data: {")

    def connection_lost(self, exc: Exception | None) -> None:
        self.counter[1] += 1


async def measure(host: str, port: int, streams: int, seconds: float, max_tokens: int) -> float:
    body = json.dumps({"model": MODEL, "prompt": list(range(1000, 1032)), "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%b" % (host.encode(), len(body), body))
    counter = [0, 0]
    loop = asyncio.get_running_loop()
    conns = [await loop.create_connection(lambda: StreamClient(req, counter), host, port) for _ in range(streams)]
    await asyncio.sleep(1.0)                         # warm up: all streams running
    c0, t0 = counter[0], time.perf_counter()
    await asyncio.sleep(seconds)
    c1, t1 = counter[0], time.perf_counter()
    for tr, _ in conns:
        tr.close()
    if counter[1] > len(conns):
        raise RuntimeError("connections were lost during the measurement")
    return (c1 - c0) / (t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256, help="concurrent streams (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4000, help="tokens per streamed completion")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    cmd = [sys.executable, "-m", "benchcamp.cli", "engine", "serve", "--model", MODEL, "--gpu", "h200",
           "--host", "127.0.0.1", "--port", "0", "--time-scale", "0", "--max-num-seqs", str(max(a.streams, 1)),
           "--max-num-batched-tokens", str(max(8192, a.streams * 64))]
    pin = ncpu > 1
    srv = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=(lambda: os.sched_setaffinity(0, {a.server_cpu})) if pin else None)
    try:
        url = None
        assert srv.stdout is not None
        for line in srv.stdout:
            m = re.search(r"Uvicorn running on http://([\d.]+):(\d+)", line)
            if m:
                url = (m.group(1), int(m.group(2)))
                break
        if url is None:
            raise RuntimeError("server did not start")
        if pin:
            os.sched_setaffinity(0, {a.client_cpu})
        try:
            import uvloop
            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        rates = [runner(measure(url[0], url[1], a.streams, a.seconds, a.max_tokens)) for _ in range(a.repeats)]
    finally:
        srv.terminate()
        srv.wait(10)
    print(f"command: uv run python bench/engine_server_speed.py --streams {a.streams} --seconds {a.seconds} "
          f"--repeats {a.repeats} --max-tokens {a.max_tokens}")
    print(f"server pinned to cpu {a.server_cpu if pin else 'any'}, client to cpu {a.client_cpu if pin else 'any'}; "
          f"{a.streams} concurrent streams, --time-scale 0")
    print("chunks/s per repeat: " + ", ".join(f"{r:,.0f}" for r in rates))
    print(f"median streamed chunks/s (one core): {statistics.median(rates):,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
