"""How far to trust the simulated engine: every published real-hardware result in the corpus, replayed in virtual time.

The corpus (bench/fidelity/corpus/*.yaml) holds serving results published for
real GPUs, each with its source, engine, model, GPUs and parallel layout, the
benchmark's workload and load, and the figures as published. This script
rebuilds each point's workload (fixed-length "random" prompts as
`vllm bench serve --dataset-name random` makes them, or ShareGPT-like
log-normal lengths with the published means), replays it through the simulated
engine in virtual time with the same load (all prompts at once, closed-loop
`--max-concurrency`, or Poisson `--request-rate`), computes the same figures as
the benchmark client, and prints simulated / published per metric (the corpus and
the replay are bench/common/fidelity.py; this script reports).

Points are split by source into a fit set (the profiles' efficiency and
overhead factors were chosen on them: in-sample) and a validation set (never
fitted: the accuracy figure). Both are reported apart; only the validation
figures say how far to trust the simulator.

    uv run python bench/fidelity/replay.py [--set fit|validation] [--only SUBSTRING] [--jobs 2] [--out bench/results/fidelity]

Writes the per-metric table (fidelity.csv), the summary (summary.md) and a
ratio plot (ratios.png) to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from bench.common import plots, tables
from bench.common.fidelity import (
    CORPUS,
    METRICS,
    TOLERANCES,
    CorpusError,
    load_corpus,
    rows_of,
    run_all,
    settings_for,
    spread_by_gpu,
)
from bench.common.paths import command, results

OUT = results("fidelity")


# -- report ---------------------------------------------------------------------------------------

def shares(rows: list[dict]) -> dict[str, float]:
    err = np.array([abs(r["ratio"] - 1) for r in rows if math.isfinite(r["ratio"])])
    if not len(err):
        return {"n": 0}
    out: dict[str, float] = {"n": len(err)}
    for tol in TOLERANCES:
        out[f"within {tol:.0%}"] = float((err <= tol).mean())
    out["median |err|"] = float(np.median(err))
    return out


def fmt_share(s: dict[str, float]) -> str:
    if not s.get("n"):
        return "no values"
    return (f"{s['n']:>3} values  +-15%: {s['within 15%']:>4.0%}  +-30%: {s['within 30%']:>4.0%}  "
            f"+-50%: {s['within 50%']:>4.0%}  median |err| {s['median |err|']:.0%}")


def summary_lines(rows: list[dict]) -> list[str]:
    lines = []
    for which in ("validation", "fit"):
        sub = [r for r in rows if r["set"] == which]
        title = ("VALIDATION set (never fitted: the accuracy figures)" if which == "validation"
                 else "FIT set (in-sample: the profiles were tuned on these; not an accuracy figure)")
        lines += ["", title, f"  all       {fmt_share(shares(sub))}"]
        # TTFT apart: the first token is where the benchmark client's own pacing shows (source_lines says how each
        # source's client paced its requests and what of it the replay models)
        lines.append(f"  no TTFT   {fmt_share(shares([r for r in sub if metric_family(r['metric']) != 'ttft']))}")
        lines.append(f"  TTFT only {fmt_share(shares([r for r in sub if metric_family(r['metric']) == 'ttft']))}")
        for gpu in sorted({r["gpu"] for r in sub}):
            rest = [r for r in sub if r["gpu"] == gpu and metric_family(r["metric"]) != "ttft"]
            lines.append(f"  no TTFT, gpu {gpu:15} {fmt_share(shares(rest))}")
        for key in ("gpu", "model", "engine", "regime", "metric"):
            groups = defaultdict(list)
            for r in sub:
                groups[r[key]].append(r)
            for name in sorted(groups):
                lines.append(f"  {key:6} {name:22} {fmt_share(shares(groups[name]))}")
    return lines


# Run-to-run spread of a source's own figures, where known: max / min of the same configuration's published median TPOT
# across nights, median over its configurations, by GPU. InferenceX: `import_inferencex.py --spread` over the
# dashboard's history fixture (benchmarks-history.json, Dec 2025 - May 2026), as run on 2026-12-01 and quoted in
# docs/architecture/simulator-fidelity.md; --spread-history recomputes it from the fixture (TPOT and throughput). No other source
# publishes repeated runs.
KNOWN_SPREAD = {"inferencex-dsr1-fp8": {"tpot": {"b200": 1.04, "h200": 1.24, "b300": 1.30, "mi300x": 1.38,
                                                 "mi355x": 1.68}}}


def spread_from_history(path: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{source: {"tpot"|"throughput": {gpu: median max/min}}} from InferenceX's history fixture."""
    out: dict[str, dict[str, float]] = {"tpot": {}, "throughput": {}}
    for gpu, (_, tpot, _, tput, _) in spread_by_gpu(json.loads(path.read_text())).items():
        out["tpot"][gpu], out["throughput"][gpu] = tpot, tput
    return {"inferencex-dsr1-fp8": out}


def metric_family(metric: str) -> str:
    return "throughput" if metric.endswith("tok_s") else metric.split("_")[0]


def ordering(rows: list[dict]) -> tuple[int, int]:
    """(agreeing, compared) pairs of one source's points on one metric: does the simulator order two configurations
    the way the published figures do? Published ties are not compared."""
    agree = n = 0
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["published"] == b["published"]:
                continue
            n += 1
            agree += (a["simulated"] - b["simulated"]) * (a["published"] - b["published"]) > 0
    return agree, n


# What each source's client did that the replay does not reproduce, where the source says how its client paced its
# requests (its `method`: all at once, closed loop at --max-concurrency, or a Poisson --request-rate, each replayed as
# such). Sources not listed: nothing known beyond that. Checked 2026-12-05.
CLIENT_NOT_REPLAYED = {
    "inferencex-dsr1-fp8": "2 x C warm-up requests (utils/bench_serving/benchmark_serving.py at InferenceX 086eabbe gathers them before the "
    "measured requests start, so they only warm the engine, which the simulator never needs)",
}


def source_lines(rows: list[dict], spread: dict[str, dict[str, dict[str, float]]],
                 methods: dict[str, str] | None = None) -> list[str]:
    """Per source: median |err| by metric family beside the source's own run-to-run spread (where known), and the
    pairwise ordering agreement per metric (simulator vs published)."""
    lines = ["", "PER SOURCE: median |err| (values) | own run-to-run spread, where known | pairwise ordering agreement",
             "  (spread: median over configurations of max/min across nights, by GPU, as +-(sqrt(max/min) - 1);"
             " ordering: share of point pairs, same source and metric, ordered as published)"]
    by_source: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_source[r["source"]].append(r)
    all_agree = all_n = 0
    for src in sorted(by_source, key=lambda k: (by_source[k][0]["set"], k)):
        sub = by_source[src]
        fams = defaultdict(list)
        for r in sub:
            fams[metric_family(r["metric"])].append(abs(r["ratio"] - 1))
        errs = "  ".join(f"{f} {np.median(v):.0%} ({len(v)})" for f, v in sorted(fams.items()))
        lines.append(f"  [{sub[0]['set'][:3]}] {src}: {len({r['id'] for r in sub})} points; {errs}")
        if methods is not None:
            lines.append(f"      client: {methods.get(src) or 'pacing not stated: its TTFT is not an accuracy figure'}")
            if src in CLIENT_NOT_REPLAYED:
                lines.append(f"      not replayed: {CLIENT_NOT_REPLAYED[src]}")
        for fam, by_gpu in sorted(spread.get(src, {}).items()):
            if by_gpu:
                gpus = sorted({r["gpu"] for r in sub})
                own = [f"{g} +-{math.sqrt(by_gpu[g]) - 1:.0%} (x{by_gpu[g]:.2f})" for g in gpus if g in by_gpu]
                med = {g: np.median([abs(r["ratio"] - 1) for r in sub if r["gpu"] == g
                                     and metric_family(r["metric"]) == fam]) for g in gpus if g in by_gpu}
                lines.append(f"      {fam} spread between nights: " + ", ".join(own))
                lines.append(f"      {fam} simulator median |err| on those GPUs: "
                             + ", ".join(f"{g} {v:.0%}" for g, v in med.items()))
        orders = []
        for metric in METRICS:
            agree, n = ordering([r for r in sub if r["metric"] == metric and math.isfinite(r["ratio"])])
            if n:
                orders.append(f"{metric} {agree / n:.0%} of {n}")
                if sub[0]["set"] == "validation":
                    all_agree, all_n = all_agree + agree, all_n + n
        lines.append("      ordering: " + (", ".join(orders) if orders else "no pair"))
    if all_n:
        lines.append(f"  validation sources, every metric: {all_agree / all_n:.0%} of {all_n} pairs ordered as published")
    return lines


def table_lines(rows: list[dict]) -> list[str]:
    body = []
    for r in rows:
        flag = "" if abs(r["ratio"] - 1) <= 0.15 else (" *" if abs(r["ratio"] - 1) <= 0.5 else " **")
        body.append([r["set"][:3], r["id"][:44], r["metric"], f"{r['published']:,.2f}", f"{r['simulated']:,.2f}",
                     f" {r['ratio']:>6.2f}{flag}"])
    return tables.render(["set", "point", "metric", "published", "simulated", f"{'ratio':>7}"], body,
                         widths=[5, 45, 16, 12, 13, 7], align="<<<>><", rule=True).splitlines()


def plot(rows: list[dict], path: Path) -> None:
    metrics = [m for m in METRICS if any(r["metric"] == m for r in rows)]
    series = [plots.Series([[r["ratio"] for r in rows if r["set"] == which and r["metric"] == m] for m in metrics],
                           which, "points", color, offset=dx, alpha=0.7)
              for which, color, dx in (("fit", "tab:blue", -0.15), ("validation", "tab:red", 0.15))]
    lines = [plots.Line(0.85, 1.15, color="green", alpha=0.12, label="+-15%"),
             plots.Line(0.5, 1.5, color="green", alpha=0.05, label="+-50%"), plots.Line(1.0)]
    plots.write(path, [plots.Panel(metrics, series, lines, value_label="simulated / published", log=True,
                                   rotation=30, label_size=10, title_size=12, legend_loc="upper left",
                                   title="Simulated engine vs published real-hardware results (bench/fidelity/corpus)")],
                size=(11, 5.5), dpi=120)


def silicon_lines() -> list[str]:
    """The measured-silicon corpus, VALIDATION ONLY (never fitted): every checked row of aiconfigurator-core's
    silicon_sample.csv predicted by the performance model, scored per source, engine and version."""
    from benchcamp.calibrate import silicon

    kept, dropped = silicon.check(silicon.read())
    table = silicon.score(silicon.predict(kept))
    lines = ["", f"SILICON (validation only): {len(kept)} rows of silicon_sample.csv checked, {len(dropped)} dropped"]
    lines += [f"  dropped {n:>5} x {why}" for why, n in dropped["reason"].str.split(":").str[0].value_counts().items()]
    return lines + table.to_string(index=False, float_format=lambda v: f"{v:.3f}").splitlines()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["fit", "validation"], help="run one set only")
    ap.add_argument("--only", help="run the points whose id contains this")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--out", type=Path, default=OUT, help="where the table, summary and plot go")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="folder of corpus yaml files")
    ap.add_argument("--table", action="store_true", help="print every metric value, not only the summary")
    ap.add_argument("--no-silicon", action="store_true", help="skip the measured-silicon validation block "
                    "(aiconfigurator-core's silicon_sample.csv, benchcamp/calibrate/silicon.py)")
    ap.add_argument("--spread-history", type=Path, help="InferenceX-app's benchmarks-history.json: recompute "
                    "InferenceX's night-to-night spread (default: the figures import_inferencex.py --spread gave)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    try:
        sources, points = load_corpus(args.corpus)
    except (CorpusError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    points = [p for p in points if (not args.set or p["set"] == args.set) and (not args.only or args.only in p["id"])]
    for p in points:  # profiles and flags, before any worker starts
        try:
            settings_for(p).validate()
        except (ValueError, CorpusError) as exc:
            print(f"error: {p['file']}: point {p['id']}: {exc}", file=sys.stderr)
            return 2
    if not points:
        print("error: no corpus point matches --set/--only; drop the filter", file=sys.stderr)
        return 2
    print("command: " + command())
    print(f"{len(points)} points from {len({p['source'] for p in points})} sources "
          f"({sum(p['set'] == 'fit' for p in points)} fit, {sum(p['set'] == 'validation' for p in points)} validation)")
    results = run_all(points, args.jobs)
    rows = rows_of(points, results)
    spread = spread_from_history(args.spread_history) if args.spread_history else KNOWN_SPREAD
    methods = {k: str(v.get("method", "")).split(";")[0] for k, v in sources.items()}
    table, summary = table_lines(rows), summary_lines(rows) + source_lines(rows, spread, methods)
    if not args.no_silicon:
        summary += silicon_lines()
    if args.table:
        print("\n".join(table))
    print("\n".join(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    import pandas as pd
    pd.DataFrame(rows).to_csv(args.out / "fidelity.csv", index=False)
    (args.out / "summary.md").write_text(
        "# Simulated engine vs published results\n\n`uv run python bench/fidelity/replay.py`\n\n```\n"
        + "\n".join(table + summary) + "\n```\n\nSources:\n\n"
        + "\n".join(f"- {k} ({v['set']}): {v['title']}, {v['url']} ({v['date']})" for k, v in sorted(sources.items()))
        + "\n")
    plot(rows, args.out / "ratios.png")
    slow = ", ".join(f"{r['id']} {r['wall_s']:.0f} s" for r in sorted(results.values(), key=lambda r: -r["wall_s"])[:3])
    print(f"\nwritten: {args.out}/fidelity.csv, summary.md, ratios.png; {time.perf_counter() - t0:.0f} s "
          f"(slowest points: {slow})")
    print("ratio = simulated / published; '*' outside +-15%, '**' outside +-50%.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
