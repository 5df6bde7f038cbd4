"""`benchcamp bench run --endpoint` over loopback: files, summaries, verdicts, key handling."""

from __future__ import annotations

import json

from loadgen_support import MODEL, make_workload
from timed_server import TimedServer

from benchcamp.cli import main
from benchcamp.workload.model import write_workload


def test_bench_run_against_an_endpoint_writes_records_and_summaries(tmp_path, monkeypatch, capsys):
    data = tmp_path / "wl.parquet"
    write_workload(make_workload(n_sessions=4, turns=3, output_len=4), data)
    spec = tmp_path / "absent.yaml"   # no spec file: the data file is used as is
    monkeypatch.setenv("MY_KEY", "the-secret-key-42")
    out = tmp_path / "out"
    with TimedServer(ttft_s=0.01, tpot_s=0.004, model=MODEL, api_key="the-secret-key-42") as srv:
        sets = ["engine.served_model_name=" + MODEL, "engine.data_parallel_size=1", "hardware.gpu_count=1",
                f"workload.data={data}", "workload.spec=" + str(spec), "load.levels=[2, 3]",
                "load.warmup_s=0.2", "load.duration_s=1.0", "load.drain_s=2", "load.workers=1",
                "load.min_requests=5"]
        argv = ["bench", "run", "--params", "/dev/null", "--endpoint", srv.url,
                "--api-key-env", "MY_KEY", "--out", str(out), "--quiet"]
        for s in sets:
            argv += ["--set", s]
        rc = main(argv)
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    doc = json.loads((out / "summary.json").read_text())
    assert [p["point"] for p in doc["points"]] == ["c2", "c3"]
    for label in ("c2", "c3"):
        s = json.loads((out / label / "summary.json").read_text())
        assert s["requests"] >= 5 and s["error_rate"] == 0 and s["valid"] == 1
        assert s["ttft_p50_s"] > 0.009
        assert (out / label / "records.parquet").exists() and (out / label / "point.json").exists()
    everything = printed.out + printed.err + "".join(p.read_text() for p in out.rglob("*.json"))
    assert "the-secret-key-42" not in everything


def test_bench_run_with_a_wrong_key_fails_before_the_sweep(tmp_path, monkeypatch, capsys):
    data = tmp_path / "wl.parquet"
    write_workload(make_workload(), data)
    monkeypatch.setenv("MY_KEY", "wrong-key-000")
    with TimedServer(model=MODEL, api_key="right-key-111") as srv:
        rc = main(["bench", "run", "--params", "/dev/null", "--endpoint", srv.url,
                   "--api-key-env", "MY_KEY", "--out", str(tmp_path / "out"), "--quiet",
                   "--set", f"workload.data={data}", "--set", f"workload.spec={tmp_path / 'x.yaml'}"])
        posts = [e for e in srv.log if e["path"].endswith("completions")]
    assert rc == 2 and "rejected the API key" in capsys.readouterr().err  # ExitCode.BAD_INPUT: a setting to fix
    assert posts == []


def test_a_malformed_endpoint_url_is_a_message_not_a_traceback(tmp_path, capsys):
    data = tmp_path / "wl.parquet"
    write_workload(make_workload(), data)
    rc = main(["bench", "run", "--params", "/dev/null", "--endpoint", "gpu-node:8000", "--quiet",
               "--set", f"workload.data={data}", "--set", f"workload.spec={tmp_path / 'x.yaml'}",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "provider.endpoint.url='gpu-node:8000': expected http(s)://host[:port]" in err
    assert "Traceback" not in err
