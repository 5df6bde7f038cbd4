"""dag.test() of the campaign DAG with provider.kind=slurm on the real single-node Slurm (tests/conftest.py's
slurm_cluster): the job first waits in the queue (every fake GPU held by another job), and provision_node, a
sensor in reschedule mode, gives its slot back between looks (a TaskReschedule row) instead of holding a
worker; then the simulated engine runs as the job, is measured, and every teardown leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_campaign_dag import _engines_left, _engines_of, _states, tiny_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_campaign_dag_on_slurm_waits_in_reschedule_mode_measures_and_cleans_up(
    dagbag, tmp_path, mlflow_db, slurm_cluster
):
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from benchcamp.deploy import free_port

    env_dir = tmp_path / "slurm-env"
    conf = tiny_conf(tmp_path)
    conf["overrides"] |= {
        "provider.slurm.env_dir": str(env_dir), "provider.slurm.engine_port": free_port(),
        "provider.slurm.gpus_per_node": 1, "provider.slurm.time_limit_min": 10,
    }
    conf["provider"] = "slurm"
    dag = dagbag.dags["benchcamp_campaign"]
    sensor = dag.get_task("engine_config.provision_node")
    assert sensor.mode == "reschedule"
    sensor.poke_interval = 0.5  # 30 s by default (BENCHCAMP_QUEUE_POKE_S)
    blocker = slurm_cluster.hold_every_gpu("sleep 4")
    try:
        dr = dag.test(run_conf=conf)
    finally:
        slurm_cluster.run("scancel", blocker, check=False)
    states = _states(dr)
    assert dr.state == "success", states
    assert states["engine_config.deprovision_node"] == "success"
    ti_ids = [ti.id for ti in dr.get_task_instances() if ti.task_id == "engine_config.provision_node"]
    with create_session() as session:
        rows = session.scalars(select(TaskReschedule).where(TaskReschedule.ti_id.in_(ti_ids))).all()
    assert rows, "provision_node never gave its slot back while the job was queued"
    assert slurm_cluster.jobs() == []
    assert _engines_left(_engines_of(dr)) == []
    assert sorted(p.name for p in Path(env_dir).glob("*") if p.suffix != ".log") == []
