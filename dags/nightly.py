"""Nightly regression guard: the campaign with params.yaml's defaults, every night,
plus the reaper that terminates any benchcamp EC2 node past its expiry.
Parse-time cost: yaml + airflow.sdk only.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from airflow.sdk import dag  # noqa: E402

from tasks import campaign_tasks as t  # noqa: E402
from tasks.form import campaign_params  # noqa: E402
from tasks.graph import campaign_graph  # noqa: E402

DEFAULT_ARGS = {"owner": "benchcamp", "retries": 1, "retry_delay": timedelta(minutes=2)}


@dag(
    dag_id="benchcamp_nightly",
    schedule="0 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=campaign_params(),
    tags=["benchcamp", "benchmark", "vllm", "nightly", "regression"],
    doc_md=__doc__,
    dagrun_timeout=timedelta(hours=12),
)
def benchcamp_nightly():
    items = campaign_graph()
    t.reap_expired() >> items  # free leftovers before asking for capacity


benchcamp_nightly()
