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
import os
import statistics
import sys

from bench.common.runs import count_chunks, event_loop_runner
from bench.common.servers import SERVE_LINE, SIM_MODEL, start_listening


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
    cmd = [sys.executable, "-m", "benchcamp.cli", "engine", "serve", "--model", SIM_MODEL, "--gpu", "h200",
           "--host", "127.0.0.1", "--port", "0", "--time-scale", "0", "--max-num-seqs", str(max(a.streams, 1)),
           "--max-num-batched-tokens", str(max(8192, a.streams * 64))]
    pin = ncpu > 1
    srv, (host, port) = start_listening(cmd, SERVE_LINE,
                                        preexec_fn=(lambda: os.sched_setaffinity(0, {a.server_cpu})) if pin else None)
    try:
        if pin:
            os.sched_setaffinity(0, {a.client_cpu})
        runner = event_loop_runner()
        rates = [runner(count_chunks(host, port, a.streams, a.seconds, a.max_tokens, SIM_MODEL))
                 for _ in range(a.repeats)]
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
