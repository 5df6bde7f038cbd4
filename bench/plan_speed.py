"""How long `benchcamp plan` takes on the README's seed placement, and whether any candidate ends as a lower bound.

Runs the README's seed-placement command ("Where the seed's record sits": DeepSeek-V4.1-Flash, the AgentX-like
workload, the record-196 tier, `--target 954000@196`) over a reduced candidate grid (the full 30 candidates took
42.5 min here before; too long to run twice on a shared 2-core box), once per code tree, side by side on the same
machine: ``--before DIR`` is a copy of the tree to compare against (e.g. ``git archive <commit> | tar -x -C DIR``
and its ``.native/`` build copied in), the current tree is "after". Per tree: wall and CPU seconds of the whole
command, each candidate's search time, its probes, and every tier that ended ``invalid_probe`` (a lower bound).

    uv run python bench/plan_speed.py [--before /tmp/simerr-base] [--gpu gb300,b300] [--gpus 24] [--tp 4,8]
        [--split 1p2d] [--jobs 2] [--out bench/results/plan_speed]

The workload must be built (`benchcamp workload build` with the seed's workload settings below).
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
from bench.common.paths import ROOT, command, results

SEED = [
    "--set", "engine.model=deepseek-ai/DeepSeek-V4.1-Flash", "--set", "engine.model_profile=deepseek-v4.1-flash",
    "--set", "pricing.profile=deepseek-flash-offpeak", "--set", "workload.name=agentx-like",
    "--set", "workload.spec=workloads/agentx-like.yaml", "--set", "workload.data=workloads/data/agentx-like.parquet",
    "--set", "load.tiers=[{name: record-196, p90_user_tok_s: 196, p90_ttft_s: 30}]",
    "--set", "load.warmup_s=10", "--set", "load.duration_s=30", "--set", "load.drain_s=30",
    "--set", "load.capacity.resolution_rel=0.1", "--spec", "dspark:5:3.5", "--target", "954000@196",
]


def run_tree(tree: Path, axes: list[str], jobs: int | None, out: Path) -> dict[str, Any]:
    """One `benchcamp plan` in a fresh process on the code under ``tree``; -> timings and the plan's outcome."""
    # the tree (PYTHONPATH) first on sys.path, ahead of the installed project; -P keeps the working directory
    # (where the workload's relative paths point, this tree's own code) off it
    boot = (
        "import sys; import benchcamp; "
        "print('benchcamp from', benchcamp.__file__.rsplit('/benchcamp/', 1)[0], file=sys.stderr); "
        "from benchcamp.cli import main; sys.exit(main())"
    )
    argv = [sys.executable, "-P", "-c", boot, "plan", *SEED, *axes, "--out", str(out)]
    if jobs is not None:
        argv += ["--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # cwd = this tree's root: the workload paths are relative, the code comes from PYTHONPATH
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if f"benchcamp from {tree}" not in proc.stderr:
        raise SystemExit(f"benchcamp plan did not run the code under {tree}:\n{proc.stderr[-2000:]}")
    if proc.returncode != 0:
        raise SystemExit(f"benchcamp plan failed under {tree} (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    plan = json.loads((out / "plan.json").read_text())
    cands = []
    for c in plan["configs"]:
        cap = c.get("capacity") or {}
        cands.append({
            "id": c["id"],
            "status": c["status"],
            "search_s": c.get("search_s"),
            "probes": len(cap.get("probes", [])),
            "tiers": {t["tier"]: [t["max_agents"], t["status"]] for t in cap.get("tiers", [])},
        })
    best = {k: [v["config"], v["max_agents"]] for k, v in (plan.get("best") or {}).items()}
    return {
        "tree": str(tree),
        "wall_s": round(wall, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "candidates": cands,
        "lower_bounds": sum(1 for c in cands for _, st in c["tiers"].values() if st == "invalid_probe"),
        "best": best,
        "stdout_tail": proc.stdout[-2500:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="a copy of the tree to compare against (its own .native/)")
    ap.add_argument("--only", choices=["before", "after"], help="run one side only")
    ap.add_argument("--gpu", default="gb300,b300")
    ap.add_argument("--gpus", default="24")
    ap.add_argument("--tp", default="4,8")
    ap.add_argument("--split", default="1p2d")
    ap.add_argument("--jobs", type=int, help="after only: benchcamp plan --jobs (default: its own default)")
    ap.add_argument("--out", type=Path, default=results("plan_speed"))
    ap.add_argument("--combine", nargs=2, type=Path, metavar=("BEFORE_JSON", "AFTER_JSON"),
                    help="print the side-by-side of two --only runs (run at the same time on a busy box) and stop")
    args = ap.parse_args()
    if args.combine:
        runs = {name: json.loads(path.read_text())["runs"][name] for name, path in zip(("before", "after"),
                                                                                        args.combine)}
        print(side_by_side(runs))
        return 0
    axes = ["--gpu", args.gpu, "--gpus", args.gpus, "--tp", args.tp, "--split", args.split]
    print("command: " + command(), flush=True)
    runs: dict[str, Any] = {}
    sides = [("before", args.before, None), ("after", ROOT, args.jobs)]
    for name, tree, jobs in sides:
        if tree is None or (args.only and args.only != name):
            continue
        with tempfile.TemporaryDirectory(prefix=f"plan-speed-{name}-") as tmp:
            print(f"[{name}] benchcamp plan {' '.join(axes)} on {tree} ...", flush=True)
            runs[name] = run_tree(tree, axes, jobs, Path(tmp))
            r = runs[name]
            print(f"[{name}] {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU, {r['lower_bounds']} lower bounds; "
                  f"best {r['best']}", flush=True)
    print(side_by_side(runs))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"command": command(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_avg_1m": os.getloadavg()[0], "axes": axes, "runs": runs}
    path = args.out / f"plan_speed{'.' + args.only if args.only else ''}.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return 0


def side_by_side(runs: dict[str, Any]) -> str:
    body = []
    for name, r in runs.items():
        for c in r["candidates"]:
            tiers = "; ".join(f"{t} {a} ({st})" for t, (a, st) in c["tiers"].items())
            body.append([name, c["id"][:58], f"{c['search_s']:.1f}", str(c["probes"]), tiers or c["status"]])
    lines = [tables.render(["tree", "candidate", "search s", "probes", "tiers"], body, widths=[6, 58, 9, 6, 40],
                           align="<<>><", rule=True)]
    if "before" in runs and "after" in runs:
        b, a = runs["before"], runs["after"]
        lines.append(f"after / before: wall {a['wall_s'] / b['wall_s']:.2f}x ({b['wall_s']:.0f} s -> "
                     f"{a['wall_s']:.0f} s), CPU {a['cpu_s'] / b['cpu_s']:.2f}x ({b['cpu_s']:.0f} s -> "
                     f"{a['cpu_s']:.0f} s); lower bounds {b['lower_bounds']} -> {a['lower_bounds']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
