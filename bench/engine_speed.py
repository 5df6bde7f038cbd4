"""Virtual-time speed of the simulated engine: simulated seconds per wall-clock second.

An 8 x H200 DeepSeek-V3-class deployment (dp=8, expert parallel, FP8 weights,
the default params) replaying the default agentic workload
(workloads/data/agentic-coding.parquet; built from workloads/agentic-coding.yaml
if missing) in closed loop at high concurrency. The process is pinned to one
CPU (``--cpu``). Reports, per level, the median over ``--repeats`` runs of
simulated seconds per wall-clock second and per CPU second of this process
(CPU time is the fairer figure on a shared, oversubscribed machine), plus what
was simulated (requests, tokens/s/GPU, cache hit rate) so the load is visible.

    uv run python bench/engine_speed.py [--levels 256 512] [--duration-s 300] [--repeats 3] [--cpu 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench.common import tables
from bench.common.paths import ROOT, command
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.workload.model import Workload, read_workload

COLUMNS = ["sessions", "simulated s", "wall s", "cpu s", "sim/wall", "sim/cpu", "requests", "steps", "tok/s/GPU",
           "hit rate"]
WIDTHS = [8, 12, 8, 7, 10, 9, 9, 7, 11, 9]
DATA = ROOT / "workloads/data/agentic-coding.parquet"
SPEC = ROOT / "workloads/agentic-coding.yaml"


def load_workload() -> Workload:
    if DATA.exists():
        return read_workload(DATA)
    from benchcamp.workload import build_workload

    print(f"{DATA} missing: building it from {SPEC}", file=sys.stderr)
    return build_workload(SPEC, DATA)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[256, 512], help="concurrent sessions")
    ap.add_argument("--warmup-s", type=float, default=30.0)
    ap.add_argument("--duration-s", type=float, default=300.0, help="simulated measurement window")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="pin to this CPU (-1: do not pin)")
    args = ap.parse_args()
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    print("command: " + command())
    wl = load_workload()
    settings = EngineSettings(model="deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=1,
                              data_parallel_size=8, enable_expert_parallel=True)
    print(f"workload {wl.name} ({len(wl.sessions)} sessions, digest {wl.digest[:12]}); "
          f"{settings.model} on 8 x {settings.gpu}, dp=8 + expert parallel; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(tables.render(COLUMNS, [], widths=WIDTHS, align=">" * len(COLUMNS)))
    for level in args.levels:
        rows = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            df = simulate(wl, settings,
                          SimLoad(mode="closed", level=level, warmup_s=args.warmup_s, duration_s=args.duration_s, drain_s=60.0))
            a = df.attrs
            rows.append((a["simulated_s"], a["wall_s"], a["cpu_s"], len(df), a["steps"], df,
                         time.perf_counter() - t0))
        sim = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        cpu = statistics.median(r[2] for r in rows)
        speed_wall = statistics.median(r[0] / r[1] for r in rows)
        speed_cpu = statistics.median(r[0] / r[2] for r in rows)
        df = rows[0][5]
        w0, w1 = df.attrs["window"]
        ok = df[(df.status == 200) & (df.sent_s >= w0) & (df.sent_s < w1)]
        tput = (ok.prompt_tokens.sum() + ok.completion_tokens.sum()) / (w1 - w0) / settings.gpus
        c = df.attrs["server_counters"]
        hit = c["prefix_cache_hits_total"] / max(c["prefix_cache_queries_total"], 1)
        cells = [str(level), f"{sim:.1f}", f"{wall:.2f}", f"{cpu:.2f}", f"{speed_wall:.0f}x", f"{speed_cpu:.0f}x",
                 str(rows[0][3]), str(rows[0][4]), f"{tput:,.0f}", f"{hit:.1%}"]
        print(tables.render([], [cells], widths=WIDTHS, align=">" * len(COLUMNS)), flush=True)
    print(f"(medians of {args.repeats} runs; wall and CPU time of the simulation loop in this process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
