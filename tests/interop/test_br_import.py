"""`benchcamp import FILE...`: files GuideLLM, AIPerf and `vllm bench serve` really wrote (each run here against
benchcamp's simulated engine on loopback: fixtures/README.md says with which version and command) read through
``llmd-benchmark-report``'s converters, their headline checked against the summary each tool printed
(fixtures/<tool>.console.txt) within its rounding; logged to a real SQLite MLflow store as runs `benchcamp compare`
puts beside a benchcamp run; a benchcamp Benchmark Report imported back is comparable with the run it came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from interop_support import FIXTURES, run_campaign

from benchcamp.cli import main
from benchcamp.interop.br_import import read
from benchcamp.tracking.store import client


def console(tool: str) -> str:
    return (FIXTURES / f"{tool}.console.txt").read_text()


def vllm_line(text: str, title: str) -> float:
    """A figure of `vllm bench serve`'s result block, e.g. ``P90 TTFT (ms):   112.70``."""
    return float(re.search(rf"^{re.escape(title)}:\s+([\d.]+)", text, re.M)[1])


def guidellm_row(text: str, section: str) -> list[str]:
    """The cells of the concurrent@4 row of one of GuideLLM's console tables."""
    block = text[text.index(section):]
    row = next(ln for ln in block.splitlines() if ln.startswith("| concurrent@"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_vllm_bench_serve_headline_matches_its_own_summary():
    imp = read(FIXTURES / "vllm-bench-serve.json")
    text, s = console("vllm"), read(FIXTURES / "vllm-bench-serve.json").points[0].summary
    assert imp.source_format == "vllm-bench-serve" and [p.label for p in imp.points] == ["c4"]
    assert s["requests"] == vllm_line(text, "Successful requests")
    # the console rounds to 2 decimals
    assert s["ttft_p90_s"] * 1000 == pytest.approx(vllm_line(text, "P90 TTFT (ms)"), abs=0.005)
    assert s["ttft_p50_s"] * 1000 == pytest.approx(vllm_line(text, "Median TTFT (ms)"), abs=0.005)
    assert s["tpot_p90_s"] * 1000 == pytest.approx(vllm_line(text, "P90 TPOT (ms)"), abs=0.005)
    assert s["p90_user_tokens_per_s"] == pytest.approx(1000 / vllm_line(text, "P90 TPOT (ms)"), rel=2e-3)
    assert s["e2e_p90_s"] * 1000 == pytest.approx(vllm_line(text, "P90 E2EL (ms)"), abs=0.005)
    assert s["total_tokens_per_s"] == pytest.approx(vllm_line(text, "Total token throughput (tok/s)"), abs=0.005)
    assert s["requests_per_s"] == pytest.approx(vllm_line(text, "Request throughput (req/s)"), abs=0.005)
    # the file states its model but not the GPUs nor the engine: not comparable, and why
    assert imp.key["model"] == "benchcamp/tiny-llama" and imp.key["gpu"] is None
    assert not imp.comparable and "GPU type (--gpu)" in imp.reason and "GPU count (--gpus)" in imp.reason
    assert "total_tokens_per_s_per_gpu" not in s  # no GPU count: no per-GPU figure is guessed


def test_guidellm_headline_matches_its_own_summary():
    imp = read(FIXTURES / "guidellm.json", {"gpu": "h100-sxm", "gpu_count": 1, "engine_kind": "simulated"})
    s, text = imp.points[0].summary, console("guidellm")
    assert imp.source_format == "guidellm" and imp.tool_version == "0.8.1"
    assert imp.comparable and imp.stated_by == {"workload_digest": "file", "model": "file", "gpu": "user",
                                                "gpu_count": "user", "engine_kind": "user"}
    lat = guidellm_row(text, "Request Latency Statistics")
    # columns: strategy | latency mean, mdn, p95 | TTFT mean, mdn, p95 | TTFOT ... | ITL mean, mdn, p95 | TPOT ...
    assert s["ttft_p50_s"] * 1000 == pytest.approx(float(lat[5]), abs=0.05)
    thr = guidellm_row(text, "Server Throughput Statistics")
    assert s["requests_per_s"] == pytest.approx(float(thr[3]), abs=0.05)
    assert s["total_tokens_per_s"] == pytest.approx(float(thr[6]), abs=0.05)
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(float(thr[6]), abs=0.05)  # --gpus 1
    # GuideLLM's per-request ITL is benchcamp's TPOT; its TPOT (latency / out) the E2E-normalized ratio
    assert s["e2e_normalized_interactivity_p90"] < s["p90_user_tokens_per_s"]
    assert "inter_token_latency_ms" in imp.definitions["p90_user_tokens_per_s"]


@pytest.mark.skipif(not (FIXTURES / "aiperf.profile_export_aiperf.json").exists(), reason="no AIPerf fixture")
def test_aiperf_headline_matches_its_own_summary():
    imp = read(FIXTURES / "aiperf.profile_export_aiperf.json")
    s, text = imp.points[0].summary, console("aiperf")
    doc = json.loads((FIXTURES / "aiperf.profile_export_aiperf.json").read_text())
    assert imp.source_format == "aiperf" and imp.points[0].label == "c4"

    def shown(title: str, col: int) -> float:
        row = next(ln for ln in text.splitlines() if title in ln)
        cells = [c.strip() for c in re.split(r"[│┃|]", row) if c.strip()]
        return float(cells[col].replace(",", ""))

    header = next(ln for ln in text.splitlines() if "Metric" in ln and "avg" in ln)
    cols = [c.strip() for c in re.split(r"[│┃|]", header) if c.strip()]
    p90, p50 = cols.index("p90"), cols.index("p50")
    assert s["ttft_p90_s"] * 1000 == pytest.approx(shown("Time to First Token", p90), abs=0.005)
    assert s["ttft_p50_s"] * 1000 == pytest.approx(shown("Time to First Token", p50), abs=0.005)
    assert s["tpot_p90_s"] * 1000 == pytest.approx(shown("Inter Token Latency", p90), abs=0.005)
    assert s["total_tokens_per_s"] == pytest.approx(doc["total_token_throughput"]["avg"], rel=1e-9)
    avg = cols.index("avg")
    # the console shows input and output token throughput apart (2 decimals each)
    assert s["total_tokens_per_s"] == pytest.approx(
        shown("Output Token Throughput (tokens/sec)", avg) + shown("Input Token Throughput", avg), abs=0.01)
    assert s["requests_per_s"] == pytest.approx(shown("Request Throughput", avg), abs=0.005)
    assert imp.key["model"] == "benchcamp/tiny-llama" and imp.tool_version == "0.13.0"


def test_import_logs_runs_compare_puts_beside_a_benchcamp_run(tmp_path, tiny_workload, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert run_campaign(tmp_path, tiny_workload, args=("--export-br",)) == 0
    out = capsys.readouterr().out
    ours = re.search(r"MLflow: run (\w+)", out)[1]
    folder = Path(re.search(r"results: (\S+)", out)[1])
    common = ["--tracking-uri", uri, "--params", "/dev/null"]

    # a peer's file, with the GPUs and the engine stated by the user; and one stating too little
    assert main(["import", str(FIXTURES / "guidellm.json"), "--gpu", "h100-sxm", "--gpus", "1", "--engine",
                 "simulated", *common]) == 0
    peer = re.search(r"MLflow: run (\w+) .*: comparable$", capsys.readouterr().out, re.M)[1]
    assert main(["import", str(FIXTURES / "vllm-bench-serve.json"), *common]) == 0
    line = capsys.readouterr().out
    bare = re.search(r"MLflow: run (\w+)", line)[1]
    assert "not comparable: the file does not state its GPU type (--gpu)" in line
    c = client(uri)
    tags = c.get_run(bare).data.tags
    assert tags["benchcamp.comparable"] == "false" and "GPU count" in tags["benchcamp.not_comparable_reason"]
    assert "benchcamp.gpu" not in tags  # unstated: never matches another run's key
    from benchcamp.tracking.store import headline_name

    assert c.get_run(bare).data.metrics[headline_name("ttft_p90_s")] == pytest.approx(0.1127008363, rel=1e-9)
    assert c.get_run(bare).data.params["definition.total_tokens_per_s_per_gpu"].startswith("vllm bench serve")
    # AIPerf's file as a tracked run: its headline as read, under benchcamp's names
    aiperf = FIXTURES / "aiperf.profile_export_aiperf.json"
    assert main(["import", str(aiperf), "--gpu", "h100-sxm", "--gpus", "1", "--engine", "simulated", *common]) == 0
    ai = re.search(r"MLflow: run (\w+) .*: comparable$", capsys.readouterr().out, re.M)[1]
    want = read(aiperf).points[0].summary
    got = c.get_run(ai).data.metrics
    for m in ("ttft_p90_s", "p90_user_tokens_per_s", "total_tokens_per_s_per_gpu_span", "requests"):
        assert got[m] == pytest.approx(want.get(m, want["total_tokens_per_s"]), rel=1e-12), m
    # importing the same file again updates its run
    assert main(["import", str(FIXTURES / "vllm-bench-serve.json"), *common]) == 0
    assert re.search(r"MLflow: run (\w+)", capsys.readouterr().out)[1] == bare

    # benchcamp compare puts the peer's run beside benchcamp's own
    assert main(["compare", ours, peer, *common]) == 0
    text = capsys.readouterr().out
    rows = {ln.split("  ")[0].strip(): ln for ln in text.splitlines()}
    assert ours in rows["run id"] and peer in rows["run id"]
    assert "guidellm" in rows["imported from"] and rows["GPU"].split()[-1] == "same"
    peer_ttft = c.get_run(peer).data.metrics["ttft_p90_s"]
    assert f"{peer_ttft:.3f}" in rows["TTFT p90 s"]
    # a run judged against an imported one: its verdicts say why they are not comparable (another workload)
    assert main(["compare", ours, "--baseline", peer, *common]) == 0
    judged = capsys.readouterr().out
    assert "other workload (" in judged and "guidellm:" in judged and "not_comparable" in judged, judged
    # judging one imported run alone has no config: one line saying what to do
    assert main(["compare", peer, *common]) == 2
    assert "benchcamp compare RUN" in capsys.readouterr().err

    # benchcamp's own report imported back: the same key and headline as the run it came from
    assert main(["import", str(folder / "benchmark_report" / "c4.br.json"), *common]) == 0
    back = re.search(r"MLflow: run (\w+) .*: comparable$", capsys.readouterr().out, re.M)[1]
    a, b = c.get_run(ours).data, c.get_run(back).data
    for k in ("workload_digest", "model", "gpu", "gpu_count", "engine_kind"):
        assert a.tags[f"benchcamp.{k}"] == b.tags[f"benchcamp.{k}"], k
    for m in ("total_tokens_per_s_per_gpu", "p90_user_tokens_per_s", "e2e_normalized_interactivity_p90",
              "ttft_p90_s", "error_rate"):
        assert b.metrics[m] == pytest.approx(a.metrics[m], rel=1e-12), m


def test_a_file_of_no_known_format_is_one_line_and_logs_nothing(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert main(["import", str(bad), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "--params", "/dev/null"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a Benchmark Report" in err and str(bad) in err
    assert not (tmp_path / "m.db").exists()


def test_an_api_key_in_a_peers_file_never_reaches_mlflow(tmp_path, capsys):
    """AIPerf writes its whole input config, an --api-key included: the run's artifacts hold it masked."""
    doc = json.loads((FIXTURES / "aiperf.profile_export_aiperf.json").read_text())
    secret = "sk-interop-" + "7f3a9c" * 4
    doc["input_config"]["endpoint"]["api_key"] = secret
    f = tmp_path / "profile_export_aiperf.json"
    f.write_text(json.dumps(doc))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["import", str(f), "--tracking-uri", uri, "--params", "/dev/null"]) == 0
    run_id = re.search(r"MLflow: run (\w+)", capsys.readouterr().out)[1]
    dst = Path(client(uri).download_artifacts(run_id, "", str(tmp_path / "art")))
    texts = [p.read_text() for p in dst.rglob("*.json")]
    assert len(texts) == 3 and all(secret not in t for t in texts)  # the file, its report, summary.json
    run = client(uri).get_run(run_id).data
    assert secret not in json.dumps([run.tags, run.params])
