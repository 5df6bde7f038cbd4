"""Fit and validate the simulated engine's prompt-token estimate (benchcamp.tokencount) on
AA-AgentPerf's recorded counts, and measure what counting costs per request.

    make agentperf-data && uv run --frozen python bench/tokencount_fit.py [--write]

Data: agentperf-local 0.3.4's agentperf-default-v1 replay (Apache-2.0, Artificial Analysis):
168 turns of 8 tasks with ``recorded_prompt_tokens``. (aa-mini-v1 has no recorded counts, so
it cannot be a fit or a validation set.) The turns of one task share most of their text, so
validation holds out whole tasks: leave-one-task-out, each task predicted by coefficients
fitted on the other 7 (never on itself). Printed per task: held-out error of the task's total
prompt tokens (the trajectory), and the held-out per-turn error distribution; then the
in-sample errors of the shipped coefficients (fitted on all 8), labelled as such.

--write prints the all-task fit as the ESTIMATES entry to paste into benchcamp/tokencount.py.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from scipy.optimize import nnls

from benchcamp import tokencount
from benchcamp.workload.agentperf import find_replays, read_turns


def design(turns: list) -> np.ndarray:
    rows = []
    for t in turns:
        pieces = tokencount.chat_pieces(t.body["messages"], t.body.get("tools"))
        f = sum(p[1] for p in pieces)
        rows.append(np.r_[f, sum(p[2] for p in pieces), 1.0])
    return np.array(rows)


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return nnls(x / y[:, None], np.ones(len(y)))[0]  # minimises the squared relative error


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    root = find_replays()
    if root is None:
        print("no agentperf-local replays: run `make agentperf-data`", file=sys.stderr)
        return 2
    tasks = read_turns(root / "agentperf-default-v1")
    names = list(tasks)
    x = {k: design(v) for k, v in tasks.items()}
    y = {k: np.array([float(t.recorded_prompt_tokens) for t in v]) for k, v in tasks.items()}
    print("leave-one-task-out validation (coefficients fitted on the other 7 tasks):")
    print(f"{'task':32s} {'turns':>5s} {'trajectory':>10s} {'turn p50':>9s} {'turn p90':>9s} {'turn max':>9s}")
    held_turns: list[float] = []
    held_traj: list[float] = []
    for k in names:
        others = [o for o in names if o != k]
        w = fit(np.vstack([x[o] for o in others]), np.concatenate([y[o] for o in others]))
        p = x[k] @ w
        traj = p.sum() / y[k].sum() - 1
        per = np.abs(p / y[k] - 1)
        held_traj.append(traj)
        held_turns.extend(per.tolist())
        print(
            f"{k:32s} {len(y[k]):5d} {traj:+10.2%} {np.percentile(per, 50):9.2%} "
            f"{np.percentile(per, 90):9.2%} {per.max():9.2%}"
        )
    ht = np.array(held_turns)
    print(
        f"held out: trajectory |error| max {max(map(abs, held_traj)):.2%}; per turn |error| "
        f"p50 {np.percentile(ht, 50):.2%} p90 {np.percentile(ht, 90):.2%} max {ht.max():.2%} ({len(ht)} turns)"
    )
    est = tokencount.Estimate()
    print("\nshipped coefficients (fitted on all 8 tasks): IN-SAMPLE errors, not an accuracy:")
    ins: list[float] = []
    for k in names:
        p = np.array([est.chat_tokens(t.body["messages"], t.body.get("tools")) for t in tasks[k]], dtype=float)
        ins.extend(np.abs(p / y[k] - 1).tolist())
        print(f"{k:32s} trajectory {p.sum() / y[k].sum() - 1:+.2%}")
    print(f"in-sample per turn |error| p50 {np.percentile(ins, 50):.2%} max {max(ins):.2%}")
    if args.write:
        w = fit(np.vstack(list(x.values())), np.concatenate(list(y.values())))
        feats = ", ".join(f"{v:.5f}" for v in w[:-2])
        print(f'\n"aa-agentperf": (({feats}), {w[-2]:.5f}, {w[-1]:.5f}),')
    # cost per request: a turn re-sends the conversation; the feature cache measures new text only
    all_turns = [t for v in tasks.values() for t in v]
    tokencount._feature_cache.clear()
    t0 = time.perf_counter()
    for t in all_turns:
        est.chat_ids(t.body["messages"], t.body.get("tools"), 32000)
    cold = (time.perf_counter() - t0) / len(all_turns)
    t0 = time.perf_counter()
    reps = 3
    for _ in range(reps):
        for t in all_turns:
            est.chat_ids(t.body["messages"], t.body.get("tools"), 32000)
    warm = (time.perf_counter() - t0) / (reps * len(all_turns))
    mean_tokens = np.mean([t.recorded_prompt_tokens for t in all_turns])
    print(
        f"\ncost per request (count + token ids, {mean_tokens:,.0f} prompt tokens mean): replay in order "
        f"{cold * 1e3:.2f} ms (each turn's new messages measured once), repeated {warm * 1e3:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
