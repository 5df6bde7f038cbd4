"""Virtual-clock speed at rack scale: simulated seconds per wall second and peak memory, by GPU count and
concurrency, on an AgentX-like workload (workloads/agentx-like.yaml: median input ~142K, output ~444, subagents).

Deployments (DeepSeek-V4.1-Flash, the seed record's model; DSpark K=5 at a synthetic acceptance length 3.5):
  8   GPUs  8 x B200, one unified TP4 x DP2 + EP engine
  16  GPUs  2 x 8 B200, 1P1D (TP8 + EP each, NIXL over RDMA, session affinity)
  72  GPUs  one GB300 NVL72 rack: 3 prefill engines (DP8+EP) + 1 decode engine (DP48+EP), NVLink, DBO
Each (deployment, sessions) runs in a fresh process (peak RSS is that process's ru_maxrss), closed loop,
``--warmup-s`` + ``--duration-s`` simulated seconds (+ drain). Then a capacity search (benchcamp.planning.capacity over
the virtual clock) on the 72-GPU rack, timed.

    uv run python bench/rack_speed.py [--sessions 256 1024 4096] [--gpus 8 16 72] [--duration-s 120] [--code both]

``--code both`` (the default) runs each one twice, side by side: on the compiled simulator (benchcamp/sim/native.py,
built by ``make setup``) and on its Python source (BENCHCAMP_NATIVE=0), and prints the ratio; the capacity search
runs on the compiled one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import tables
from bench.common.paths import ROOT, command

COLUMNS = ["deployment", "code", "GPUs", "sessions", "sim s", "wall s", "x real", "RSS GiB", "tok/s/GPU",
           "P90 tok/s/user", "KV sent tok"]
WIDTHS = [43, 8, 5, 9, 8, 8, 8, 8, 11, 15, 13]
SPEC = ROOT / "workloads/agentx-like.yaml"
DATA = ROOT / "workloads/data/agentx-like.parquet"
V41 = {
    "model": "deepseek-ai/DeepSeek-V4.1-Flash",
    "model_profile": "deepseek-v4.1-flash",
    "kv_cache_dtype": "fp8",
}
# KV block size: 256 tokens, as vLLM's DeepSeek-V4 deployments run it (`--block-size 256`: the V4 recipes' launch
# commands); --block-size 64 keys every block of the workload (AgentX's 64-token hash blocks), 4x the blocks.
BLOCK_SIZE = 256
DSPARK = {"method": "dspark", "num_speculative_tokens": 5, "acceptance": "synthetic", "acceptance_length": 3.5}
NIXL = {"kind": "NixlConnector"}


def deployment(gpus: int, block_size: int = BLOCK_SIZE) -> tuple[str, dict[str, Any]]:
    name, data = _deployment(gpus)
    return name, {**data, "engine": {**data["engine"], "block_size": block_size}}


def _deployment(gpus: int) -> tuple[str, dict[str, Any]]:
    # V4.1-Flash's non-expert weights (8.4B dense + 196.6B Engram tables) are replicated per DP rank: they fit a
    # GB300 (279 GB) but not a B200 (180 GB), so B200 engines shard them with TP (the recipe's TP4/TP8 layouts).
    # api_server_count 8 (vLLM --api-server-count): one API server tokenizes a ~140K-token prompt in ~0.3 s
    # (engine profile vllm: 2 us/token), so a single one caps an engine at ~3.5 requests/s.
    if gpus == 8:
        return "8 x B200, TP4 x DP2 + EP, DSpark", {
            "engine": V41,
            "hardware": {"gpu": "b200", "gpu_count": 8},
            "topology": {
                "unified": {
                    "tensor_parallel_size": 4,
                    "data_parallel_size": 2,
                    "speculative": DSPARK,
                    "max_num_seqs": 256,
                    "api_server_count": 8,
                }
            },
        }
    if gpus == 16:
        role = {
            "tensor_parallel_size": 8,
            "data_parallel_size": 1,
            "kv_connector": NIXL,
            "speculative": DSPARK,
            "max_num_seqs": 256,
            "api_server_count": 8,
        }
        return "2 x 8 B200, 1P1D TP8+EP each, DSpark", {
            "engine": V41,
            "hardware": {"gpu": "b200", "gpu_count": 16},
            "topology": {
                "prefill": {**role, "max_num_batched_tokens": 16384},
                "decode": role,
                "router": {"policy": "session_affinity", "pd_disaggregation": True},
            },
        }
    if gpus == 72:
        return "GB300 NVL72: 3P(DP8) + 1D(DP48), DSpark", {
            "engine": V41,
            "hardware": {"gpu": "gb300", "gpu_count": 72},
            "topology": {
                "prefill": {
                    "instances": 3,
                    "nodes_per_instance": 2,
                    "gpus_per_node": 4,
                    "data_parallel_size": 8,
                    "kv_connector": NIXL,
                    "speculative": DSPARK,
                    "enable_dbo": True,
                    "max_num_seqs": 64,
                    "max_num_batched_tokens": 16384,
                },
                "decode": {
                    "nodes_per_instance": 12,
                    "gpus_per_node": 4,
                    "data_parallel_size": 48,
                    "kv_connector": NIXL,
                    "speculative": DSPARK,
                    "enable_dbo": True,
                    "max_num_seqs": 128,
                },
                "router": {"policy": "session_affinity", "pd_disaggregation": True},
            },
        }
    raise SystemExit(f"--gpus {gpus}: use 8, 16 or 72")


def load_workload():  # type: ignore[no-untyped-def]
    from benchcamp.workload.model import read_workload

    if DATA.exists():
        return read_workload(DATA)
    from benchcamp.workload import build_workload

    print(f"{DATA} missing: building it from {SPEC} (about a minute)", file=sys.stderr)
    return build_workload(SPEC, DATA)[0]


def one(
    gpus: int, sessions: int, warmup_s: float, duration_s: float, drain_s: float, block_size: int
) -> dict[str, Any]:
    """One run in this process -> its figures (printed as JSON by --one)."""
    from benchcamp.config import from_dict
    from benchcamp.sim.clock.fleet import simulation_plan
    from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate

    name, data = deployment(gpus, block_size)
    cfg = from_dict(data)
    wl = load_workload()
    settings, topo, per, n_gpus = simulation_plan(cfg)
    from benchcamp.sim import native

    t0 = time.perf_counter()
    df = simulate(
        wl,
        settings,
        SimLoad(level=sessions, warmup_s=warmup_s, duration_s=duration_s, drain_s=drain_s),
        SimRun(topology=topo, role_settings=per),
    )
    wall = time.perf_counter() - t0
    w0, w1 = df.attrs["window"]
    ok = df[(df.status == 200) & (df.sent_s >= w0) & (df.sent_s < w1)]
    tokens = ok.prompt_tokens.sum() + ok.completion_tokens.sum()
    tpot = ((ok.last_token_s - ok.first_token_s) / (ok.completion_tokens - 1))[ok.completion_tokens > 1]
    return {
        "deployment": name,
        "code": "compiled" if native.state == "native" else "python" if native.state == "off" else native.state,
        "gpus": n_gpus,
        "sessions": sessions,
        "simulated_s": df.attrs["simulated_s"],
        "wall_s": wall,
        "speed": df.attrs["simulated_s"] / wall,
        "steps": df.attrs["steps"],
        "requests": len(df),
        "tok_s_gpu": float(tokens / (w1 - w0) / n_gpus),
        "p90_user": float(1 / tpot.quantile(0.9)) if len(tpot) else 0,
        "transfer_tokens": int(df.attrs.get("deployment", {}).get("kv_transfer", {}).get("tokens", 0)),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def capacity_search(max_sessions: int, block_size: int) -> tuple[float, Any]:
    from benchcamp.planning.capacity import SearchSettings, search_capacity
    from benchcamp.config import from_dict
    from benchcamp.profiles import load_gpu
    from benchcamp.sim.clock.virtual_point import virtual_measure

    _, data = deployment(72, block_size)
    data = {
        **data,
        "load": {
            "mode": "capacity",
            "clock": "virtual",
            "warmup_s": 300,
            "duration_s": 120,
            "capacity": {"start": 64, "max": max_sessions, "resolution_rel": 0.1},
        },
    }
    cfg = from_dict(data)
    gpu = load_gpu(cfg.hardware.gpu)
    wl = load_workload()
    with tempfile.TemporaryDirectory(prefix="rack-speed-capacity-") as out:
        t0 = time.perf_counter()
        result = search_capacity(
            virtual_measure(cfg, wl, Path(out)),
            cfg.load.tiers,
            SearchSettings.of(cfg.load.capacity),
            cfg.hardware.gpu_count,
            gpu.board_power_w,
            gpu.node_overhead_factor,
            clock="virtual",
        )
        return time.perf_counter() - t0, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="*", default=[8, 16, 72])
    ap.add_argument("--sessions", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument(
        "--warmup-s", type=float, default=300.0, help="long: every session's first ~120K-token prompt is uncached"
    )
    ap.add_argument("--duration-s", type=float, default=180.0)
    ap.add_argument("--drain-s", type=float, default=30.0)
    ap.add_argument("--capacity-max", type=int, default=4096, help="0: skip the capacity search")
    ap.add_argument("--block-size", type=int, default=BLOCK_SIZE, help="KV block size of every engine (tokens)")
    ap.add_argument(
        "--code", choices=["both", "compiled", "python"], default="both", help="which simulator code runs each one"
    )
    ap.add_argument("--one", nargs=2, type=int, metavar=("GPUS", "SESSIONS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.warmup_s, args.duration_s, args.drain_s, args.block_size)))
        return 0
    from benchcamp.sim import native

    print("command: " + command())
    if args.code != "python" and native.state != "native":
        print(f"the compiled simulator is not in use ({native.state}): `make native` builds it", file=sys.stderr)
        return 1
    load_workload()  # build it once, outside the timed runs
    print(tables.render(COLUMNS, [], widths=WIDTHS, align="<" + ">" * (len(COLUMNS) - 1)))
    speeds: dict[tuple[int, int, str], float] = {}
    codes = {"both": ["compiled", "python"], "compiled": ["compiled"], "python": ["python"]}[args.code]
    for gpus, sessions, code in ((g, s, c) for g in args.gpus for s in args.sessions for c in codes):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            str(gpus),
            str(sessions),
            "--warmup-s",
            str(args.warmup_s),
            "--duration-s",
            str(args.duration_s),
            "--drain-s",
            str(args.drain_s),
            "--block-size",
            str(args.block_size),
        ]
        env = {**os.environ, native.ENV: "1" if code == "compiled" else "0"}
        run = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if run.returncode:
            print(f"{gpus} GPUs, {sessions} sessions: failed: {run.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(run.stdout.strip().splitlines()[-1])
        cells = [r["deployment"], r["code"], str(r["gpus"]), str(r["sessions"]), f"{r['simulated_s']:.0f}",
                 f"{r['wall_s']:.1f}", f"{r['speed']:.1f}", f"{r['peak_rss_gib']:.2f}", f"{r['tok_s_gpu']:,.0f}",
                 f"{r['p90_user']:.1f}", f"{r['transfer_tokens']:,d}"]
        print(tables.render([], [cells], widths=WIDTHS, align="<" + ">" * (len(COLUMNS) - 1)), flush=True)
        speeds[(gpus, sessions, code)] = r["speed"]
        if code == "python" and (gpus, sessions, "compiled") in speeds:
            print(f"{'':42s} compiled / python: {speeds[(gpus, sessions, 'compiled')] / r['speed']:.2f}x")
    if args.capacity_max:
        wall, result = capacity_search(args.capacity_max, args.block_size)
        print(
            f"capacity search, GB300 NVL72 (72 GPUs), up to {args.capacity_max} sessions, {native.state} code: "
            f"{wall:.0f} s wall, "
            f"{len(result.probes)} probes"
        )
        for t in result.to_dict()["tiers"]:
            print("  " + ", ".join(f"{k}={v}" for k, v in t.items() if not isinstance(v, (list, dict))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
