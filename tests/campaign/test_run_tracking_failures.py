"""`benchcamp run` when MLflow fails: before the sweep (one line, nothing measured, no engine started)
and after it (results kept, report rendered, `benchcamp log` named, exit 1). Real engine, real SQLite."""

from __future__ import annotations

import json

import pytest
from campaign_support import HTTP_PARAMS, tiny_sets

from benchcamp.cli import main

pytestmark = pytest.mark.timeout(300)

DEAD = "http://127.0.0.1:9"   # the discard port: nothing listens, connections are refused


def _argv(tmp, **sets) -> list[str]:
    argv = ["run", "--params", str(HTTP_PARAMS), "--reports", str(tmp / "reports")]
    for s in tiny_sets(tmp, **sets):
        argv += ["--set", s]
    return argv


def test_a_dead_mlflow_server_stops_run_before_anything_is_deployed(tmp_path, capsys, monkeypatch):
    # The old code measured first and then raised MLflow's chained tracebacks; 0 retries keeps it short.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    code = main(_argv(tmp_path, **{"tracking.mlflow_uri": DEAD}))
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and "MLflow is not reachable" in err and "--no-track" in err
    assert "[benchcamp] execution" not in out and not (tmp_path / "results").exists()


def test_tracking_that_fails_after_measuring_keeps_the_results_renders_the_report_and_names_benchcamp_log(
        tmp_path, capsys):
    # The store passes the check, but its artifact folder cannot be made (a file is in its place):
    # logging fails after measuring, as a full or unwritable artifact store does.
    (tmp_path / "mlartifacts").write_text("")
    code = main(_argv(tmp_path))
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "Traceback" not in out + err
    run = next(p for p in (tmp_path / "results" / "tiny").iterdir() if p.is_dir())
    assert "note: not tracked: " in out and f"`benchcamp log {run}`" in out
    assert (tmp_path / "reports" / "tiny" / "index.html").exists()
    assert json.loads((run / "summary.json").read_text())["status"] == "ok"
