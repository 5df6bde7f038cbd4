"""The soak's short version (bench/soak.py runs the whole one): a running `airflow standalone`, an MLflow
server, and back-to-back campaigns with the cheapest faults: the simulated engine's fault flag crashes it
mid-point, and the MLflow server is killed mid-campaign and comes back (track's Airflow retry logs it); with
BENCHCAMP_SOAK_DISK_FULL=1 also the results disk (a tmpfs) filling mid-sweep (then freed and the sweep retried:
~3-5 min more, so CI leaves it to bench/soak.py and to tests/loadgen/test_full_disk_mid_point.py and
tests/test_results_writes.py below Airflow). Each campaign must end as docs/reference/failure-modes.md says (DAG run and
task states), keep every record its points counted, mix none, log one MLflow run per execution across the
retries, never run two engines at once, and leave no process behind; the audit is bench/common/soak.py's, the
one the full soak prints.

Everything real: Airflow's own servers over REST, the engine subprocess, the load generator, MLflow's server
on SQLite, the tmpfs (root); each fault must be named in the failed task's log.
"""

from __future__ import annotations

import os

import pytest

from bench.common.soak import can_mount
from bench.common.soak_run import end_orphans, orphans, soak_executor, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_short_soak_on_standalone_loses_nothing_and_leaves_nothing(tmp_path, migrated_airflow_db):
    # The two cheapest faults (~2.5 min in all). A full results disk through Airflow costs ~3-5 min more
    # (stop_engine's three retries while it is full, then the operator's Clear): bench/soak.py runs it, and
    # BENCHCAMP_SOAK_DISK_FULL=1 adds it here; tests/test_results_writes.py holds the library's full-disk rules.
    faults = ["engine-crash", "mlflow-down"]
    if os.environ.get("BENCHCAMP_SOAK_DISK_FULL") == "1":
        if can_mount():
            faults.append("disk-full")
        else:
            print("disk-full left out: mounting a tmpfs needs root")
    soak_id = os.urandom(4).hex()
    try:
        outcomes, _ = soak_executor("standalone", tmp_path, soak_id, rounds=1, duration=4.0,
                                    migrated_db=migrated_airflow_db, schedule=faults)
    finally:
        left = orphans(soak_id)
        end_orphans(left)
    for row in table_rows(outcomes):  # shown with -s, and on a failure
        print(row)
    assert [o.fault for o in outcomes] == faults
    assert {o.fault: o.problems for o in outcomes} == {f: [] for f in faults}
    for o in outcomes:
        assert o.records.expected > 0 and o.records.lost == 0 and o.records.mixed == 0, (o.fault, o.records)
        assert o.mlflow_parents == 1 and o.max_engines == 1 and o.engines_left == 0, o.to_dict()
    crash, mlflow_down = outcomes[0], outcomes[1]
    assert crash.tasks["engine_config.sweep"] == "failed" and crash.tasks["verdict"] == "failed"
    assert mlflow_down.tasks["engine_config.track"].startswith("success (try")  # the outage, visible
    assert left == []
