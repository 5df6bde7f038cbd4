"""The router's cost in the measurement path: streamed SSE chunks per second straight from the simulated
engine (``--time-scale 0``: the server's own Python work is the bottleneck) and through ``benchcamp router``
in front of it, with bench/engine_server_speed.py's client (bench.common.runs.count_chunks). The router passes bytes through as they arrive
(no parsing per token), so the question is how many chunks/s one router process forwards.

    uv run python bench/router_speed.py [--streams 128] [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench.common.runs import count_chunks, event_loop_runner
from bench.common.servers import SERVE_LINE, SIM_MODEL, start_listening
from benchcamp.router import router_argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4000)
    a = ap.parse_args()
    engine = [sys.executable, "-m", "benchcamp.cli", "engine", "serve", "--model", SIM_MODEL, "--gpu", "h200",
              "--host", "127.0.0.1", "--port", "0", "--time-scale", "0", "--max-num-seqs", str(a.streams),
              "--max-num-batched-tokens", str(max(8192, a.streams * 64))]
    srv, (host, port) = start_listening(engine, SERVE_LINE)
    router, (rhost, rport) = start_listening(router_argv("127.0.0.1", 0, unified=[f"http://{host}:{port}"]),
                                             r"router serving on http://([\d.]+):(\d+)")
    run = event_loop_runner()
    try:
        direct = [run(count_chunks(host, port, a.streams, a.seconds, a.max_tokens, SIM_MODEL)) for _ in range(a.repeats)]
        routed = [run(count_chunks(rhost, rport, a.streams, a.seconds, a.max_tokens, SIM_MODEL))
                  for _ in range(a.repeats)]
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
