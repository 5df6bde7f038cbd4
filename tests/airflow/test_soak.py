"""The soak's short version (bench/soak.py runs the whole one): a running `airflow standalone`, an MLflow
server, and back-to-back campaigns with the cheapest faults: the simulated engine's fault flag crashes it
mid-point (then the sweep is cleared and retried), the MLflow server is killed mid-campaign and comes back
(track's Airflow retry logs it), the results disk (a tmpfs) fills mid-sweep (then is freed and the sweep
retried). Each campaign must end as docs/failure-modes.md says (DAG run and task states), keep every record
its points counted, mix none, log one MLflow run per execution across the retries, never run two engines at
once, and leave no process behind; the audit is bench/common/soak.py's, the one the full soak prints.

Everything real: Airflow's own servers over REST, the engine subprocess, the load generator, MLflow's server
on SQLite, the tmpfs (root; without it the disk-full campaign is left out, and the test says so); each fault must be named in the failed task's log.
"""

from __future__ import annotations

import os

import pytest

from bench.common.soak import can_mount
from bench.common.soak_run import end_orphans, orphans, soak_executor, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_short_soak_on_standalone_loses_nothing_and_leaves_nothing(tmp_path, migrated_airflow_db):
    faults = ["engine-crash", "mlflow-down", "disk-full"]
    if not can_mount():
        print("disk-full left out: mounting a tmpfs needs root")
        faults.remove("disk-full")
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
