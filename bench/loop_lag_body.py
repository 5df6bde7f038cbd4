"""Does the client's event loop keep its timing while it builds large request bodies?

    uv run python bench/loop_lag_body.py [--tokens 140000] [--bodies 40] [--out bench/results/loop_lag_body/loop_lag_body.json]

A ticker on the worker's event loop asks to wake every 1 ms; meanwhile the load generator's
``Worker.prepare`` builds ``--bodies`` AgentX-sized token-id bodies (``--tokens`` tokens each, new blocks
every time: the cache misses, the costly case), one after another. The ticker's lateness (actual wake-up
minus asked) is the loop lag every stream in flight would see: its p50/p99/max are printed for bodies built
off the loop (the default: Worker's builder thread) and, beside them, built inline on the loop
(``Worker.build_body`` called directly, as before). Timings on a shared box are noisy: the load
(/proc/loadavg) is written with them, and the command that made them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common.paths import command, output
from benchcamp.loadgen.replay import Turn
from benchcamp.loadgen.worker import Ctrl, Stat, Worker, WorkerPlan
from benchcamp.workload.model import Request, Session, Workload


def _worker(tmp: Path) -> Worker:
    wl = Workload("lag", 16, 32000, [Session("s", [Request(0, (0,), 16, 1, 0.0)])])
    plan = WorkerPlan(
        index=0,
        workers=1,
        label="lag",
        endpoint="http://127.0.0.1:9",
        api_key=None,
        model="m",
        api="completions",
        workload=wl,
        mode="closed",
        records_path=str(tmp / "r.parquet"),
    )
    return Worker(plan, [0.0] * Ctrl.N, [0.0] * Stat.N)


async def _measure(worker: Worker, tokens: int, bodies: int, inline: bool, first_block: int) -> dict[str, float]:
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            asked = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            lags.append(max(0.0, time.perf_counter() - asked))

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    blocks_per = tokens // 16
    for i in range(bodies):
        start = first_block + i * blocks_per  # fresh blocks: every block a cache miss
        blocks = tuple(range(start, start + blocks_per))
        turn = Turn("s", None, Request(0, blocks, tokens, 8, 0.0), 0.0)
        if inline:
            worker.build_body(turn)
        else:
            await worker.prepare(turn)
        await asyncio.sleep(0)
    built_s = time.perf_counter() - t0
    stop = True
    await tick
    ms = np.array(lags) * 1e3
    return {
        "bodies_per_s": round(bodies / built_s, 1),
        "loop_lag_p50_ms": round(float(np.percentile(ms, 50)), 2),
        "loop_lag_p99_ms": round(float(np.percentile(ms, 99)), 2),
        "loop_lag_max_ms": round(float(ms.max()), 2),
        "ticks": len(lags),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=140_000)
    ap.add_argument("--bodies", type=int, default=40)
    ap.add_argument("--out", type=Path, default=output("loop_lag_body"))
    args = ap.parse_args()
    out: dict = {"command": command(), "tokens_per_body": args.tokens, "bodies": args.bodies}
    out["loadavg_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        worker = _worker(Path(tmp))
        for k, (name, inline) in enumerate((("off_loop", False), ("inline", True))):
            out[name] = asyncio.run(_measure(worker, args.tokens, args.bodies, inline, k * args.bodies * args.tokens))
        worker.builder.shutdown()
        worker.writer.close()
    out["loadavg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
