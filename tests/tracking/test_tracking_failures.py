"""MLflow down or unreachable: fail fast before measuring, never lose the report after
measuring, and `benchcamp log` logs a kept folder later (real SQLite MLflow store)."""

from __future__ import annotations

import os
import time

import pytest
from factory import make_campaign

from benchcamp.cli import main
from benchcamp.config import load_config
from benchcamp.tracking.store import client

DEAD = "http://127.0.0.1:9"   # the discard port: nothing listens, connections are refused


def _cfg(uri: str, **extra):
    return load_config(None, {"load.levels": [8, 32], "load.min_requests": 5, "tracking.mlflow_uri": uri,
                              "campaign.name": "trk", **extra})


def test_check_reachable_fails_fast_in_one_line():
    from benchcamp.tracking import TrackingError, check_reachable

    t = time.monotonic()
    with pytest.raises(TrackingError) as err:
        check_reachable(DEAD, timeout_s=5)
    # MLflow alone retries for ~4 minutes; a bound far below that, not a speed measurement
    assert time.monotonic() - t < 10
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"tracking.mlflow_uri={DEAD}: MLflow is not reachable")
    assert "start the MLflow server" in msg and "--no-track" in msg


def test_check_reachable_accepts_a_live_server_and_a_sqlite_store(mlflow_server, sqlite_uri, tmp_path):
    from benchcamp.tracking import TrackingError, check_reachable

    check_reachable(mlflow_server["uri"])
    check_reachable(sqlite_uri)
    with pytest.raises(TrackingError, match="does not exist"):
        check_reachable(f"sqlite:///{tmp_path}/absent/mlflow.db")


def test_a_sqlite_store_mlflow_cannot_use_is_refused_before_anything_runs(tmp_path):
    """A folder in the database's place (MLflow retried ~100 s after the sweep), another
    application's database or a file that is not SQLite: one line, at the check."""
    import sqlite3

    from benchcamp.tracking import TrackingError, check_reachable

    (tmp_path / "folder.db").mkdir()
    with sqlite3.connect(tmp_path / "other.db") as con:
        con.execute("CREATE TABLE experiments (x INTEGER)")
    (tmp_path / "text.db").write_text("not a database, but not empty either" * 100)
    for name, says in (("folder.db", "is not a file"), ("other.db", "of something other than MLflow"),
                       ("text.db", "is not a readable SQLite database")):
        with pytest.raises(TrackingError) as err:
            check_reachable(f"sqlite:///{tmp_path / name}")
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
    check_reachable(f"sqlite:///{tmp_path / 'new.db'}")  # MLflow creates it
    (tmp_path / "empty.db").touch()
    check_reachable(f"sqlite:///{tmp_path / 'empty.db'}")


def test_compare_against_a_dead_server_answers_in_one_line(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("campaign:\n  name: trk\n")
    t = time.monotonic()
    code = main(["compare", "0123456789abcdef", "--tracking-uri", DEAD, "--params", str(params)])
    elapsed = time.monotonic() - t
    err = capsys.readouterr().err
    assert code == 2 and elapsed < 60          # before: "run not found" after ~4 minutes
    assert err.count("\n") == 1 and "MLflow is not reachable (Connection refused)" in err
    assert "run not found" not in err
    # names the option the user gave, and no --no-track: compare has none, it needs MLflow
    assert err.startswith(f"benchcamp: --tracking-uri={DEAD}: ") and "--no-track" not in err


def test_reproduce_against_a_dead_server_says_so_in_one_line(capsys):
    assert main(["reproduce", "0123456789abcdef", "--tracking-uri", DEAD, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"benchcamp: --tracking-uri={DEAD}: MLflow is not reachable")
    assert "not found" not in err and "--no-track" not in err


def test_report_is_rendered_when_tracking_fails_after_measuring(tmp_path, monkeypatch):
    from benchcamp.report.flow import finish

    # A finish that waited on MLflow's retries (~4 minutes by default) before rendering would hang here;
    # 0 retries makes the tracking failure immediate, so the test fails fast on such a finish.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = _cfg(DEAD)
    camp = make_campaign(tmp_path, cfg, execution_id="dead-mlflow")
    outcome = finish(cfg, camp, tmp_path / "reports")
    assert outcome.report is not None and outcome.report.exists()
    assert not outcome.tracked and outcome.run_id is None
    assert "MLflow is not reachable" in outcome.tracking_error
    note = next(n for n in outcome.notes if n.startswith("not tracked: "))
    assert f"benchcamp log {camp.results_dir}" in note
    assert {v.baseline_kind for v in outcome.verdicts} == {"published"}   # judged all the same
    # the results are where they were
    assert (camp.results_dir / "campaign.json").exists()
    assert all(p.records_path.exists() for p in camp.points)


def test_log_command_logs_a_kept_folder_and_a_second_call_updates(tmp_path, sqlite_uri, capsys):
    # A campaign measured while MLflow was down: only its folder exists.
    camp = make_campaign(tmp_path, _cfg(DEAD), execution_id="kept-1")
    assert main(["log", str(camp.results_dir), "--tracking-uri", sqlite_uri]) == 0
    out = capsys.readouterr().out
    c = client(sqlite_uri)
    exp = c.get_experiment_by_name("trk")

    def runs():
        return sorted((r.info.run_id, r.data.tags.get("benchcamp.role"), r.data.tags.get("benchcamp.point", ""))
                      for r in c.search_runs([exp.experiment_id], max_results=100))
    first = runs()
    # the campaign run (its point tag names its headline point), a run per point, the lineage's trend run
    head = camp.headline["point"]
    assert sorted((role, point) for _, role, point in first) == sorted(
        [("campaign", head), ("point", "c32"), ("point", "c8"), ("trend", head)])
    parent = next(rid for rid, role, _ in first if role == "campaign")
    assert f"MLflow: run {parent} (kept-1)" in out
    run = c.get_run(parent)
    assert run.data.tags["benchcamp.execution_id"] == "kept-1" and run.info.status == "FINISHED"
    assert "report/index.html" in {a.path for a in c.list_artifacts(parent, "report")}
    child = next(rid for rid, role, point in first if role == "point" and point == "c8")
    assert "records.parquet" in {a.path for a in c.list_artifacts(child)}

    assert main(["log", str(camp.results_dir), "--tracking-uri", sqlite_uri]) == 0
    # the same campaign and point runs updated, none added; the trend run, derived from them, is rewritten whole
    # (benchcamp.tracking.trend.log_series): still one
    again = runs()
    assert [r for r in again if r[1] != "trend"] == [r for r in first if r[1] != "trend"]
    assert [r[1:] for r in again if r[1] == "trend"] == [("trend", head)]


def test_log_command_against_a_dead_server_is_one_line(tmp_path, capsys):
    camp = make_campaign(tmp_path, _cfg(DEAD), execution_id="kept-2")
    assert main(["log", str(camp.results_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tracking.mlflow_uri=http://127.0.0.1:9: MLflow is not reachable" in err


def test_mlflow_client_retries_are_cut_unless_set(tmp_path, monkeypatch):
    from benchcamp.tracking import log_campaign

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    cfg = _cfg(DEAD)
    camp = make_campaign(tmp_path, cfg, execution_id="retries")
    t = time.monotonic()
    with pytest.raises(Exception, match="Connection refused"):
        log_campaign(cfg, camp)
    assert time.monotonic() - t < 60     # MLflow's default 7 retries back off for ~4 minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")
    client(DEAD)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"   # an explicit setting wins
