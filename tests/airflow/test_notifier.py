"""The failure notifier: message content and target validation (log target; email: tests/test_notify.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest


def test_log_notifier_lists_every_problem(airflow_db, caplog):
    from tasks.notifiers import CampaignNotifier

    n = CampaignNotifier(target="log", problems=["matrix[0] (base): REGRESSION in revenue_per_gpu_hour -9.0%",
                                                 "matrix[1]: sweep point c8 aborted"])
    # Airflow's logging setup (on importing airflow.sdk) replaces the root's handlers: listen here
    logging.getLogger("benchcamp.verdicts.notify").addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.ERROR, logger="benchcamp.verdicts.notify"):
            n.notify({"dag": SimpleNamespace(dag_id="benchcamp_nightly"), "run_id": "scheduled__x"})
    finally:
        logging.getLogger("benchcamp.verdicts.notify").removeHandler(caplog.handler)
    text = caplog.text
    assert "benchcamp_nightly" in text and "scheduled__x" in text
    assert "REGRESSION in revenue_per_gpu_hour" in text and "c8 aborted" in text


def test_unknown_notify_target_is_a_clear_error(airflow_db):
    from tasks.notifiers import CampaignNotifier
    with pytest.raises(ValueError, match="log, email:<address> or slack:<conn_id>"):
        CampaignNotifier(target="pager:x", problems=["p"]).notify({"run_id": "r"})

