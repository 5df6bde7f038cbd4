"""Manual benchmark campaign: trigger from the UI form (or REST with a conf).

Provisions a node per engine configuration, deploys vLLM (or the simulated
engine), sweeps the load levels, tears everything down (also on failure),
logs to MLflow, compares with baselines and renders the report. A failed
sweep or a regression fails the run and notifies (param ``notify``).
Parse-time cost: yaml + airflow.sdk only.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

# tasks/ lives at the project root, next to dags/.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from airflow.sdk import dag  # noqa: E402

from tasks.form import campaign_params  # noqa: E402
from tasks.graph import campaign_graph  # noqa: E402

DEFAULT_ARGS = {"owner": "benchcamp", "retries": 1, "retry_delay": timedelta(seconds=30)}


@dag(
    dag_id="benchcamp_campaign",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    default_args=DEFAULT_ARGS,
    params=campaign_params(),
    tags=["benchcamp", "benchmark", "vllm", "manual"],
    doc_md=__doc__,
    dagrun_timeout=timedelta(hours=12),
)
def benchcamp_campaign():
    campaign_graph()


benchcamp_campaign()
