"""`benchcamp run` of a 1P1D topology with speculative decoding on the virtual clock, end to end: records, the
per-role figures in point.json, tokens/s/GPU over prefill + decode GPUs, the topology in MLflow's params."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchcamp.cli import main
from benchcamp.workload.generator import generate, load_spec
from benchcamp.workload.model import write_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~8 s: a whole campaign with MLflow and the report
def test_1p1d_campaign_with_mtp_runs_end_to_end(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wl = tmp_path / "wl.parquet"
    write_workload(generate(load_spec(ROOT / "workloads/agentic-tiny.yaml")), wl)
    spec = "{method: mtp, num_speculative_tokens: 2, acceptance: synthetic, acceptance_length: 2.2}"
    role = f"{{data_parallel_size: 4, gpus_per_node: 4, kv_connector: {{kind: NixlConnector}}, speculative: {spec}}}"
    sets = [
        "engine.model=deepseek-ai/DeepSeek-V4-Flash",
        "engine.model_profile=deepseek-v4-flash",
        "hardware.gpu_count=8",
        f"topology={{prefill: {role}, decode: {role}, router: {{policy: session_affinity, pd_disaggregation: true}}}}",
        "load.clock=virtual",
        "load.levels=[8]",
        "load.warmup_s=2",
        "load.duration_s=20",
        "load.drain_s=60",
        "load.min_requests=5",
        "baselines.published=[]",
        f"results.store={tmp_path / 'results'}",
        f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}",
        f"workload.data={wl}",
        f"workload.spec={tmp_path / 'absent.yaml'}",
    ]
    rc = main(
        [
            "run",
            "--params",
            "/dev/null",
            *(a for s in sets for a in ("--set", s)),
            "--reports",
            str(tmp_path / "reports"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    (ex,) = [p for p in (tmp_path / "results" / "agentic-smoke").iterdir() if p.is_dir()]
    point = json.loads((ex / "c8" / "point.json").read_text())
    dep = point["deployment"]
    assert dep["topology"] == "1P(DP4 TP1 EP4 mtp2, 4 GPUs) + 1D(DP4 TP1 EP4 mtp2, 4 GPUs) = 8 GPUs"
    assert dep["roles"]["prefill"]["gpus"] == dep["roles"]["decode"]["gpus"] == 4
    assert dep["kv_transfer"]["transfers"] > 0
    records = pd.read_parquet(ex / "c8" / "records.parquet")
    assert (records.status == 200).all() and len(records) > 20
    summary = json.loads((ex / "summary.json").read_text())
    (s,) = summary["points"]
    assert s["gpus"] == 8  # AgentX's accounting: prefill GPUs + decode GPUs
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'm.db'}")
    runs = mlflow.search_runs(experiment_names=["agentic-smoke"])
    assert (runs["params.topology.router.pd_disaggregation"] == "True").any()
