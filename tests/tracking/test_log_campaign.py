"""log_campaign on a real SQLite store and on a real `mlflow server` over HTTP."""

import json

import pytest
from factory import make_campaign

from benchcamp.campaign.result import to_campaign_result
from benchcamp.config import load_config
from benchcamp.secrets.redaction import register
from benchcamp.tracking import (
    get_run,
    historical_baselines,
    latest_run,
    log_campaign,
    log_report,
    log_verdicts,
    mark_baseline,
    marked_baseline,
)
from benchcamp.tracking.log import comparability_key as tracking_key
from benchcamp.tracking.log import dataset_digest
from benchcamp.tracking.store import client


@pytest.fixture(params=["sqlite", pytest.param("server", marks=pytest.mark.slow)])
def store(request, tmp_path):
    if request.param == "sqlite":
        return {"uri": request.getfixturevalue("sqlite_uri"), "artifacts": tmp_path / "mlartifacts"}
    return request.getfixturevalue("mlflow_server")


def _cfg(uri, **extra):
    return load_config(None, {"load.levels": [8, 32], "load.min_requests": 5, "tracking.mlflow_uri": uri,
                              "campaign.name": "trk", **extra})


def _runs(uri, exp_name):
    c = client(uri)
    exp = c.get_experiment_by_name(exp_name)
    return c, exp, c.search_runs([exp.experiment_id], max_results=100)


def test_parent_child_tags_params_metrics_dataset_artifacts(store, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "benchcamp_campaign")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026")
    api_key = "sk-test-0123456789abcdef-SECRET"
    register(api_key)
    cfg = _cfg(store["uri"], **{"engine.extra_args": ["--api-key", api_key, "--hf-token=hf_abcdefgh12345"]})
    camp = make_campaign(tmp_path, cfg, engine_log_text=f"INFO started with key {api_key}\n")
    parent_id = log_campaign(cfg, camp)
    assert log_campaign(cfg, camp) == parent_id  # logging the same execution again: no duplicates

    c, exp, runs = _runs(store["uri"], "trk")
    if store["uri"].startswith("http"):
        assert exp.artifact_location.startswith("mlflow-artifacts:")  # proxied over HTTP
    parents = [r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"]
    children = [r for r in runs if r.data.tags.get("benchcamp.role") == "point"]
    assert [r.info.run_id for r in parents] == [parent_id] and len(runs) == 3
    assert sorted(r.data.tags["benchcamp.point"] for r in children) == ["c32", "c8"]
    assert all(r.data.tags["mlflow.parentRunId"] == parent_id for r in children)

    p = c.get_run(parent_id)
    t = p.data.tags
    assert t["benchcamp.execution_id"] == "exec-1"
    assert t["benchcamp.fingerprint"] == cfg.fingerprint()
    assert t["benchcamp.workload_digest"] == camp.workload_digest
    assert t["benchcamp.engine_kind"] == "simulated" and t["benchcamp.engine_version"] == cfg.engine.version
    assert t["benchcamp.model"] == cfg.engine.model and t["benchcamp.gpu"] == "h200"
    assert t["benchcamp.gpu_count"] == "8" and t["benchcamp.provider"] == "local"
    assert t["benchcamp.airflow.dag_id"] == "benchcamp_campaign"
    assert t["benchcamp.airflow.run_id"] == "manual__2026"
    assert len(t["benchcamp.git_commit"]) in (40, 7) or t["benchcamp.git_commit"] == "unknown"
    assert t["benchcamp.valid"] == "true" and t["benchcamp.headline_point"] == camp.headline["point"]
    assert p.info.status == "FINISHED"

    # params: the flattened config, secrets masked
    assert p.data.params["engine.max_num_seqs"] == "256"
    dumped = json.dumps(p.data.params)
    assert api_key not in dumped and "hf_abcdefgh12345" not in dumped
    assert json.loads(p.data.params["engine.extra_args"]) == ["--api-key", "***", "--hf-token=***"]

    # metrics: headline on the parent, every numeric figure on each child
    assert p.data.metrics["total_tokens_per_s_per_gpu"] == pytest.approx(camp.headline["total_tokens_per_s_per_gpu"])
    for ch in children:
        point = next(x for x in camp.points if x.label == ch.data.tags["benchcamp.point"])
        numeric = {k for k, v in point.summary.items() if isinstance(v, (int, float))}
        assert numeric <= set(ch.data.metrics)
        assert ch.data.metrics["p90_user_tokens_per_s"] == pytest.approx(point.summary["p90_user_tokens_per_s"])

    # the workload dataset, searchable by digest
    ds = p.inputs.dataset_inputs
    assert [d.dataset.digest for d in ds] == [dataset_digest(camp.workload_digest)]
    assert ds[0].dataset.name == "agentic-coding"
    found = c.search_runs([exp.experiment_id], f"dataset.digest = '{dataset_digest(camp.workload_digest)}'")
    assert [r.info.run_id for r in found] == [parent_id]

    # artifacts: config, summary, redacted engine log; records + summary per point
    names = {a.path for a in c.list_artifacts(parent_id)}
    assert {"config.json", "summary.json", "logs"} <= names
    log_dir = tmp_path / "dl"
    log_path = c.download_artifacts(parent_id, "logs/engine.log", str(log_dir))
    assert api_key not in open(log_path).read() and "***" in open(log_path).read()
    for ch in children:
        assert {"records.parquet", "summary.json"} <= {a.path for a in c.list_artifacts(ch.info.run_id)}
    if store["uri"].startswith("http"):  # the server's proxy stored them on its side
        assert list(store["artifacts"].rglob("records.parquet"))

    # reading back: the full campaign, records included
    tracked = get_run(store["uri"], children[0].info.run_id)  # a point's id resolves to its campaign
    from benchcamp.verdicts.compare import comparability_key as compare_key

    assert tracked.run_id == parent_id
    assert tracked.key == compare_key(cfg, camp.workload_digest, camp.headline["point"])
    assert {p.label: p.window for p in tracked.points()} == {p.label: p.window for p in camp.points}
    assert len(tracked.load_records()) == 60
    back = to_campaign_result(tracked, tmp_path / "back")
    assert back.config.fingerprint() == cfg.fingerprint() or back.config.engine.extra_args != cfg.engine.extra_args
    assert [x.label for x in back.points] == ["c8", "c32"] and all(x.records_path.exists() for x in back.points)


def test_rerun_same_execution_updates_instead_of_duplicating(tmp_path, sqlite_uri):
    store = {"uri": sqlite_uri}
    cfg = _cfg(store["uri"], **{"campaign.name": "idem"})
    camp = make_campaign(tmp_path, cfg)
    first = log_campaign(cfg, camp)
    camp2 = make_campaign(tmp_path, cfg, seed=5)  # same execution id, new measurements
    second = log_campaign(cfg, camp2)
    assert first == second
    c, exp, runs = _runs(store["uri"], "idem")
    assert len(runs) == 3  # one parent, two points
    assert c.get_run(first).data.metrics["total_tokens_per_s_per_gpu"] == pytest.approx(
        camp2.headline["total_tokens_per_s_per_gpu"])
    # a re-run with fewer points drops the stale child
    camp3 = make_campaign(tmp_path, cfg, levels=(8,))
    log_campaign(cfg, camp3)
    assert len(_runs(store["uri"], "idem")[2]) == 2
    # another execution is another parent
    log_campaign(cfg, make_campaign(tmp_path, cfg, execution_id="exec-2"))
    assert len([r for r in _runs(store["uri"], "idem")[2] if r.data.tags["benchcamp.role"] == "campaign"]) == 2
    assert latest_run(store["uri"], "idem").execution_id in ("exec-1", "exec-2")


def test_verdict_tags_and_report_artifacts(tmp_path, sqlite_uri):
    uri = sqlite_uri
    cfg = _cfg(uri)
    run_id = log_campaign(cfg, make_campaign(tmp_path, cfg))
    verdicts = [{"metric": "total_tokens_per_s_per_gpu", "verdict": "regressed", "baseline": "history"},
                {"metric": "ttft_p90_s", "verdict": "unchanged", "baseline": "history"}]
    assert log_verdicts(uri, run_id, verdicts) is True
    tags = client(uri).get_run(run_id).data.tags
    assert tags["benchcamp.verdict.total_tokens_per_s_per_gpu.history"] == "regressed"
    assert tags["benchcamp.regression"] == "true"
    assert log_verdicts(uri, run_id, verdicts[1:]) is False
    assert client(uri).get_run(run_id).data.tags["benchcamp.regression"] == "false"
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "index.html").write_text("<html></html>")
    log_report(uri, run_id, rep)
    assert [a.path for a in client(uri).list_artifacts(run_id, "report")] == ["report/index.html"]


def test_historical_baselines_same_key_valid_finished_only(tmp_path, sqlite_uri):
    uri = sqlite_uri
    cfg = _cfg(uri)
    ids = {}
    for ex in ("h1", "h2", "h3"):
        camp = make_campaign(tmp_path, cfg, execution_id=ex)
        ids[ex] = log_campaign(cfg, camp)
    key = tracking_key(cfg, camp.workload_digest)
    # invalid: campaign error; other GPU: other key
    log_campaign(cfg, make_campaign(tmp_path, cfg, execution_id="bad", error="RuntimeError: engine died"))
    other = _cfg(uri, **{"hardware.gpu": "b200"})
    log_campaign(other, make_campaign(tmp_path, other, execution_id="b200"))

    hist = historical_baselines(cfg, key, 5, exclude_execution_id="h3")
    assert sorted(h.execution_id for h in hist) == ["h1", "h2"]
    assert all(h.valid and h.headline["total_tokens_per_s_per_gpu"] > 0 for h in hist)
    assert len(historical_baselines(cfg, key, 1)) == 1
    assert historical_baselines(cfg, key, 0) == []

    assert marked_baseline(cfg, key) is None
    mark_baseline(uri, ids["h1"])
    assert marked_baseline(cfg, key).execution_id == "h1"
    pinned = _cfg(uri, **{"baselines.run_id": ids["h2"]})
    assert marked_baseline(pinned, key).execution_id == "h2"


def test_a_dataset_another_tracker_inserts_between_lookup_and_insert_is_logged(tmp_path, sqlite_uri):
    """A matrix's two track tasks log one workload at once: MLflow looks the dataset row up, then
    inserts it, and the other task's insert can land in between (seen in the Celery DAG test:
    ``UNIQUE constraint failed: datasets...``, a task retry 30 s later). Here the other tracker's
    insert is committed, on its own connection to the real store, just before this one's."""
    import sqlite3

    from sqlalchemy import event

    from benchcamp.tracking.log import _log_dataset

    cfg = _cfg(sqlite_uri)
    camp = make_campaign(tmp_path, cfg)
    c = client(sqlite_uri)
    exp_id = c.create_experiment("race", artifact_location=str(tmp_path / "mlartifacts"))
    run_id = c.create_run(exp_id).info.run_id
    raced: list[str] = []

    def other_tracker_first(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO DATASETS") and not raced:
            other = sqlite3.connect(sqlite_uri.removeprefix("sqlite:///"))
            with other:
                other.execute(statement, parameters)
            other.close()
            raced.append(statement)

    engine = c._tracking_client.store.engine
    event.listen(engine, "before_cursor_execute", other_tracker_first)
    try:
        _log_dataset(c, run_id, camp, None)
    finally:
        event.remove(engine, "before_cursor_execute", other_tracker_first)
    assert raced, "the race was not staged: MLflow inserted no dataset row"
    (logged,) = c.get_run(run_id).inputs.dataset_inputs
    assert logged.dataset.digest == dataset_digest(camp.workload_digest)
    assert logged.dataset.name == cfg.workload.name


def test_mlflow_shows_what_a_user_compares(tmp_path, sqlite_uri):
    """The experiment opens on its runs (MLflow 3's experiment kind), the parent is named
    <campaign>/<model>/<gpu>/<time>, each child <point> with the tags that identify it alone, the headline
    metrics again under Headline/<rank>_ (first in MLflow's sort, in the headline's order), the experiment's shared
    view leading with them, and verdict tags under fixed keys that line up across runs."""
    from benchcamp.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
    from benchcamp.verdicts.compare import Verdict

    cfg = _cfg(sqlite_uri, **{"engine.model": "meta-llama/Llama-3.1-8B-Instruct"})
    camp = make_campaign(tmp_path, cfg)
    run_id = log_campaign(cfg, camp)
    c = client(sqlite_uri)
    exp = c.get_experiment_by_name("trk")
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    parent = c.get_run(run_id)
    assert parent.data.tags["mlflow.runName"] == f"trk/Llama-3.1-8B-Instruct/h200/{camp.started_at[:16].replace('T', ' ')}"
    headline = parent.data.metrics["Headline/1_total_tokens_per_s_per_gpu"]
    assert headline == parent.data.metrics["total_tokens_per_s_per_gpu"]
    # the compare view's plot starts on the first name in JS's code-unit sort: Python's str sort is the same here
    assert sorted(parent.data.metrics)[:5] == ["Headline/1_total_tokens_per_s_per_gpu", "Headline/2_p90_user_tokens_per_s",
                                               "Headline/3_ttft_p90_s", "Headline/4_revenue_per_gpu_hour",
                                               "Headline/5_error_rate"]
    view = json.loads(json.loads(exp.tags["mlflow.sharedViewState.benchcamp-headline"])["state"])
    assert view["selectedColumns"][:2] == ["metrics.`Headline/1_total_tokens_per_s_per_gpu`",
                                           "metrics.`Headline/2_p90_user_tokens_per_s`"]
    children = c.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    assert sorted(r.data.tags["mlflow.runName"] for r in children) == ["c32", "c8"]
    tags = children[0].data.tags
    assert {k: tags[f"benchcamp.{k}"] for k in ("gpu", "engine_kind", "engine_version", "model", "clock",
                                                 "fingerprint")} == {
        "gpu": "h200", "engine_kind": "simulated", "engine_version": cfg.engine.version,
        "model": "meta-llama/Llama-3.1-8B-Instruct", "clock": cfg.load.clock, "fingerprint": cfg.fingerprint()}
    assert tags["benchcamp.topology"] == parent.data.tags["benchcamp.topology"]
    assert "Headline/3_ttft_p90_s" in children[0].data.metrics

    def v(metric, baseline, kind, verdict):
        return Verdict(metric, baseline, 1.0, 1.0, 0.0, 0.0, 0.0, verdict, "", baseline_kind=kind)

    log_verdicts(sqlite_uri, run_id, [v("ttft_p90_s", "last 3 run(s) (latest h-2)", "historical", "unchanged"),
                                      v("ttft_p90_s", "agentx-vllm-deepseek", "published", "improved")])
    tags = c.get_run(run_id).data.tags
    assert tags["benchcamp.verdict.ttft_p90_s.history"] == "unchanged"
    assert tags["benchcamp.verdict.ttft_p90_s.published"] == "improved"
    assert tags["benchcamp.verdict.ttft_p90_s.history.baseline"] == "last 3 run(s) (latest h-2)"


def test_a_run_with_no_valid_point_is_not_shown_finished(tmp_path, sqlite_uri):
    """MLflow shows FINISHED as a green tick: a campaign with no valid point, and each invalid point, is FAILED."""
    cfg = _cfg(sqlite_uri, **{"load.levels": [8], "load.min_requests": 1000})  # too few requests: invalid
    camp = make_campaign(tmp_path, cfg, levels=(8,))
    assert not any(p.valid for p in camp.points) and not camp.headline
    c = client(sqlite_uri)
    parent = c.get_run(log_campaign(cfg, camp))
    assert parent.info.status == "FAILED" and parent.data.tags["benchcamp.valid"] == "false"
    child = c.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")[0]
    assert child.info.status == "FAILED" and child.data.tags["benchcamp.valid"] == "false"

    ok = make_campaign(tmp_path / "ok", _cfg(sqlite_uri), execution_id="exec-ok", invalid_point="c32")
    log_campaign(_cfg(sqlite_uri), ok)
    found = c.search_runs([parent.info.experiment_id], "tags.`benchcamp.execution_id` = 'exec-ok'")
    # the parent's benchcamp.point tag is its headline point (its history's key): the role tells them apart
    runs = {"parent" if r.data.tags["benchcamp.role"] == "campaign" else r.data.tags["benchcamp.point"]: r.info.status
            for r in found}
    assert runs == {"parent": "FINISHED", "c8": "FINISHED", "c32": "FAILED"}
