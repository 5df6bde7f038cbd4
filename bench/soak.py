"""A soak: back-to-back campaigns through a running Airflow while faults are injected, then an audit.

    nice -n 10 uv run --frozen python bench/soak.py [--executors standalone,celery] [--rounds 1]
        [--duration 6] [--out bench/results/soak]

For each executor (``standalone``: `airflow standalone`; ``celery``: CeleryExecutor, Redis and two Celery
workers), an MLflow server (SQLite store) and the campaign DAG, it triggers one-engine simulated campaigns
over REST, one after the other, each with one fault (bench/common/soak_run.py):

- ``none``: a control campaign;
- ``engine-crash``: the simulated engine's fault flag (``--fault crash-after-requests=6``) crashes it
  mid-point;
- ``mlflow-down``: the MLflow server is SIGKILLed while the sweep runs and restarted once ``track`` has
  failed on it (its Airflow retry logs the campaign);
- ``disk-full``: the results store is a 64 MiB tmpfs that the soak fills 2 s into the sweep; then the space
  is freed and the sweep cleared (retried);
- ``worker-kill`` (Celery): the worker running the sweep is SIGKILLed with its process group 3 s into the
  sweep (a lost host) and restarted 5 s later; then the sweep is cleared (retried);

and once, after the campaigns, ``s3-down-dvc-push``: the results are archived with ``dvc push`` to an S3
remote on moto's server, unreachable during the first push (a gate in front of it refuses connections).

The audit, per campaign: the DAG run's and tasks' states against docs/reference/failure-modes.md, records expected
(each point's own count, point.json) against kept (rows of its records.parquet), mixed records (another
point's, or twice), records kept from killed attempts, MLflow parent runs per execution (1 = idempotent
retries), the most engines of the execution alive at once (1 = no second engine) and those left after it;
after every service stopped, any process still carrying the soak's id (orphans). Slurm jobs and EC2
instances: none are provisioned (local provider), so squeue is looked at only where it exists.

Writes ``soak.json`` and ``soak.md`` (the table) under ``--out``; exit 1 when any campaign was not as
documented, or a record was lost or mixed, or an orphan was found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import tables
from bench.common.paths import command, results
from bench.common.servers import free_port
from bench.common.soak import Services, http_up, slurm_jobs
from bench.common.soak_run import (
    TABLE_HEAD,
    Outcome,
    Soak,
    dvc_push_with_s3_down,
    end_orphans,
    orphans,
    soak_executor,
    table_rows,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executors", default="standalone,celery")
    ap.add_argument("--rounds", type=int, default=1, help="times through each executor's schedule")
    ap.add_argument("--duration", type=float, default=6.0, help="each point's window, s")
    ap.add_argument("--no-dvc", action="store_true", help="skip the DVC push with S3 down")
    ap.add_argument("--out", type=Path, default=results("soak"))
    args = ap.parse_args()
    soak_id = os.urandom(4).hex()
    work = Path(tempfile.mkdtemp(prefix=f"benchcamp-soak-{soak_id}-"))
    print(f"[soak] {soak_id}: work in {work}", flush=True)
    t0, load = time.monotonic(), os.getloadavg()
    outcomes: list[Outcome] = []
    last: Soak | None = None
    for executor in args.executors.split(","):
        found, last = soak_executor(executor, work / executor, soak_id, args.rounds, args.duration)
        outcomes += found
    if not args.no_dvc and last is not None:
        services = Services(work / "moto", soak_id)
        try:
            port = free_port()
            services.start("moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                           {**os.environ, "AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak"})
            services.wait("moto", lambda: http_up(f"http://127.0.0.1:{port}/moto-api/"), 60, every=0.5)
            os.environ.update({"AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak",
                               "AWS_DEFAULT_REGION": "us-east-1"})  # dummy credentials: moto stands in for S3
            outcomes.append(dvc_push_with_s3_down(last, port, work))
        finally:
            services.stop_all()
    left = orphans(soak_id)
    end_orphans(left)
    jobs = slurm_jobs(soak_id)
    rows = table_rows(outcomes)
    total = ["all", f"{len(outcomes)} faults", len(outcomes), "", "yes" if all(not o.problems for o in outcomes)
             else "NO", *(sum(r[i] for r in rows if r[i] != "-") for i in range(5, 10)), "", "", len(left)]
    text = tables.render(TABLE_HEAD, [*rows, total], markdown=True)
    kinds = {}
    for o in outcomes:
        kinds[o.fault] = kinds.get(o.fault, 0) + 1
    summary = (f"{len(outcomes)} campaigns/steps in {time.monotonic() - t0:.0f} s; faults per kind: "
               + ", ".join(f"{k} {n}" for k, n in kinds.items())
               + f"; orphan processes after the services stopped: {len(left)}"
               + ("; Slurm: no squeue here" if jobs is None else f"; Slurm jobs of the soak: {len(jobs)}")
               + "; EC2 instances: none provisioned (local provider)")
    print(text)
    print(summary)
    for o in outcomes:
        for p in o.problems:
            print(f"PROBLEM {o.executor} {o.fault}: {p}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.md").write_text(f"`{command()}` (load average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; 2 cores shared)\n\n{text}\n\n{summary}\n")
    (args.out / "soak.json").write_text(json.dumps({"soak_id": soak_id, "outcomes": [o.to_dict() for o in outcomes],
                                                    "orphans": left, "slurm_jobs": jobs}, indent=1))
    bad = any(o.problems for o in outcomes) or left
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
