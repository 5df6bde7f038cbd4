"""`benchcamp compare / report / reproduce` end to end on a real SQLite MLflow store."""

import json

import pytest
from benchcamp_test_factory import make_campaign, make_workload

from benchcamp.cli import main
from benchcamp.config import load_config
from benchcamp.tracking import log_campaign
from benchcamp.tracking.store import client


@pytest.fixture
def store(tmp_path, sqlite_uri):
    """Three earlier runs of the same campaign, logged; returns what a test needs."""
    cfg = load_config(None, {"load.levels": [8, 32], "load.min_requests": 5, "tracking.mlflow_uri": sqlite_uri,
                             "workload.data": str(tmp_path / "workload.parquet"),
                             "workload.spec": str(tmp_path / "absent-spec.yaml")})
    for i in range(3):
        log_campaign(cfg, make_campaign(tmp_path, cfg, execution_id=f"hist-{i}", seed=10 + i))
    return {"cfg": cfg, "uri": sqlite_uri, "tmp": tmp_path,
            "args": ["--tracking-uri", sqlite_uri, "--params", "/dev/null"]}


def test_compare_flags_a_clear_regression_with_exit_3(store, capsys):
    """The nightly guard's contract: one night outside the noise band is suspected (exit 0), a second night that
    holds the new level confirms the shift (exit 3)."""
    cfg, tmp = store["cfg"], store["tmp"]
    first = log_campaign(cfg, make_campaign(tmp, cfg, execution_id="slow-1", seed=98, tpot_scale=2.0))
    assert main(["compare", first, *store["args"]]) == 0
    out = capsys.readouterr().out
    assert "suspected" in out and "REGRESSED" not in out, out
    slow = log_campaign(cfg, make_campaign(tmp, cfg, execution_id="slow", seed=99, tpot_scale=2.0))
    before = client(store["uri"]).get_run(slow).data.tags
    assert main(["compare", slow, *store["args"]]) == 3
    out = capsys.readouterr().out
    assert "REGRESSED" in out and "p90_user_tokens_per_s" in out
    assert client(store["uri"]).get_run(slow).data.tags == before  # nothing written unless asked
    assert main(["compare", slow, "--write-tags", *store["args"]]) == 3
    tags = client(store["uri"]).get_run(slow).data.tags
    assert tags["benchcamp.regression"] == "true"
    assert any(k.startswith("benchcamp.verdict.p90_user_tokens_per_s") and v == "regressed" for k, v in tags.items())


def test_compare_latest_run_within_noise_exits_0(store, capsys):
    cfg, tmp = store["cfg"], store["tmp"]
    log_campaign(cfg, make_campaign(tmp, cfg, execution_id="same", seed=42))
    assert main(["compare", *store["args"]]) == 0  # no RUN_ID: the latest run of the experiment
    out = capsys.readouterr().out
    assert "(same)" in out and "REGRESSED" not in out and "unchanged" in out


def test_compare_bad_input_exits_2(store, capsys):
    assert main(["compare", "0123456789abcdef0123456789abcdef", *store["args"]]) == 2
    assert "not found" in capsys.readouterr().err
    run = log_campaign(store["cfg"], make_campaign(store["tmp"], store["cfg"], execution_id="x"))
    assert main(["compare", run, "--baseline", "no-such-baseline", *store["args"]]) == 2
    # a published baseline on real hardware: not comparable with a simulated run, not a regression
    assert main(["compare", run, "--baseline", "agentx-vllm-deepseek", *store["args"]]) == 0
    assert "simulated vs real hardware" in capsys.readouterr().out


def test_report_re_renders_from_mlflow_and_logs_it(store, capsys):
    cfg, tmp = store["cfg"], store["tmp"]
    run = log_campaign(cfg, make_campaign(tmp, cfg, execution_id="rep", seed=7))
    out_dir = tmp / "reports"
    assert main(["report", run, "--out", str(out_dir), *store["args"]]) == 0
    page = (out_dir / "agentic-smoke" / "index.html").read_text()
    assert run in page and "nightly series (4 nights)" in page  # its run id and its history, judged by the guard
    assert json.loads((out_dir / "metrics.json").read_text())["execution_id"] == "rep"
    arts = {a.path for a in client(store["uri"]).list_artifacts(run, "report")}
    assert "report/index.html" in arts


def test_reproduce_checks_the_workload_digest(store, capsys):
    cfg, tmp = store["cfg"], store["tmp"]
    run = log_campaign(cfg, make_campaign(tmp, cfg, execution_id="orig"))
    assert main(["reproduce", run, "--dry-run", "--tracking-uri", store["uri"]]) == 0
    assert "reproducing orig" in capsys.readouterr().out
    make_workload(tmp / "workload.parquet", seed=2)  # the workload file changed since
    assert main(["reproduce", run, "--dry-run", "--tracking-uri", store["uri"]]) == 2
    err = capsys.readouterr().err
    assert "workload digest mismatch" in err and "dvc checkout" in err


def test_finish_tracks_compares_and_reports_like_benchcamp_run(store):
    from benchcamp.report.flow import finish

    cfg, tmp = store["cfg"], store["tmp"]
    outcome = finish(cfg, make_campaign(tmp, cfg, execution_id="fin", seed=3), tmp / "reports")
    assert outcome.report.exists() and not outcome.regressed
    assert {v.baseline_kind for v in outcome.verdicts} == {"published", "historical"}
    tags = client(store["uri"]).get_run(outcome.run_id).data.tags
    assert tags["benchcamp.execution_id"] == "fin" and tags["benchcamp.regression"] == "false"
    assert "report/index.html" in {a.path for a in client(store["uri"]).list_artifacts(outcome.run_id, "report")}


def test_compare_judges_a_form_triggered_run_by_its_own_config(tmp_path, sqlite_uri, capsys):
    """A run whose config is not params.yaml's (another model and GPU count, as a form may set): `compare
    --baseline history` reads its config.json and finds the history the DAG's evaluate found, not "no
    earlier valid run" (the comparability key of params.yaml's model); it writes no tag."""
    from benchcamp.campaign.result import to_campaign_result
    from benchcamp.report.flow import finish
    from benchcamp.tracking import get_run

    cfg = load_config(None, {"load.levels": [8], "load.min_requests": 5, "tracking.mlflow_uri": sqlite_uri,
                             "engine.model": "meta-llama/Llama-3.1-8B-Instruct", "hardware.gpu_count": 1,
                             "engine.data_parallel_size": 1, "engine.tensor_parallel_size": 1,
                             "workload.data": str(tmp_path / "workload.parquet")})
    assert cfg.engine.model != load_config(None).engine.model
    for i in range(2):
        log_campaign(cfg, make_campaign(tmp_path, cfg, execution_id=f"form-{i}", levels=(8,), seed=20 + i))
    run = log_campaign(cfg, make_campaign(tmp_path, cfg, execution_id="form-now", levels=(8,), seed=30))
    # what the DAG's evaluate step does: finish() with the run's own config
    campaign = to_campaign_result(get_run(sqlite_uri, run), tmp_path / "dl")
    dag = finish(campaign.config, campaign, tmp_path / "rep", run_id=run)
    found = {v.baseline for v in dag.verdicts if v.baseline_kind == "historical"}
    assert found and not any("no earlier valid run" in n for n in dag.notes)
    before = client(sqlite_uri).get_run(run).data.tags
    # params.yaml (here: the embedded defaults, another model) does not judge it
    assert main(["compare", run, "--baseline", "history", "--tracking-uri", sqlite_uri, "--params", "/dev/null"]) == 0
    out = capsys.readouterr().out
    assert "no earlier valid run" not in out
    assert all(name in out for name in found), (found, out)
    assert client(sqlite_uri).get_run(run).data.tags == before


def test_a_headline_that_moves_to_another_point_is_judged_against_that_points_history(store, capsys):
    """Tonight's headline point is invalid (a planted change): the headline moves to the other level, which
    the earlier campaigns measured too though it was not their headline; the guard judges it against those
    nights instead of calling it insufficient."""
    cfg, tmp, uri = store["cfg"], store["tmp"], store["uri"]
    from benchcamp.tracking.history import historical_baselines

    (last,) = historical_baselines(cfg, {}, n=1, uri=uri)
    moved = log_campaign(cfg, make_campaign(tmp, cfg, execution_id="moved", seed=50,
                                            invalid_point=last.headline_point))
    assert main(["compare", moved, *store["args"]]) == 0
    out = capsys.readouterr().out
    tonight = client(uri).get_run(moved).data.tags["benchcamp.headline_point"]
    assert tonight != last.headline_point
    assert f"the headline point moved: {last.headline_point}" in out, out
    rows = [line for line in out.splitlines() if line.startswith("p90_user_tokens_per_s ") and "nightly" in line]
    assert rows and "4 nights" in rows[0] and "insufficient" not in rows[0], out
