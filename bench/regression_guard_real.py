"""The nightly guard on the real CPU vLLM: unchanged nights, then a planted change, old rule beside new.

    make real-engine   # once
    uv run --frozen python bench/regression_guard_real.py [--unchanged 6] [--planted 2] [--plant KEY=VALUE]
        [--night KEY=VALUE ...] [--out DIR]

Each night is one `benchcamp run --params params.real-cpu.yaml --fail-on-regression` at one level of 4 agents
(10 s warm-up, 30 s window, at least 5 requests in it; ``--night`` changes these for every night), every night
into one MLflow store, as a nightly on one box would run: the new rule's verdicts are the product's own (the
run's report/verdicts.json, its exit code). After ``--unchanged`` nights with nothing changed, ``--planted``
nights run with one engine setting changed (``--plant``, default ``engine.enable_prefix_caching=false``: every
turn of an agent prefills its whole context again, as a flag flipped by mistake would), by an amount this run
measures: the planted nights' mean against the unchanged nights'. The old rule (benchcamp.verdicts.compare
against the last 5 nights' mean and spread, as bench/regression_guard.py states it) is applied to the same
nightly figures.

Writes ``--out`` (default bench/results/regression_guard_real/<the planted key>/): table.txt, figures.json,
nights.png and the product's trend page (`benchcamp history --html`) as trend.html. ~2 min a night on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import plots
from bench.common.old_rule import old_status
from benchcamp.metrics import HEADLINE as _HEADLINE

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "regression_guard_real"
# load.min_requests=5: a planted change that slows every request five-fold still leaves a valid point to judge
# (at the default 20 it makes the point invalid and the night exits 1 with that reason, the guard judging nothing)
NIGHT = {"load.levels": "[4]", "load.warmup_s": "10", "load.duration_s": "30", "load.drain_s": "10",
         "load.min_requests": "5"}
ALARMS = ("regressed", "improved")
HEADLINE = [str(m) for m in _HEADLINE]  # the metric names, as summary.json and verdicts.json spell them


def run_night(i: int, night: dict[str, str], plant: dict[str, str] | None, work: Path) -> dict:
    """One `benchcamp run`: its exit code, headline figures and the guard's verdicts (its nightly series)."""
    eid = f"night-{i:02d}"
    sets = night | {
        "tracking.mlflow_uri": f"sqlite:///{work / 'mlflow.db'}",
        "results.store": str(work / "results"),
        "baselines.published": "[]",  # the guard alone: no published figure for a 2-core CPU
    }
    sets |= plant or {}
    argv = [str(Path(sys.executable).with_name("benchcamp")), "run", "--params", "params.real-cpu.yaml",
            "--execution-id", eid, "--reports", str(work / "reports"), "--fail-on-regression"]
    argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - t0
    run = work / "results" / "real-cpu-smoke" / eid
    if not (run / "summary.json").exists():
        sys.exit(f"night {i} left no summary (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((run / "summary.json").read_text())
    headline = summary.get("headline") or {}
    verdicts = json.loads((run / "report" / "verdicts.json").read_text()).get("verdicts", [])
    guard = {v["metric"]: v for v in verdicts if str(v.get("baseline", "")).startswith("nightly series")}
    return {
        "night": eid,
        "planted": plant is not None,
        "exit": proc.returncode,
        "seconds": round(took),
        "error": summary.get("error") or "",
        "figures": {m: headline.get(m) for m in HEADLINE},
        "new": {m: guard[m]["verdict"] for m in HEADLINE if m in guard},
        "alarm": {m: guard[m].get("alarm", "") for m in HEADLINE if m in guard},
    }


def old_rule(nights: list[dict]) -> None:
    """The old rule's verdict on each night, against the nights before it (the same figures the guard saw)."""
    for i, night in enumerate(nights):
        night["old"] = {}
        for m in HEADLINE:
            series = [n["figures"].get(m) for n in nights[: i + 1]]
            if i == 0 or any(v is None for v in series):
                continue
            night["old"][m] = old_status(m, np.asarray(series, dtype=float))


def table(nights: list[dict], effect: dict[str, float]) -> str:
    short = {"total_tokens_per_s_per_gpu": "tok/s/GPU", "p90_user_tokens_per_s": "P90 tok/s/user",
             "ttft_p90_s": "TTFT P90 s", "revenue_per_gpu_hour": "$/GPU-h", "error_rate": "error rate"}
    lines = ["night     planted exit  " + "  ".join(f"{short[m]:>28}" for m in HEADLINE),
             " " * 24 + "  ".join(f"{'value  old -> new':>28}" for _ in HEADLINE)]
    for n in nights:
        cells = []
        for m in HEADLINE:
            v = n["figures"].get(m)
            cells.append(f"{v if v is None else f'{v:.4g}'!s:>9} {n['old'].get(m, '-'):>9} -> {n['new'].get(m, '-'):<9}")
        lines.append(f"{n['night']:<9} {'yes' if n['planted'] else 'no':<7} {n['exit']:>4}  " + "  ".join(cells))
    unchanged = [n for n in nights if not n["planted"]]
    planted = [n for n in nights if n["planted"]]
    count = {r: sum(n[r].get(m) in ALARMS for n in unchanged for m in HEADLINE) for r in ("old", "new")}
    judged = {r: sum(m in n[r] for n in unchanged for m in HEADLINE) for r in ("old", "new")}
    lines += ["", "unchanged nights: alarms (regressed or improved) / verdicts judged: "
              + ", ".join(f"{r} rule {count[r]}/{judged[r]}" for r in ("old", "new"))]
    lines += [f"{n['night']}: {n['error']}" for n in nights if n.get("error")]
    lines.append("unchanged nights' exit codes: " + " ".join(str(n["exit"]) for n in unchanged)
                 + "; planted: " + " ".join(str(n["exit"]) for n in planted))
    lines.append("planted change, measured (planted nights' mean / unchanged nights' mean - 1): "
                 + ", ".join(f"{short[m]} {effect[m]:+.1%}" for m in HEADLINE if np.isfinite(effect[m])))
    for r in ("old", "new"):
        caught = {m: [i + 1 for i, n in enumerate(planted) if n[r].get(m) == "regressed"] for m in HEADLINE}
        lines.append(f"{r} rule on the planted nights: " + ", ".join(
            f"{short[m]} regressed on planted night {c[0]}" if c else f"{short[m]} never regressed"
            for m, c in caught.items()))
    return "\n".join(lines) + "\n"


def effect_of(nights: list[dict]) -> dict[str, float]:
    out = {}
    for m in HEADLINE:
        before = [n["figures"][m] for n in nights if not n["planted"] and n["figures"].get(m) is not None]
        after = [n["figures"][m] for n in nights if n["planted"] and n["figures"].get(m) is not None]
        out[m] = float(np.mean(after) / np.mean(before) - 1) if before and after and np.mean(before) else float("nan")
    return out


def plot(nights: list[dict], path: Path, plant: str) -> None:
    """Each headline over the nights (error rate left out: zero on every night of a healthy engine), coloured by
    the guard's verdict; a planted night's label ends in '*'."""
    colors = {"regressed": "#c44e52", "improved": "#55a868", "suspected": "#dd8452", "other": "#4c72b0"}
    labels = [n["night"][-2:] + ("*" if n["planted"] else "") for n in nights]
    panels = []
    for m in [m for m in HEADLINE if m != "error_rate"]:
        values = [n["figures"].get(m) or float("nan") for n in nights]
        verdict = [n["new"].get(m, "") if n["new"].get(m) in colors else "other" for n in nights]
        series = [plots.Series([v if k == kind else float("nan") for v, k in zip(values, verdict)], label=kind,
                               kind="points", color=colors[kind])
                  for kind in dict.fromkeys(verdict)]
        top = max((v for v in values if np.isfinite(v)), default=1.0)
        panels.append(plots.Panel(labels, series, title=f"{m}: the guard's verdict each night",
                                  axis_label="night (* planted)", limits=(0.0, 1.3 * top), legend_loc="lower left"))
    plots.write(path, panels, size=(10.0, 6.0), columns=2,
                title=f"real CPU vLLM, params.real-cpu.yaml at 4 agents: unchanged nights, then {plant} (*)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--unchanged", type=int, default=6)
    p.add_argument("--planted", type=int, default=2)
    p.add_argument("--plant", default="engine.enable_prefix_caching=false", help="the planted nights' setting")
    p.add_argument("--night", action="append", default=[], metavar="KEY=VALUE", help="a setting of every night")
    p.add_argument("--out", type=Path, help="default: bench/results/regression_guard_real/<the planted key>")
    a = p.parse_args()
    night = NIGHT | dict(kv.partition("=")[::2] for kv in a.night)
    key, _, value = a.plant.partition("=")
    plant = {key: value}
    a.out = a.out or OUT / key.rsplit(".", 1)[-1]
    with tempfile.TemporaryDirectory(prefix="guard-real-") as d:
        work = Path(d)
        nights = []
        for i in range(a.unchanged + a.planted):
            done = run_night(i + 1, night, plant if i >= a.unchanged else None, work)
            nights.append(done)
            print(f"{done['night']} planted={done['planted']} exit={done['exit']} {done['seconds']} s "
                  f"new={done['new']}", flush=True)
        old_rule(nights)
        effect = effect_of(nights)
        a.out.mkdir(parents=True, exist_ok=True)
        history = [str(Path(sys.executable).with_name("benchcamp")), "history", "--params", "params.real-cpu.yaml",
                   "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}", "--html", str(a.out / "trend.html")]
        subprocess.run(history, cwd=ROOT, check=True, capture_output=True)
    text = table(nights, effect)
    command = "uv run --frozen python bench/regression_guard_real.py " + " ".join(sys.argv[1:])
    (a.out / "table.txt").write_text(f"# {command.strip()}  ({time.strftime('%Y-%m-%d')}, this 2-core box)\n{text}")
    (a.out / "figures.json").write_text(json.dumps({"command": command.strip(), "night": night, "plant": plant,
                                                    "nights": nights,
                                                    "planted_effect": effect}, indent=1))
    plot(nights, a.out / "nights.png", a.plant)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
