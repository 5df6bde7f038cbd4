"""Write benchcamp/data/sim_error.json: every validation value of the fidelity replay, for benchcamp.sim.fidelity.

The validation set of bench/fidelity/replay.py (published real-hardware results, replayed by the simulated
engine in virtual time; never fitted) as rows [point id, source, GPU, model, metric, simulated / published], with
each model's architecture class, the command, commit and date. A simulated figure's expected error is read from
it at run time (no replay); tests/sim/test_fidelity_table.py checks it against a fresh replay of a few points.

    uv run python bench/fidelity/error_table.py [--csv bench/results/fidelity/fidelity.csv] [--jobs 2]

``--csv``: reuse the table a replay (``replay.py --set validation``) wrote instead of replaying; its validation
rows are used as they are. Rerun after any change to the performance model, the profiles or the corpus.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common.fidelity import CORPUS, load_corpus, rows_of, run_all
from bench.common.paths import ROOT, command
from benchcamp.sim.fidelity import DATA_FILE, PHASE_OF_METRIC, architecture

OUT = ROOT / "benchcamp" / "data" / DATA_FILE


def replayed_rows(jobs: int, only: set[str] | None = None) -> list[dict]:
    """The validation set's rows (bench.common.fidelity.rows_of), replayed now; ``only``: those point ids."""
    _, points = load_corpus(CORPUS)
    points = [p for p in points if p["set"] == "validation" and (only is None or p["id"] in only)]
    return rows_of(points, run_all(points, jobs))


def compact(rows: list[dict]) -> list[list]:
    return sorted(
        [r["id"], r["source"], r["gpu"], r["model"], r["metric"], round(float(r["ratio"]), 6)]
        for r in rows
        if r["set"] == "validation" and r["metric"] in PHASE_OF_METRIC
    )


def commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD") + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, help="a replay's fidelity.csv to reuse instead of replaying")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.csv:
        with args.csv.open() as f:
            rows = list(csv.DictReader(f))
        how = (
            f"the validation rows of {args.csv}, written by `uv run python bench/fidelity/replay.py --set validation "
            f"--out {args.csv.parent}` on the commit below (the simulator's sources unchanged since)"
        )
    else:
        rows = replayed_rows(args.jobs)
        how = "bench/fidelity/replay.py's validation set, replayed by this command"
    table = compact(rows)
    doc = {
        "command": command(),
        "rows_from": how,
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "source": "bench/fidelity/corpus/*.yaml, set: validation (published real-hardware serving results, each "
        "with its URL and date in its file; never used to fit a profile)",
        "columns": ["id", "source", "gpu", "model", "metric", "ratio (simulated / published)"],
        "architectures": {m: architecture(m) for m in sorted({r[3] for r in table})},
    }
    head = json.dumps(doc, indent=1, allow_nan=False)[:-2]  # one row a line: a diff shows which values moved
    body = ",\n".join("  " + json.dumps(r, allow_nan=False) for r in table)
    args.out.write_text(head + ',\n "rows": [\n' + body + "\n ]\n}\n")
    print(f"wrote {args.out}: {len(table)} values, {len({r[0] for r in table})} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
