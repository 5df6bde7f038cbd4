"""`benchcamp run` against the real vLLM (CPU build, tiny model): deployed from params.real-cpu.yaml by
the local provider, measured, tracked, reported, and torn down with its whole process tree.

One short sweep (2 points) and one small capacity search: each starts its own engine (~35-80 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from realengine_support import PRESET, ROOT, real_sets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(tmp: Path, *sets: str, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "benchcamp.cli", "run", "--params", str(PRESET)]
    for s in sets:
        argv += ["--set", s]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _execution(tmp: Path) -> Path:
    runs = [p for p in (tmp / "results" / "real-cpu-smoke").iterdir() if p.is_dir() and p.name != "latest"]
    assert len(runs) == 1, runs
    return runs[0]


def test_a_sweep_on_the_real_engine_measures_tracks_reports_and_tears_down(
    vllm_install, tmp_path, no_engine_leftovers
):
    done = _run(tmp_path, *real_sets(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "engine vllm benchcamp/tiny-llama on 1 x cpu" in out and "(vllm)" in out
    headline = next(line for line in out.splitlines() if line.startswith("headline"))
    assert "tokens/s/GPU" in headline and "[simulated" not in headline, headline

    run = _execution(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    campaign = json.loads((run / "campaign.json").read_text())
    assert campaign["config"]["engine"]["kind"] == "vllm" and campaign["config"]["hardware"]["gpu"] == "cpu"
    assert summary["status"] == "ok", summary.get("error")
    # The engine really was vLLM 0.32.0 (CPU build): its own log says so, and no key is in it.
    log = (run / "engine.log").read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in log and "device_config=cpu" in log
    # Per point: records from the server's usage, and the real /metrics scrape agreeing with them exactly
    # (every request of the point was sent, answered and counted between the two scrapes).
    valid = 0
    for label in ("c2", "c4"):
        point = json.loads((run / label / "point.json").read_text())
        records = pd.read_parquet(run / label / "records.parquet")
        ok = records[records.status == 200]
        assert len(ok) == len(records) > 10
        assert (ok.prompt_tokens == ok.expected_prompt_tokens).all()
        assert (ok.completion_tokens == ok.expected_output_tokens).all()   # min_tokens = max_tokens, ignore_eos
        delta = point["server_metrics_delta"]
        assert point["server_metrics_available"] is True
        assert delta["vllm:prompt_tokens"] == ok.prompt_tokens.sum()
        assert delta["vllm:generation_tokens"] == ok.completion_tokens.sum()
        assert delta["vllm:prompt_tokens_cached"] == ok.cached_tokens.sum() == delta["vllm:prefix_cache_hits"]
        assert delta["vllm:request_success"] == len(ok)
        assert 0.5 < ok.cached_tokens.sum() / ok.prompt_tokens.sum() < 0.95   # agentic prefixes hit the cache
        valid += bool(json.loads((run / label / "summary.json").read_text())["valid"])
    assert valid >= 1

    # MLflow: the parent run and a child per point, tagged with what really ran.
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("real-cpu-smoke")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"]
    roles = sorted(r.data.tags.get("benchcamp.role", "") for r in runs)
    assert len(parent) == 1 and roles == ["campaign", "point", "point", "trend"], roles  # trend: the history's
    tags = parent[0].data.tags
    assert tags["benchcamp.engine_kind"] == "vllm" and tags["benchcamp.gpu"] == "cpu"
    # Verdicts: no GPU baseline is comparable with a CPU run.
    verdicts = json.loads((run / "report" / "verdicts.json").read_text())
    assert all(v.get("status") != "regression" for v in verdicts.get("verdicts", [])), verdicts
