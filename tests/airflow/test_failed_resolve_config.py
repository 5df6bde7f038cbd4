"""dag.test() of a campaign whose resolve_config fails: every task after it ends with
"resolve_config failed: <its one line>" (the mapped group is upstream_failed, verdict runs and says why),
never a traceback; a refused secret says the run's conf holds it and how to delete the run. No engine runs:
seconds."""

from __future__ import annotations

import logging

import pytest
from test_campaign_dag import _states, tiny_conf

pytestmark = [pytest.mark.timeout(300)]


def _failed(dagbag, conf, caplog):
    caplog.set_level(logging.INFO)
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "failed", states
    assert states["resolve_config"] == "failed" and states["verdict"] == "failed", states
    assert all(s == "upstream_failed" for k, s in states.items() if k.startswith("engine_config.")), states
    return [r for r in caplog.records]


def test_a_bad_config_fails_verdict_with_resolve_config_s_line(dagbag, tmp_path, caplog):
    conf = tiny_conf(tmp_path)
    conf["overrides"]["engine.max_num_seqs"] = 0  # schema: >= 1
    records = _failed(dagbag, conf, caplog)
    text = "\n".join(r.getMessage() for r in records)
    lines = [m for m in text.splitlines() if m.startswith("resolve_config failed: ")]
    assert lines and "engine.max_num_seqs" in lines[-1], text[-3000:]
    assert "\n" not in lines[-1].removeprefix("resolve_config failed: ")
    assert "TypeError" not in text and "NoneType" not in text
    assert not [r for r in records if r.exc_info and r.getMessage() == "Task failed with exception"]


def test_a_refused_secret_says_the_conf_holds_it_and_how_to_delete_the_run(dagbag, tmp_path, caplog):
    secret = "hf_" + "q" * 34
    conf = tiny_conf(tmp_path, [{"engine.extra_args": ["--hf-token", secret]}])
    records = _failed(dagbag, conf, caplog)
    text = "\n".join(r.getMessage() for r in records)
    line = next(m for m in text.splitlines() if m.startswith("resolve_config failed: "))
    assert "--hf-token" in line and "conf holds it" in line and "Delete Dag Run" in line and "rotate" in line
    assert secret not in text


def test_a_window_too_short_fails_before_any_node_and_every_later_task_names_it(dagbag, tmp_path, caplog):
    """An infeasible campaign the config alone cannot tell (the workload decides: a 4 s window at level 4 holds
    at most a few of its requests, load.min_requests=20): prepare_workload fails in one line with the form's
    labels, provision_node never runs, the verdict names the task and its line, and the failed instance's name
    on the run page (its rendered map index) is that line."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    caplog.set_level(logging.INFO)
    conf = tiny_conf(tmp_path)
    conf["overrides"]["load.min_requests"] = 20
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "failed", states
    assert states["engine_config.prepare_workload"] == "failed", states
    assert states["engine_config.provision_node"] == "upstream_failed", states  # no node asked for
    text = "\n".join(r.getMessage() for r in caplog.records)
    line = "Duration (s) (load.duration_s)=4: at Sweep levels (load.levels)=4 about "
    assert f"engine_config.prepare_workload failed: {line}" in text, text[-3000:]
    assert "set Duration (s) (load.duration_s) to at least" in text
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dr.dag_id, run_id=dr.run_id,
                                                   task_id="engine_config.prepare_workload").one()
        assert ti.rendered_map_index.startswith(f"matrix[0] failed: {line}"), ti.rendered_map_index
    assert not (tmp_path / "results" / "dagtest").exists() or not any(
        (p / "c4").exists() for p in (tmp_path / "results" / "dagtest").iterdir())  # nothing measured
