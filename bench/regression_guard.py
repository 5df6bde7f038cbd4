"""The nightly regression guard against series of known truth: the old rule beside the new one.

    uv run --frozen python bench/regression_guard.py [--series 10] [--detect-series 100] [--noise issue|measured]
        [--out PATH]

Synthetic nightly series of the four headline metrics, drawn with run-to-run noise of the size the
real CPU vLLM showed (below), in three variants: ``stable`` (normal noise), ``heavy`` (Student t with
3 degrees of freedom, scaled to the same standard deviation: the odd slow night) and ``drifting``
(the same noise on a level that wanders, a random walk of 0.5% a night: shared, re-imaged or
re-allocated hardware). ``trials3`` is ``stable`` with each night the mean of 3 trials (noise / sqrt 3).

- false alarms: series of 100 unchanged nights; an alarm is a night the rule raises one (old rule:
  every night it says regressed or improved, since each such night exits 3 or notifies; new rule:
  a night that opens a confirmed shift, regressed or improved). Per metric per 100 nights.
- detection: 30 unchanged nights, then a step in the metric's bad direction of 3, 5, 10 or 20%
  from night 30 on; the share of series in which the rule says ``regressed`` within 1 and within
  2 nights of the step (night 30 = 1), and the median delay (nights, up to 6).

Old rule: benchcamp.verdicts.compare.compare against the last ``baselines.history_runs`` (5) nights
(mean, prediction band k * std, relative threshold 5%), without per-request samples (a night's
samples say nothing about run-to-run noise). New rule: benchcamp.verdicts.guard.judge_series
(Otava's change points, persistence over 2 nights, 5% threshold).

Noise (coefficient of variation, one night): issue 40's six unchanged runs of the real CPU vLLM
(params.real-cpu.yaml, 4 agents, 10 s warm-up, 30 s window; figures as the issue reports them,
2026-12): TTFT P90 0.047-0.059 s over four runs (range / 2.06 = sd for n=4: 11%); tokens/s/GPU
21.9K -> 23.8K and the P90 per-user rate 131 -> 198 tok/s over six runs, mostly a drift of the
load (the drifting variant), the spread around it taken as 3% and 6%; revenue moves with the
token throughput (3%). ``--noise measured`` draws instead with the CV this machine's real CPU vLLM showed
over its own unchanged nights (bench/regression_guard_real.py's series under
bench/results/regression_guard_real/, read when the script runs: each series' nights divided by their
mean, pooled), about twice the issue's figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from bench.common.old_rule import old_status
from benchcamp.metrics import HEADLINE
from benchcamp.verdicts.guard import GuardRule, Night, _judge

CV = {
    "total_tokens_per_s_per_gpu": 0.03,
    "p90_user_tokens_per_s": 0.06,
    "ttft_p90_s": 0.11,
    "revenue_per_gpu_hour": 0.03,
}
REAL_SERIES = Path(__file__).resolve().parent / "results" / "regression_guard_real"
VARIANTS = ("stable", "heavy", "drifting", "trials3")
STEPS = (0.03, 0.05, 0.10, 0.20)
PRE, MAX_DELAY = 30, 6


def measured_cv(folder: Path = REAL_SERIES) -> dict[str, float]:
    """Pooled run-to-run CV of each headline over the real engine's unchanged, successful nights: every
    series is divided by its own mean (series ran on different days), then one sd over all of them."""
    rel: dict[str, list[float]] = {m: [] for m in CV}
    means: dict[str, int] = dict.fromkeys(CV, 0)  # one mean estimated per series: a degree of freedom each
    for path in sorted(folder.glob("*/figures.json")):
        nights = [n for n in json.loads(path.read_text())["nights"] if not n["planted"] and n["exit"] == 0]
        for metric, out in rel.items():
            xs = np.array([n["figures"][metric] for n in nights if n["figures"].get(metric) is not None])
            if len(xs) > 1:
                out.extend(xs / xs.mean() - 1.0)
                means[metric] += 1
    return {m: float(np.sqrt(np.sum(np.square(r)) / (len(r) - means[m]))) for m, r in rel.items() if len(r) > means[m]}


def draw(metric: str, variant: str, n: int, rng: np.random.Generator) -> np.ndarray:
    cv = CV[metric]
    if variant == "heavy":
        eps = rng.standard_t(3, n) / math.sqrt(3.0)  # t(3) has variance 3
    else:
        eps = rng.standard_normal(n)
    if variant == "trials3":
        eps = eps / math.sqrt(3.0)
    level = np.exp(np.cumsum(rng.normal(0.0, 0.005, n))) if variant == "drifting" else np.ones(n)
    return 100.0 * level * np.maximum(1.0 + cv * eps, 0.05)


def noise_floor(cv: float, rule: GuardRule, trials: int = 1) -> float:
    """The step a two-sample z-test finds at the rule's p-value in 95% of series, 2 nights after it, against
    PRE nights before (normal approximation of the guard's t-test merge): what a night's noise allows."""
    from scipy.stats import norm

    z = norm.ppf(1.0 - rule.max_pvalue / 2.0) + norm.ppf(0.95)
    return float(z * cv / math.sqrt(trials) * math.sqrt(1.0 / rule.confirm_nights + 1.0 / PRE))


def new_status(metric: str, x: np.ndarray, rule: GuardRule) -> str:
    return _judge(metric, [Night(str(i), float(v)) for i, v in enumerate(x[-rule.history_nights :])], rule).status


def false_alarms(metric: str, variant: str, series: int, rule: GuardRule, seed: int) -> tuple[float, float, int]:
    """(old, new) alarms per 100 judged nights, and the nights judged."""
    rng = np.random.default_rng(seed)
    old = new = judged = 0
    for _ in range(series):
        x = draw(metric, variant, 100 + rule.min_nights + 1, rng)
        prev = "unchanged"
        for t in range(rule.min_nights + 1, len(x) + 1):
            o, s = old_status(metric, x[:t]), new_status(metric, x[:t], rule)
            old += o in ("regressed", "improved")
            new += s in ("regressed", "improved") and s != prev
            prev, judged = s, judged + 1
    return 100.0 * old / judged, 100.0 * new / judged, judged


def detection(metric: str, variant: str, step: float, series: int, rule: GuardRule, seed: int) -> dict[str, dict]:
    """Per rule: share detected within 1 and 2 nights of the step, median delay (nights; MAX_DELAY + 1 = missed)."""
    rng = np.random.default_rng(seed)
    worse = 1.0 - step if HEADLINE[metric].direction == "higher" else 1.0 + step
    delays: dict[str, list[int]] = {"old": [], "new": []}
    for _ in range(series):
        x = draw(metric, variant, PRE + MAX_DELAY, rng)
        x[PRE:] *= worse
        for name, judge in (("old", old_status), ("new", lambda m, s: new_status(m, s, rule))):
            d = next((k for k in range(1, MAX_DELAY + 1) if judge(metric, x[: PRE + k]) == "regressed"), MAX_DELAY + 1)
            delays[name].append(d)
    out = {}
    for name, ds in delays.items():
        a = np.array(ds)
        out[name] = {
            "within1": float(np.mean(a <= 1)),
            "within2": float(np.mean(a <= 2)),
            "median": float(np.median(a)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", type=int, default=10, help="unchanged series of 100 nights per metric and variant")
    p.add_argument("--detect-series", type=int, default=100, help="series per metric, variant and step")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--noise", choices=("issue", "measured"), default="issue",
                   help="the run-to-run CV: issue 40's figures, or this machine's real-engine series")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if args.noise == "measured":
        CV.update(measured_cv())
    print("CV per night: " + ", ".join(f"{m} {v:.1%}" for m, v in CV.items()))
    rule = GuardRule()
    variants = args.variants.split(",")
    t0 = time.monotonic()
    doc: dict = {"rule": rule.__dict__, "noise": args.noise, "cv": CV, "false_alarms": [], "detection": []}
    print("False alarms per 100 unchanged nights (old rule | new rule)")
    print(f"{'variant':<9} " + " ".join(f"{m[:22]:>24}" for m in CV))
    for i, variant in enumerate(variants):
        cells = []
        for j, metric in enumerate(CV):
            old, new, judged = false_alarms(metric, variant, args.series, rule, seed=1000 * i + j)
            doc["false_alarms"].append({"variant": variant, "metric": metric, "old": old, "new": new, "nights": judged})
            cells.append(f"{old:6.1f} | {new:5.2f}".rjust(24))
        print(f"{variant:<9} " + " ".join(cells), flush=True)
    print(f"\nDetection of a step in the bad direction ({args.detect_series} series each): share regressed within")
    print("1 night / within 2 nights, old rule | new rule")
    print(f"{'variant':<9} {'step':>5} " + " ".join(f"{m[:22]:>26}" for m in CV))
    for i, variant in enumerate(variants):
        for k, step in enumerate(STEPS):
            cells = []
            for j, metric in enumerate(CV):
                d = detection(metric, variant, step, args.detect_series, rule, seed=10_000 + 1000 * i + 100 * k + j)
                doc["detection"].append({"variant": variant, "step": step, "metric": metric, **d})
                o, n = d["old"], d["new"]
                cells.append(f"{o['within1']:.2f}/{o['within2']:.2f} | {n['within1']:.2f}/{n['within2']:.2f}".rjust(26))
            print(f"{variant:<9} {step:>5.0%} " + " ".join(cells), flush=True)
    print(f"\nThe step detected within {rule.confirm_nights} nights in 95% of series at p < {rule.max_pvalue:g}, "
          "from the CV alone (normal approximation): 1 trial a night / 3 trials")
    floors = {m: (noise_floor(cv, rule), noise_floor(cv, rule, trials=3)) for m, cv in CV.items()}
    doc["noise_floor"] = floors
    print(" ".join(f"{m}: {one:.0%} / {three:.0%}" for m, (one, three) in floors.items()))
    print(f"\n({time.monotonic() - t0:.0f} s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
