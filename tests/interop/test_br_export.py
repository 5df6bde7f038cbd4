"""`benchcamp export RUN --format llmd-br` and `benchcamp run --export-br`: a real campaign (the simulated engine
on the virtual clock, tracked in a SQLite MLflow store) written as llm-d's Benchmark Report v0.2.1 and read back
by the library's own loader: what it reads equals what benchcamp measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from interop_support import run_campaign
from llmd_benchmark_report import BenchmarkReportV02, import_benchmark_report

from benchcamp.cli import main
from benchcamp.tracking.store import client


def _stat(br, *path):
    node = br.results.request_performance.aggregate
    for p in path:
        node = getattr(node, p)
    return node


def test_a_run_exports_as_a_valid_report_that_reads_back_equal(tmp_path, tiny_workload, capsys):
    assert run_campaign(tmp_path, tiny_workload) == 0
    out = capsys.readouterr().out
    run_id = re.search(r"MLflow: run (\w+)", out)[1]
    folder = Path(re.search(r"results: (\S+)", out)[1])
    summary = json.loads((folder / "c4" / "summary.json").read_text())
    uri = f"sqlite:///{tmp_path / 'm.db'}"

    # from the execution folder, as `benchcamp log` takes it
    assert main(["export", str(folder), "--format", "llmd-br"]) == 0
    path = folder / "benchmark_report" / "c4.br.json"
    assert str(path) in capsys.readouterr().out
    doc = json.loads(path.read_text())  # strict JSON (json.loads would accept NaN: check the text too)
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    br = import_benchmark_report(str(path))  # the library's own loader and validator
    assert isinstance(br, BenchmarkReportV02) and br.version == "0.2.1"

    # what benchcamp measured, read back through the library's models
    assert _stat(br, "requests", "total") == summary["requests"]
    assert _stat(br, "requests", "failures") == summary["requests_failed"] - summary["requests_incomplete"]
    assert _stat(br, "latency", "time_to_first_token").units == "s"
    assert _stat(br, "latency", "time_to_first_token").p90 == pytest.approx(summary["ttft_p90_s"], rel=1e-12)
    assert _stat(br, "latency", "time_to_first_token").p50 == pytest.approx(summary["ttft_p50_s"], rel=1e-12)
    assert _stat(br, "latency", "time_per_output_token").p90 == pytest.approx(summary["tpot_p90_s"], rel=1e-12)
    assert _stat(br, "latency", "request_latency").p90 == pytest.approx(summary["e2e_p90_s"], rel=1e-12)
    assert _stat(br, "latency", "inter_token_latency").p99 == pytest.approx(summary["itl_p99_s"], rel=1e-12)
    engines = [c.standardized for c in br.scenario.stack]
    gpus = sum(e.accelerator.count for e in engines)
    assert gpus == summary["gpus"] == 1 and engines[0].model.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert engines[0].accelerator.model == "h100-sxm" and engines[0].tool == "benchcamp-simulated-vllm"
    total = _stat(br, "throughput", "total_token_rate").mean
    assert total / gpus == pytest.approx(summary["total_tokens_per_s_per_gpu"], rel=1e-12)
    bench = br.scenario.load.native.config["benchcamp"]
    assert bench["workload_digest"] == json.loads((folder / "campaign.json").read_text())["workload_digest"]
    assert bench["headline"]["p90_user_tokens_per_s"] == pytest.approx(summary["p90_user_tokens_per_s"])
    assert bench["headline"]["e2e_normalized_interactivity_p90"] == pytest.approx(
        summary["e2e_normalized_interactivity_p90"])
    assert bench["throughput_definition"] == "window" and "window" in bench["throughput_definitions"]
    assert br.scenario.load.standardized.concurrency == 4
    assert doc["run"]["uid"].endswith("/c4")

    # from the MLflow run id, as `benchcamp compare` takes it: the same figures and a pointer back to the run
    dst = tmp_path / "from-mlflow"
    assert main(["export", run_id, "--format", "llmd-br", "--out", str(dst), "--tracking-uri", uri]) == 0
    again = import_benchmark_report(str(dst / "c4.br.json"))
    assert again.scenario.load.native.config["benchcamp"]["mlflow"]["run_id"] == run_id
    a = br.results.request_performance.aggregate.model_dump()
    b = again.results.request_performance.aggregate.model_dump()
    assert a == b


def test_run_with_export_br_writes_reports_and_logs_them(tmp_path, tiny_workload, capsys):
    assert run_campaign(tmp_path, tiny_workload, args=("--export-br",)) == 0
    out = capsys.readouterr().out
    run_id = re.search(r"MLflow: run (\w+)", out)[1]
    folder = Path(re.search(r"results: (\S+)", out)[1])
    br = import_benchmark_report(str(folder / "benchmark_report" / "c4.br.json"))
    assert br.scenario.load.native.config["benchcamp"]["mlflow"]["run_id"] == run_id
    logged = [f.path for f in client(f"sqlite:///{tmp_path / 'm.db'}").list_artifacts(run_id, "benchmark_report")]
    assert logged == ["benchmark_report/c4.br.json"]


def test_export_bad_format_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", str(tmp_path), "--format", "csv"])
    assert e.value.code == 2
    assert "invalid choice: 'csv'" in capsys.readouterr().err
