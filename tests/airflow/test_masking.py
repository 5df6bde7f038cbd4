"""Secrets in engine.extra_args are refused by resolve_config and registered with Airflow's log masker.

In a deployed Airflow, the task process sends each log event to its supervisor,
which writes the task log through ``airflow.sdk.log.logging_processors`` (its
``mask_logs`` step applies the secrets registered by ``mask_secret``). dag.test()
runs tasks in-process and prints their log to the console *unmasked*, so the test
runs the real ``resolve_config`` task under dag.test(), takes the lines it logged
(caplog),
and writes them through the supervisor's task-log chain, built as
``supervisor._configure_logging`` builds it. Before the task ran, that chain lets
the secret through (the control); afterwards it must print *** instead.
"""

from __future__ import annotations

import io
import json
import logging
import os

import pendulum
import pytest

SECRET = "hf_maskProbeSecretValue_1234567890"
ARG_SECRET = "sk-inlineApiKeyValue-0987654321"


def _task_log_writer():
    """The supervisor's writer of a task's log file (airflow.sdk.execution_time.supervisor._configure_logging)."""
    import structlog
    from airflow.sdk.log import logging_processors

    buf = io.BytesIO()
    logger = structlog.wrap_logger(structlog.BytesLogger(buf), processors=logging_processors(json_output=True),
                                   logger_name="task").bind()
    return logger, buf


def _as_task_log(lines: list[str]) -> str:
    logger, buf = _task_log_writer()
    for line in lines:
        logger.info(line)
    return "\n".join(json.loads(raw)["event"] for raw in buf.getvalue().decode().splitlines())


@pytest.fixture
def fresh_masker():
    from airflow.sdk._shared.secrets_masker.secrets_masker import reset_secrets_masker
    reset_secrets_masker()
    yield
    reset_secrets_masker()


def test_resolve_config_refuses_extra_args_secrets_and_masks_them_in_its_task_log(airflow_db, fresh_masker, tmp_path,
                                                                                 caplog, capfd):
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG

    from tasks.campaign_tasks import resolve_config

    with DAG("benchcamp_masking_probe", schedule=None, start_date=pendulum.datetime(2025, 1, 1),
             params={"matrix": [{}]}) as dag:
        resolve_config()
    # dag.test() needs the DAG serialized; it is not in the dags folder, so write it to the DB here.
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(tmp_path))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)

    assert SECRET in _as_task_log([f"control {SECRET}"])  # nothing registered it yet
    caplog.set_level(logging.INFO)
    dr = dag.test(run_conf={"matrix": [{"engine.extra_args": ["--hf-token", SECRET, f"--api-key={ARG_SECRET}",
                                                              "--max-model-len", "8192"]}]})
    # Refused before it returns an XCom: one line naming the reference field, without the value.
    out = capfd.readouterr()
    printed = caplog.text + out.out + out.err  # dag.test() prints the task's error
    assert str(dr.state) == "failed", printed[-3000:]
    refusal = [line for line in printed.splitlines() if "secret given as a value" in line]
    assert any("engine.hf_token_ref=airflow-variable:KEY" in line for line in refusal), printed[-3000:]
    assert SECRET not in printed and ARG_SECRET not in printed
    # The task registered both values with Airflow's masker before refusing them.
    task_log = _as_task_log([f"probe {SECRET} {ARG_SECRET}"])
    assert SECRET not in task_log and ARG_SECRET not in task_log and task_log == "probe *** ***"


def test_every_task_that_gets_a_config_registers_its_secrets_in_its_own_process(airflow_db, fresh_masker):
    """Each task runs in a fresh process: the ``masked`` decorator (on every task that gets a matrix
    item) registers the config's secrets and the deployment's key before the step runs."""
    import inspect

    from benchcamp import config as bc_config
    from benchcamp.campaign.handoff import MatrixItem
    from benchcamp.campaign.layout import StoreLayout
    from tasks import campaign_tasks as ct

    cfg = bc_config.load_config(None, {"engine.extra_args": ["--hf-token", SECRET, "--max-num-seqs", "64"]})
    layout = StoreLayout.for_execution(cfg.campaign.name, "probe.m0")
    item = MatrixItem(0, "probe.m0", cfg.to_dict(), cfg.fingerprint(), {}, layout).to_dict()  # as XCom holds it
    assert SECRET in _as_task_log([f"before {SECRET}"]) and ARG_SECRET in _as_task_log([ARG_SECRET])
    got = []
    ct.masked(lambda item, deployment: got.append(item["config"]["engine"]["extra_args"]))(
        item, deployment={"api_key_ref": "env:BENCHCAMP_MASK_PROBE_KEY"})
    assert got[0][1] == SECRET  # the engine still gets the real value
    text = _as_task_log([f"engine args {got[0]}"])
    assert SECRET not in text and "'--hf-token', '***', '--max-num-seqs', '64'" in text
    # The deployment's key travels as a reference; the step that resolves it hands it to Airflow's masker.
    from benchcamp.deploy.keys import deployment_api_key
    os.environ["BENCHCAMP_MASK_PROBE_KEY"] = ARG_SECRET
    try:
        assert deployment_api_key(None, {"api_key_ref": "env:BENCHCAMP_MASK_PROBE_KEY"}) == ARG_SECRET
    finally:
        del os.environ["BENCHCAMP_MASK_PROBE_KEY"]
    assert ARG_SECRET not in _as_task_log([f"key {ARG_SECRET}"])

    with_config = [name for name, obj in vars(ct).items() if hasattr(obj, "function")
                   and {"item", "items"} & set(inspect.signature(obj.function).parameters)]
    assert len(with_config) >= 10
    assert [n for n in with_config if getattr(getattr(ct, n).function, "masks_secrets", False) is not True] == []
