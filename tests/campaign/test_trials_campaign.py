"""load.trials=3 through `benchcamp run`, as a user runs it: on the virtual clock (the simulator in-process) and
on the wall clock (the simulated engine as a real subprocess over loopback HTTP, a real SQLite MLflow store).
Each trial has its own records, the trials run interleaved across points, and the point's figure and interval
are those of the trials' own values."""

from __future__ import annotations

import json
import logging
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from campaign_support import HTTP_PARAMS, tiny_sets

from benchcamp.campaign.result import CampaignResult
from benchcamp.metrics import Metric
from benchcamp.results.records import read_records

pytestmark = pytest.mark.timeout(600)

T975_DF2 = 4.303  # t(0.975, 2) from a printed t table (see tests/test_trials.py)
HEADLINES = (Metric.THROUGHPUT_PER_GPU, Metric.P90_USER_RATE, Metric.TTFT_P90, Metric.REVENUE_PER_GPU_HOUR)


def _argv(tmp: Path, *extra: str, **sets) -> list[str]:
    argv = ["run", "--params", str(HTTP_PARAMS), "--reports", str(tmp / "reports"), *extra]
    for s in tiny_sets(tmp, **sets):
        argv += ["--set", s]
    return argv


def _execution(tmp: Path) -> Path:
    (run,) = [p for p in (tmp / "results" / "tiny").iterdir() if p.is_dir()]
    return run


def _check_points(run: Path, labels: list[str]) -> dict[str, dict]:
    """Every point has 3 trial folders with records and a summary, and its summary's trials block holds the
    trials' own figures, their mean and the t-interval computed here from them."""
    points = {}
    for label in labels:
        doc = json.loads((run / label / "summary.json").read_text())
        block = doc["trials"]
        assert block["asked"] == 3 and [t["trial"] for t in block["trials"]] == [1, 2, 3]
        for k in (1, 2, 3):
            folder = run / label / f"trial-{k}"
            assert len(read_records(folder / "records.parquet")) >= 1
            trial = json.loads((folder / "summary.json").read_text())
            for m in HEADLINES:
                assert block["trials"][k - 1]["figures"][m] == trial[m], (label, k, m)
        for m in HEADLINES:
            values = [t["figures"][m] for t in block["trials"]]
            f = block["figures"][m]
            assert f["values"] == values and doc[m] == pytest.approx(statistics.fmean(values))
            half = T975_DF2 * statistics.stdev(values) / math.sqrt(3)
            assert f["ci_low"] == pytest.approx(statistics.fmean(values) - half, rel=1e-3, abs=1e-12)
            assert f["ci_high"] == pytest.approx(statistics.fmean(values) + half, rel=1e-3, abs=1e-12)
            assert f["median"] == pytest.approx(statistics.median(values))
        assert doc["valid"] == all(t["valid"] for t in block["trials"])
        points[label] = doc
    return points


def test_three_trials_on_the_virtual_clock_interleave_and_agree_exactly(tmp_path, monkeypatch, caplog):
    from benchcamp.cli import main

    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="benchcamp.campaign.measure")
    code = main(_argv(tmp_path, "--no-track", **{"load.clock": "virtual", "load.levels": "[2,3]", "load.trials": 3}))
    assert code == 0
    run = _execution(tmp_path)
    order = [r.getMessage().split()[0] for r in caplog.records if "/trial-" in r.getMessage().split()[0]]
    assert order == ["c2/trial-1", "c3/trial-1", "c2/trial-2", "c3/trial-2", "c2/trial-3", "c3/trial-3"]
    points = _check_points(run, ["c2", "c3"])
    # a fresh engine core per trial and the same requests: the simulator is deterministic, the trials agree
    for doc in points.values():
        f = doc["trials"]["figures"][Metric.THROUGHPUT_PER_GPU]
        assert len(set(f["values"])) == 1 and f["ci_low"] == f["ci_high"] == f["mean"]
    back = CampaignResult.load(run)
    assert [p.trials.measured for p in back.points] == [3, 3]


def test_three_trials_over_loopback_http_each_keep_their_records_and_reach_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    proc = subprocess.run(
        [sys.executable, "-m", "benchcamp.cli", *_argv(tmp_path, **{"load.levels": "[2,3]", "load.trials": 3})],
        cwd=tmp_path, capture_output=True, text=True, timeout=560,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = _execution(tmp_path)
    metas = {
        f"{lb}/trial-{k}": json.loads((run / lb / f"trial-{k}" / "point.json").read_text())
        for lb in ("c2", "c3") for k in (1, 2, 3)
    }
    # interleaved: each trial of every point before the next trial of any (the points' start times)
    assert sorted(metas, key=lambda n: metas[n]["epoch_monotonic"]) == [
        "c2/trial-1", "c3/trial-1", "c2/trial-2", "c3/trial-2", "c2/trial-3", "c3/trial-3"]
    # on the one engine the trials share, each trial sends its own prompts: no prefix cache hit across trials
    assert len({m["spec"]["salt"] for m in metas.values()}) == 6
    points = _check_points(run, ["c2", "c3"])
    assert "trials: mean [95% interval" in proc.stdout and " 3/3 " in proc.stdout

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    children = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
                if "mlflow.parentRunId" in r.data.tags]
    c2 = next(r for r in children if r.data.tags["benchcamp.point"] == "c2")
    history = client.get_metric_history(c2.info.run_id, f"trial/{Metric.THROUGHPUT_PER_GPU}")
    block = points["c2"]["trials"]
    assert sorted((m.step, m.value) for m in history) == [
        (t["trial"], t["figures"][Metric.THROUGHPUT_PER_GPU]) for t in block["trials"]]
    assert c2.data.metrics[f"ci_low/{Metric.THROUGHPUT_PER_GPU}"] == pytest.approx(
        block["figures"][Metric.THROUGHPUT_PER_GPU]["ci_low"])
    assert c2.data.metrics[Metric.THROUGHPUT_PER_GPU] == pytest.approx(points["c2"][Metric.THROUGHPUT_PER_GPU])
    assert c2.data.tags["benchcamp.trials"] == "3"
    artifacts = {f.path for f in client.list_artifacts(c2.info.run_id, "trial-2")}
    assert {"trial-2/records.parquet", "trial-2/point.json", "trial-2/summary.json"} <= artifacts
    page = (run / "report" / "tiny" / "index.html").read_text()
    assert "<h3>Trials</h3>" in page and "c2 (3/3)" in page


def test_a_missing_trial_is_named_and_a_resumed_sweep_measures_only_it(tmp_path, caplog):
    """The steps as the DAG's tasks run them (virtual clock): a trial lost from the store fails the summary,
    naming it; the retried sweep measures that trial alone and keeps the others' records as they were."""
    import shutil

    from campaign_support import tiny_config

    from benchcamp.campaign import StoreLayout, steps
    from benchcamp.results.store import LocalStore

    cfg = tiny_config(tmp_path, **{"load.clock": "virtual", "load.levels": "[2,3]", "load.trials": 2})
    store, layout = LocalStore(tmp_path / "results"), StoreLayout.for_execution("tiny", "tiny-trials-resume")
    workload = steps.prepare_workload(cfg, store, layout)
    deployment = steps.deploy_engine(cfg, store, layout, steps.provision(cfg, layout.execution_id))
    assert steps.sweep(cfg, store, layout, deployment, workload) == [
        "c2/trial-1", "c3/trial-1", "c2/trial-2", "c3/trial-2"]
    run = tmp_path / "results" / layout.execution
    kept = (run / "c3" / "trial-1" / "records.parquet").stat().st_mtime_ns
    shutil.rmtree(run / "c2" / "trial-2")
    summary = steps.summarize(cfg, store, layout, workload, "2026-12-05T00:00:00+00:00")
    assert summary.status == "failed" and "not measured: c2/trial-2" in (summary.error or "")

    caplog.set_level(logging.INFO, logger="benchcamp.campaign.measure")
    caplog.clear()  # only the retried sweep's lines (an earlier test may have left the logger at INFO)
    steps.sweep(cfg, store, layout, deployment, workload)
    measured = [r.getMessage().split()[0] for r in caplog.records if "already measured" not in r.getMessage()
                and "/trial-" in r.getMessage().split()[0]]
    assert measured == ["c2/trial-2"]
    assert (run / "c3" / "trial-1" / "records.parquet").stat().st_mtime_ns == kept
    assert steps.summarize(cfg, store, layout, workload, "2026-12-05T00:00:00+00:00").status == "ok"
