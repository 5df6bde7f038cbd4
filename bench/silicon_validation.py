"""Validation on measured silicon (aiconfigurator-core's silicon_sample.csv; benchcamp/calibrate/silicon.py).

VALIDATION ONLY, never fitted: prints the checked rows' share of TTFT, TPOT and throughput values within +-15%
and +-30%, the median |error| and the ranking agreement, per source, engine and version, and the dropped rows
counted by reason. ``--drops FILE`` writes every dropped row with its reason (CSV); ``--rows FILE`` every kept row
with its prediction.

    uv run --frozen python bench/silicon_validation.py
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from benchcamp.calibrate import silicon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drops", help="write the dropped rows with their reasons here (CSV)")
    ap.add_argument("--rows", help="write the kept rows with their predictions here (CSV)")
    args = ap.parse_args()
    t0 = time.time()
    kept, dropped = silicon.check(silicon.read())
    pred = silicon.predict(kept)
    print(
        f"silicon_sample.csv ({silicon.csv_path().parent.parent.name}): {len(kept)} rows checked, {len(dropped)} dropped"
    )
    for reason, n in dropped["reason"].str.split(":").str[0].value_counts().items():
        print(f"  dropped {n:>5} x {reason}")
    pd.set_option("display.width", 200)
    table = silicon.score(pred)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"({time.time() - t0:.1f} s)")
    if args.drops:
        dropped.to_csv(args.drops, index=False)
    if args.rows:
        pred.to_csv(args.rows, index=False)


if __name__ == "__main__":
    main()
