"""`benchcamp run` as a user runs it: its own execution folder, concurrent runs, SIGTERM,
an s3:// results store, orphaned engines, exit codes. Real engine subprocesses over loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from campaign_support import HTTP_PARAMS, tiny_sets

from benchcamp.results.records import read_records

pytestmark = pytest.mark.timeout(600)


def _argv(tmp: Path, *extra: str, **sets) -> list[str]:
    argv = ["run", "--params", str(HTTP_PARAMS), "--reports", str(tmp / "reports"), *extra]
    for s in tiny_sets(tmp, **sets):
        argv += ["--set", s]
    return argv


def _spawn(tmp: Path, *extra: str, **sets) -> subprocess.Popen:
    """`benchcamp run` in a subprocess; its output goes to a file (a pipe nobody reads would fill up)."""
    log = open(tmp / f"run-{time.monotonic_ns()}.log", "w+")  # noqa: SIM115  (closed with the test's tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "benchcamp.cli", *_argv(tmp, *extra, **sets)], cwd=tmp,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.output_file = log  # type: ignore[attr-defined]
    return proc


def _output(proc: subprocess.Popen, timeout: float) -> str:
    proc.wait(timeout=timeout)
    proc.output_file.seek(0)  # type: ignore[attr-defined]
    return proc.output_file.read()  # type: ignore[attr-defined]


def _executions(tmp: Path) -> list[Path]:
    return sorted(p for p in (tmp / "results" / "tiny").iterdir() if p.is_dir())


def _engines_of(execution_id: str) -> list[int]:
    from benchcamp.deploy import execution_engines
    return [p.pid for p in execution_engines(execution_id) if p.status() != psutil.STATUS_ZOMBIE]


def test_two_runs_at_once_in_one_results_folder_both_keep_every_record(tmp_path):
    # Build the workload once, so both runs start their sweeps at the same time.
    from campaign_support import tiny_config

    from benchcamp.workload import ensure_workload
    ensure_workload(tiny_config(tmp_path).workload)

    procs = [_spawn(tmp_path, "--no-track") for _ in range(2)]
    outs = [_output(p, 400) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = _executions(tmp_path)
    assert len(runs) == 2 and runs[0].name != runs[1].name
    for run in runs:
        doc = json.loads((run / "summary.json").read_text())
        assert doc["status"] == "ok" and doc["execution_id"] == run.name
        records = read_records(run / "c2" / "records.parquet")
        assert (records["status"] == 200).sum() >= 1
        assert not list(run.glob("c2/records.*.w*"))  # merged, and nothing of the other run's deleted it
        # each execution owns its report (the shared reports/ folder shows the last one, whole)
        page = (run / "report" / "tiny" / "index.html").read_text()
        assert run.name in page and [r.name for r in runs if r != run][0] not in page
    shown = (tmp_path / "reports" / "tiny" / "index.html").read_text()
    assert sum(r.name in shown for r in runs) == 1
    assert {r.name for r in runs} == {line.split()[2].rstrip(":") for out in outs for line in out.splitlines()
                                      if line.startswith("[benchcamp] execution ")}
    assert (tmp_path / "results" / "tiny" / "latest").read_text() in {r.name for r in runs}


def test_sigterm_mid_point_keeps_records_stops_the_engine_and_marks_the_campaign_interrupted(tmp_path):
    proc = _spawn(tmp_path, "--no-track", **{"load.duration_s": 60, "load.levels": "[2, 4]"})
    execution, first_size = None, None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # until the worker has flushed a batch of completed requests
        runs = _executions(tmp_path) if (tmp_path / "results" / "tiny").exists() else []
        stream = list(runs[0].glob("c2/records.*.w*.partial.arrows")) if runs else []
        size = stream[0].stat().st_size if stream else None
        if size is not None and first_size is not None and size > first_size:
            execution = runs[0]
            break
        first_size = first_size if first_size is not None else size
        time.sleep(0.2)
    assert execution is not None, "the point never measured a request"
    engines = _engines_of(execution.name)
    assert engines, "the engine of the run is not found by its execution id"
    proc.send_signal(signal.SIGTERM)
    out = _output(proc, 120)
    assert proc.returncode == 130, out
    doc = json.loads((execution / "summary.json").read_text())
    assert doc["status"] == "interrupted" and doc["interrupted"] is True and doc["missing_points"] == ["c4"]
    assert (read_records(execution / "c2" / "records.parquet")["status"] == 200).sum() >= 1
    assert json.loads((execution / "campaign.json").read_text())["interrupted"] is True
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE for pid in engines)


def test_an_engine_started_by_run_dies_with_it_even_on_kill_9(tmp_path):
    proc = _spawn(tmp_path, "--no-track", **{"load.duration_s": 60})
    engines: list[int] = []
    deadline = time.monotonic() + 240
    while not engines and time.monotonic() < deadline:
        runs = _executions(tmp_path) if (tmp_path / "results" / "tiny").exists() else []
        engines = _engines_of(runs[0].name) if runs else []
        time.sleep(0.5)
    assert engines
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in engines) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in engines if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_orphaned_engines_of_the_results_root_are_reaped_and_no_others(tmp_path):
    from benchcamp.deploy import EXECUTION_ENV, OWNER_ENV, RESULTS_ENV, reap_orphans

    root = tmp_path / "results"
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    me = psutil.Process()

    def start(execution: str, owner: str | None, results: Path = root) -> subprocess.Popen:
        env = dict(os.environ, **{EXECUTION_ENV: execution, RESULTS_ENV: str(results.resolve())})
        if owner:
            env[OWNER_ENV] = owner
        return subprocess.Popen(sleeper, env=env, start_new_session=True)

    orphan = start("gone-owner", "999999999:1.0")            # its `benchcamp run` is gone
    owned = start("live-owner", f"{me.pid}:{me.create_time():.3f}")
    airflow = start("airflow-deployed", None)                 # outlives its task on purpose
    elsewhere = start("other-root", "999999999:1.0", tmp_path / "elsewhere")
    try:
        assert reap_orphans(root, grace_s=5) == ["gone-owner"]
        assert orphan.wait(timeout=10) is not None
        assert all(p.poll() is None for p in (owned, airflow, elsewhere))
    finally:
        for p in (orphan, owned, airflow, elsewhere):
            p.kill()
            p.wait()


def test_run_with_an_s3_results_store(tmp_path, monkeypatch):
    """moto stands in for S3 (no AWS is reachable here); everything else is real."""
    import boto3
    from moto import mock_aws

    from benchcamp.cli import main

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        rc = main(_argv(tmp_path, **{"results.store": "s3://bench/prefix"}))
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="bench")["Contents"])
    assert rc == 0
    execution = next(k.split("/")[2] for k in keys if k.endswith("/summary.json"))
    base = f"prefix/tiny/{execution}"
    for name in ("campaign.json", "summary.json", "engine.log", "c2/records.parquet", "c2/point.json",
                 "report/verdicts.json"):
        assert f"{base}/{name}" in keys, keys
    assert "prefix/tiny/latest" in keys and any(k.startswith("prefix/workloads/") for k in keys)
    assert not (tmp_path / "results").exists()


def test_an_aborted_point_fails_run_with_exit_1_and_keeps_its_records(tmp_path, capsys):
    from benchcamp.cli import main

    rc = main(_argv(tmp_path, "--no-track", **{"load.duration_s": 20,
                                               "engine.extra_args": "[--fault, crash-after-requests=4]"}))
    err = capsys.readouterr().err
    assert rc == 1, err
    run = _executions(tmp_path)[0]
    doc = json.loads((run / "summary.json").read_text())
    assert doc["status"] == "failed" and "aborted" in doc["error"] and "aborted" in err
    assert len(read_records(run / "c2" / "records.parquet")) >= 1


@pytest.mark.parametrize(("status", "error", "line"), [
    ("no valid point", "no valid point: c8: only 10 requests", "campaign no valid point: c8: only 10 requests"),
    ("failed", "sweep: sweep point c8 aborted: engine died", "campaign failed: sweep: sweep point c8 aborted: engine died"),
])
def test_the_campaign_line_says_its_status_once(capsys, status, error, line):
    from types import SimpleNamespace

    from benchcamp.commands.run import print_campaign

    result = SimpleNamespace(points=[], headline={}, status=status, error=error)
    from benchcamp.config import load_config

    print_campaign(result, load_config(None))
    assert capsys.readouterr().err.strip() == line
