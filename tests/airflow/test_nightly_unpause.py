"""The nightly on unpause: catchup=False, and the run Airflow 3 creates at once for the latest missed 02:00 is
skipped before anything is provisioned; runs on time, and manual ones, go ahead. Tested where a user meets it:
a running Airflow standalone, `airflow dags unpause`, the scheduler's own run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.api.datamodels._generated import DagRunType
from test_airflow_e2e import _call, _wait, standalone  # noqa: F401  (standalone: the running Airflow's fixture)

NOW = datetime(2026, 12, 2, 14, 5, tzinfo=UTC)
TWO_AM = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def test_the_nightly_does_not_catch_up(dagbag):
    nightly = dagbag.dags["benchcamp_nightly"]
    assert nightly.catchup is False and dagbag.dags["benchcamp_campaign"].catchup is False
    # the reaper runs first, then resolve_config: the skip comes before provision_node
    assert "resolve_config" in nightly.get_task("reap_expired").downstream_task_ids


def test_airflow_s_timetable_schedules_the_latest_missed_point_on_unpause(dagbag, monkeypatch):
    """The behaviour the guard answers, read from Airflow itself: with catchup=False and no earlier run the
    next run's point is the latest past 02:00 (due at once), not the next one."""
    import airflow.timetables.trigger as trigger
    from airflow.timetables.base import TimeRestriction

    sdk_timetable = dagbag.dags["benchcamp_nightly"].timetable
    assert type(sdk_timetable).__name__ == "CronTriggerTimetable" and sdk_timetable.expression == "0 2 * * *"
    timetable = trigger.CronTriggerTimetable("0 2 * * *", timezone="UTC")  # the scheduler's side of it
    monkeypatch.setattr(trigger, "utcnow", lambda: NOW)  # the clock, fixed: a test of Airflow's rule
    info = timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=datetime(2026, 1, 1, tzinfo=UTC), latest=None, catchup=False),
    )
    assert info.run_after == TWO_AM


# What the scheduler's run hands a task as ``dag_run.run_type``: the task SDK's own DagRunType (its str() is
# "DagRunType.SCHEDULED", not "scheduled").
SDK_SCHEDULED, SDK_MANUAL = DagRunType.SCHEDULED, DagRunType.MANUAL


@pytest.mark.parametrize(
    ("run_type", "run_after", "skipped"),
    [
        (SDK_SCHEDULED, TWO_AM, True),  # created on unpause at 14:05 for 02:00
        (SDK_SCHEDULED, NOW - timedelta(minutes=3), False),  # on time
        (SDK_MANUAL, TWO_AM, False),  # triggered by hand: always runs
        (SDK_SCHEDULED, None, False),
    ],
)
def test_missed_run(run_type, run_after, skipped):
    from tasks.campaign_tasks import missed_run

    assert str(run_type).startswith("DagRunType.")  # the value the real path produces, not a plain string
    why = missed_run(run_type, run_after, NOW)
    assert bool(why) is skipped
    if skipped:
        assert "12.1 h ago" in why and "trigger the DAG to run now" in why


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_unpausing_the_nightly_in_a_running_airflow_provisions_nothing(standalone):  # noqa: F811
    """As a user does it: Airflow standalone running, `airflow dags unpause benchcamp_nightly`; the scheduler
    creates the run for the latest missed 02:00 and that run ends skipped at resolve_config (the reaper runs),
    with no node provisioned and nothing in the results store."""
    now = datetime.now(UTC)
    if now.hour == 2:  # 02:00-03:00 UTC: the run the scheduler creates is on time, and runs (a whole campaign)
        pytest.skip("within the nightly's grace hour after 02:00 UTC: the unpause run is not a missed one")
    base = f"http://127.0.0.1:{standalone['port']}"
    proc, log = standalone["proc"], standalone["log"]
    _wait("the API server", lambda: _call("GET", f"{base}/api/v2/monitor/health")[0] == 200, 480, proc, log)
    token = _token(standalone, base)
    nightly = f"{base}/api/v2/dags/benchcamp_nightly"
    _wait("the nightly to be parsed", lambda: _call("GET", nightly, token)[0] == 200, 180, proc, log, every=0.5)
    assert _call("GET", nightly, token)[1]["is_paused"] is True  # a new DAG starts paused
    env = {**standalone["env"], "PATH": os.environ["PATH"]}
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "dags", "unpause", "benchcamp_nightly"],
                   env=env, check=True, capture_output=True, text=True, timeout=180)

    def the_run():
        status, runs = _call("GET", f"{nightly}/dagRuns", token)
        return runs["dag_runs"][0] if status == 200 and runs["dag_runs"] else None

    run = _wait("the scheduler's run", the_run, 180, proc, log)
    assert run["run_type"] == "scheduled", run  # the scheduler's, not a trigger
    runs = f"{nightly}/dagRuns/{urllib.request.quote(run['dag_run_id'], safe='')}"

    def finished():
        status, tis = _call("GET", f"{runs}/taskInstances?limit=100", token)
        states = {t["task_id"]: t["state"] for t in tis["task_instances"]} if status == 200 else {}
        assert states.get("engine_config.provision_node") in (None, "skipped"), states  # a node asked for
        r = _call("GET", runs, token)[1]
        return (r["state"], states) if r["state"] in ("success", "failed") else None

    state, states = _wait("the unpause run to end", finished, 420, proc, log, every=2)
    assert states["reap_expired"] == "success" and states["resolve_config"] == "skipped", states
    assert all(s == "skipped" for k, s in states.items() if k not in ("reap_expired", "resolve_config")), states
    assert state == "success", states  # a skipped night is not a failed one
    status, why = _call("GET", f"{runs}/taskInstances/resolve_config/xcomEntries/skipped", token)
    assert status == 200 and "a missed run" in json.dumps(why), why
    assert not (standalone["params"].parent / "results").exists()  # nothing measured, nothing provisioned


def _token(airflow: dict, base: str) -> str:
    pw_file = airflow["home"] / "simple_auth_manager_passwords.json.generated"
    password = _wait("the generated password", lambda: pw_file.exists() and json.loads(pw_file.read_text())["admin"],
                     60, airflow["proc"], airflow["log"])
    status, body = _call("POST", f"{base}/auth/token", body={"username": "admin", "password": password})
    assert status in (200, 201), body
    return body["access_token"]
