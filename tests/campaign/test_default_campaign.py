"""`benchcamp run` on the repository's params.yaml, the default campaign of `make run`: DeepSeek-V4.1-Flash on a
1P2D GB300 NVL72 topology (NIXL, DSpark) in virtual time, DeepSeek's off-peak prices, the seed's published
record beside it. Kept fast: one short level and the AgentX-like spec with 4 sessions instead of 256 (same
shape); everything else is params.yaml's. Real MLflow store (the migrated template), real report."""

from __future__ import annotations

import json

import yaml
from campaign_support import ROOT

from benchcamp.cli import main


# ~2 s in the suite (imports and the session's MLflow template shared); ~9 s alone, mostly imports
def test_the_default_campaign_runs_end_to_end(tmp_path, mlflow_db, capsys):
    spec = yaml.safe_load((ROOT / "workloads" / "agentx-like.yaml").read_text())
    spec["sessions"] = 4
    (tmp_path / "agentx-like.yaml").write_text(yaml.safe_dump(spec))
    sets = {
        "workload.spec": tmp_path / "agentx-like.yaml", "workload.data": tmp_path / "agentx-like.parquet",
        "load.levels": "[4]", "load.warmup_s": 2, "load.duration_s": 15, "load.drain_s": 10, "load.min_requests": 1,
        "results.store": tmp_path / "results", "tracking.mlflow_uri": f"sqlite:///{mlflow_db}",
    }
    argv = ["run", "--params", str(ROOT / "params.yaml"), "--reports", str(tmp_path / "reports")]
    code = main([*argv, *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "deepseek-ai/DeepSeek-V4.1-Flash on 72 x gb300" in out
    assert "engine in-process (simulated, virtual clock: no server to start); sweep closed levels [4.0]" in out
    assert "(deepseek-flash-offpeak)" in out.split("headline [simulated engine]")[1].splitlines()[0]
    # the seed's record, by its own (span) throughput definition, shown and never compared with a simulation
    line = next(ln for ln in out.splitlines() if ln.startswith("total_tokens_per_s_per_gpu (span)"))
    assert "agentx-vllm-deepseek" in line and "954,000" in line and "not_comparable" in line
    assert "MLflow: run " in out and "in experiment 'agentic-smoke'" in out
    [run] = [p for p in (tmp_path / "results" / "agentic-smoke").iterdir() if p.is_dir()]
    doc = json.loads((run / "summary.json").read_text())
    assert doc["status"] == "ok" and [p["point"] for p in doc["points"]] == ["c4"]
    # the window's steadiness (load.steady) in the summary, the terminal table and the report
    point = doc["points"][0]
    assert point["steady"] in (0, 1) and point["window_start_s"] >= point["primer_barrier_s"] > 0
    assert out.split("\n\npoint ")[1].split()[:3] == ["valid", "steady", "reqs"]
    page = (tmp_path / "reports" / "agentic-smoke" / "index.html").read_text()
    assert 'aria-label="deployment topology"' in page  # the 1P2D diagram
    assert "<br>steady: " in page
    _every_simulated_headline_carries_its_expected_error(out, doc, page, mlflow_db)


def _every_simulated_headline_carries_its_expected_error(out: str, doc: dict, page: str, mlflow_db) -> None:
    """GB300 + DeepSeek-V4.1-Flash: the validation set's B300 DeepSeek values, read from the table's own rows."""
    import numpy as np
    from mlflow.tracking import MlflowClient

    from benchcamp.sim import fidelity

    rows = [r for r in fidelity.table()["rows"] if r[2] == "b300" and r[3] == "deepseek-v3"]
    want = {ph: [abs(r[5] - 1) for r in rows if fidelity.PHASE_OF_METRIC[r[4]] == ph] for ph in fidelity.PHASES}
    tput = f"validation median error {np.median(want['throughput']):.0%} on {len(want['throughput'])} comparable"
    head = out.split("headline [simulated engine]")[1].splitlines()
    value = doc["headline"]["total_tokens_per_s_per_gpu"]
    shown = fidelity.rounded(value, fidelity.expected_error("gb300", "deepseek-v4.1-flash", "throughput"))
    assert f": {shown} tokens/s/GPU (window" in head[0] and f"{value:,.0f}" not in head[0]  # to its precision
    row = out.split("\n\npoint ")[1].splitlines()[2]  # the sweep table's c4 row (after its header and rule)
    assert row.split()[0] == "c4" and f" {shown} " in row  # to the same precision
    assert head[1].strip().startswith(f"{shown} tokens/s/GPU, simulated; {tput} values (b300; deepseek-v3)")
    assert "tokens/s/user (P90), simulated; validation median error" in head[2]
    assert "Expected error" in page and f"{shown} tokens/s/GPU, simulated; {tput}" in page
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    [run] = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.`benchcamp.role` = 'campaign'"
    )
    assert run.data.tags["benchcamp.sim_error.throughput"].startswith(tput)
    assert run.data.metrics["sim_error/throughput_median"] == np.median(want["throughput"])
    assert run.data.metrics["sim_error/tpot_n"] == len(want["tpot"])
    assert "P: 1x(TP1 DP24 EP24) 24 GPU -&gt; D: 2x(TP1 DP24 EP24 dspark5 A3.5) 48 GPU [gb300]" in page
