"""benchcamp campaigns: the manual DAG (trigger form) and the nightly regression guard.

Per matrix entry (one engine configuration = one node), a mapped task group:
prepare_workload -> provision_node (setup) -> deploy_engine (setup) -> sweep
-> stop_engine (teardown) -> deprovision_node (teardown) -> summarize -> track
-> evaluate; then ``verdict`` fails the run on a failed or interrupted sweep, no
valid point or a regression, and notifies (param ``notify``). Each task wraps
one step of benchcamp.campaign.steps, the steps `benchcamp run` runs in one
process. Points of one engine run inside one sweep task, in order (Airflow 3.3
cannot expand a task inside an expanded group, and points on one engine must
not overlap); a retry resumes after the last stored point.

Pools: ``gpu_nodes`` (``airflow pools set gpu_nodes 2 "GPU nodes"``) caps the
provision and deploy tasks running at once; ``loadgen_hosts`` (one slot per
machine that drives a load generator: 1 on a single machine) caps the sweeps of
every run, so two never share one client's CPUs. With Celery, sweeps go to the
queue named by ``BENCHCAMP_SWEEP_QUEUE`` (workers ``-q <queue> -c 1``). One point from several client hosts:
``BENCHCAMP_LOADGEN_SHARDS=N`` (read at parse time) adds ``sweep_shard_1`` .. ``sweep_shard_<N-1>`` beside
``sweep`` (shard 0); a campaign with ``load.shards: S`` (S <= N) runs each point as S shards, one per host,
that start together (benchcamp.loadgen.shards); summarize merges them. The pool needs S free slots at once.
Secrets go in Airflow connections, variables or a secrets backend, never in the
form or the conf: the form's ``hf_token_ref`` names where the Hugging Face token
lives, an endpoint's key is the password of ``provider.endpoint.airflow_conn_id``;
resolve_config refuses a secret typed as a value (Airflow keeps the run's conf).
The nightly: catchup=False (no past night replayed); the run Airflow 3 still creates on unpause for the
latest missed 02:00 is skipped by resolve_config (tasks.campaign_tasks.missed_run): unpausing never starts
a GPU node; the first run is the next 02:00.
Parse-time cost: yaml, pydantic and airflow.sdk only.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task_group

from benchcamp.campaign.form import form_fields
from tasks import campaign_tasks as t
from tasks.notifiers import CampaignNotifier

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def campaign_dag(
    dag_id: str, schedule: str | None, retry_delay: timedelta, max_active_runs: int, tags: list[str], doc: str
) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=START,
        catchup=False,  # a documented choice: no night is replayed (the latest missed one is skipped, above)
        max_active_runs=max_active_runs,
        default_args={"owner": "benchcamp", "retries": 1, "retry_delay": retry_delay},
        # the nightly's defaults are params.yaml's campaign as it is; the form's, one engine (Topology none)
        params={name: Param(**spec) for name, spec in form_fields(nightly=schedule is not None).items()},
        tags=["benchcamp", "benchmark", "vllm", *tags],
        doc_md=doc,
        dagrun_timeout=timedelta(hours=12),
    ) as dag:

        def notify() -> CampaignNotifier:
            return CampaignNotifier(target="{{ params.notify }}")

        items = t.resolve_config.override(on_failure_callback=notify())()  # bad input: nothing else runs

        @task_group(group_id="engine_config")
        def engine_config(item):
            workload = t.prepare_workload(item)
            node = t.provision_node(item).as_setup()
            workload >> node  # do not hold a GPU node while the workload builds
            deployment = t.deploy_engine(item, node).as_setup()
            measured = [t.sweep(item, deployment, workload)] + [
                t.sweep.override(task_id=f"sweep_shard_{k}")(item, deployment, workload, shard=k)
                for k in range(1, t.SWEEP_SHARDS)
            ]
            stopped = t.stop_engine(item, deployment).as_teardown(setups=deployment)
            # A failed deprovision may leave a paid node running: that must fail the run.
            released = t.deprovision_node(item, node).as_teardown(setups=node, on_failure_fail_dagrun=True)
            measured >> stopped >> released
            summary = t.summarize(item, workload)
            released >> summary
            t.evaluate(item, t.track(item, summary))

        verdict = t.verdict.override(on_failure_callback=notify())(items)
        engine_config.expand(item=items) >> verdict
        if schedule is not None:
            t.reap_expired() >> items  # free leftover EC2 nodes before asking for capacity
    return dag


manual = campaign_dag(
    "benchcamp_campaign",
    None,
    timedelta(seconds=30),
    4,
    ["manual"],
    "Manual benchmark campaign: trigger from the form (or REST with a conf).\n\n" + __doc__,
)
nightly = campaign_dag(
    "benchcamp_nightly",
    "0 2 * * *",
    timedelta(minutes=2),
    1,
    ["nightly", "regression"],
    "Nightly regression guard: params.yaml's defaults every night, plus the EC2 reaper.\n\n" + __doc__,
)
