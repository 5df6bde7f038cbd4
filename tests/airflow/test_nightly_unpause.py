"""The nightly on unpause: catchup=False, and the run Airflow 3 creates at once for the
latest missed 02:00 is skipped before anything is provisioned; runs on time, and manual ones, go ahead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

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


@pytest.mark.parametrize(
    ("run_type", "run_after", "skipped"),
    [
        ("scheduled", TWO_AM, True),  # created on unpause at 14:05 for 02:00
        ("scheduled", NOW - timedelta(minutes=3), False),  # on time
        ("manual", TWO_AM, False),  # triggered by hand: always runs
        ("scheduled", None, False),
    ],
)
def test_missed_run(run_type, run_after, skipped):
    from tasks.campaign_tasks import missed_run

    why = missed_run(run_type, run_after, NOW)
    assert bool(why) is skipped
    if skipped:
        assert "12.1 h ago" in why and "trigger the DAG to run now" in why


def test_a_missed_run_is_skipped_whole_and_provisions_nothing(dagbag, tmp_path, monkeypatch):
    """dag.test() only makes manual runs, so the run's lateness is the one stand-in here: missed_run answers
    as for the run created on unpause; everything after resolve_config is skipped, nothing provisioned."""
    from test_campaign_dag import _states, tiny_conf

    from tasks import campaign_tasks

    reason = "scheduled for 2026-12-02 02:00 UTC, 12.1 h ago: a missed run"
    monkeypatch.setattr(campaign_tasks, "missed_run", lambda *a: reason)
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=tiny_conf(tmp_path))
    states = _states(dr)
    assert states["resolve_config"] == "skipped" and states["verdict"] == "skipped", states
    assert all(s in ("skipped", "upstream_failed") for k, s in states.items() if k.startswith("engine_config.")), states
    assert dr.state == "success", states  # a skipped night is not a failed one
    assert not (tmp_path / "results").exists()
