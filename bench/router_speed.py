"""The router's cost in the measurement path: streamed SSE chunks per second straight from the simulated
engine (``--time-scale 0``: the server's own Python work is the bottleneck) and through ``benchcamp router``
in front of it, with bench/engine_server_speed.py's client. The router passes bytes through as they arrive
(no parsing per token), so the question is how many chunks/s one router process forwards.

    uv run python bench/router_speed.py [--streams 128] [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from engine_server_speed import MODEL, measure  # noqa: E402

from benchcamp.router import router_argv  # noqa: E402


def _start(cmd: list[str], pattern: str) -> tuple[subprocess.Popen, tuple[str, int]]:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if m := re.search(pattern, line):
            return proc, (m.group(1), int(m.group(2)))
    raise RuntimeError(f"{cmd[:4]} did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4000)
    a = ap.parse_args()
    engine = [sys.executable, "-m", "benchcamp.cli", "engine", "serve", "--model", MODEL, "--gpu", "h200",
              "--host", "127.0.0.1", "--port", "0", "--time-scale", "0", "--max-num-seqs", str(a.streams),
              "--max-num-batched-tokens", str(max(8192, a.streams * 64))]
    srv, (host, port) = _start(engine, r"Uvicorn running on http://([\d.]+):(\d+)")
    router, (rhost, rport) = _start(router_argv("127.0.0.1", 0, unified=[f"http://{host}:{port}"]),
                                    r"router serving on http://([\d.]+):(\d+)")
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        direct = [run(measure(host, port, a.streams, a.seconds, a.max_tokens)) for _ in range(a.repeats)]
        routed = [run(measure(rhost, rport, a.streams, a.seconds, a.max_tokens)) for _ in range(a.repeats)]
    finally:
        for p in (router, srv):
            p.terminate()
            p.wait(10)
    d, r = statistics.median(direct), statistics.median(routed)
    print(f"command: uv run python bench/router_speed.py --streams {a.streams} --seconds {a.seconds} "
          f"--repeats {a.repeats} --max-tokens {a.max_tokens}")
    print(f"direct chunks/s:        {', '.join(f'{x:,.0f}' for x in direct)} (median {d:,.0f})")
    print(f"through router chunks/s: {', '.join(f'{x:,.0f}' for x in routed)} (median {r:,.0f}, {r / d:.0%} of direct)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
