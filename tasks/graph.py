"""The campaign graph shared by the manual and the nightly DAG.

One mapped task group per matrix entry (engine configuration), each with its
own node: provision + deploy are setups, stop + deprovision are teardowns
(they run when the sweep fails; a failed setup cleans up after itself).

The sweep points of one engine run inside one task, in order: Airflow 3.3
cannot expand a task inside an expanded task group ("operator expansion in an
expanded task group is not yet supported"), and points on one engine must
not overlap anyway. Each point is uploaded as it completes and a retry
resumes after the last stored point.

Pool ``gpu_nodes`` (create it: ``airflow pools set gpu_nodes 2 "GPU nodes"``)
caps how many provision/deploy/sweep tasks hold GPU resources at once.
"""

from __future__ import annotations

from airflow.sdk import task_group

from tasks import campaign_tasks as t


def campaign_graph():
    items = t.resolve_config()

    @task_group(group_id="engine_config")
    def engine_config(item):
        workload = t.prepare_workload(item)
        node = t.provision_node(item).as_setup()
        workload >> node  # do not hold a GPU node while the workload builds
        deployment = t.deploy_engine(item, node).as_setup()
        measured = t.sweep(item, deployment, workload)
        stopped = t.stop_engine(item, deployment).as_teardown(setups=deployment)
        # A failed deprovision may leave a paid node running: that must fail the run.
        released = t.deprovision_node(item, node).as_teardown(setups=node, on_failure_fail_dagrun=True)
        measured >> stopped >> released
        summary = t.summarize(item, workload)
        released >> summary
        mlflow_run_id = t.track(item, summary)
        t.evaluate(item, mlflow_run_id)

    groups = engine_config.expand(item=items)
    groups >> t.verdict(items)
    return items
