"""`benchcamp plan` over topologies: unified vs 1P1D (with speculative decoding) on a tiny workload in virtual
time -> every candidate's diagram, the tokens/s/GPU Pareto front, and the --target verdict with what binds."""

from __future__ import annotations

import json

from capacity_support import SMALL

from benchcamp.cli import main
from benchcamp.workload.model import write_workload


def test_plan_over_topologies_with_a_target(tmp_path, tiny_workload, capsys):
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    sets = [a for s in SMALL + ["load.capacity.resolution_rel=0.2", "load.capacity.max=128",
                                "load.tiers=[{name: fast, p90_user_tok_s: 100, p90_ttft_s: 2}]"] for a in ("--set", s)]
    rc = main(["plan", "--params", "/dev/null", *sets, "--workload", str(wl), "--gpus", "2",
               "--split", "unified,1p1d", "--spec", "ngram:2:1.8", "--target", "1e9@100",
               "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads((tmp_path / "out/plan.json").read_text())
    by = {c["id"]: c for c in doc["configs"]}
    assert set(by) == {"h100-sxmx2-unified-tp1-dp2-epoff-seqs64-mbt2048-ngram2a1.8",
                       "h100-sxmx2-1p1d-tp1-dp1-epoff-seqs64-mbt2048-ngram2a1.8"}
    pd = by["h100-sxmx2-1p1d-tp1-dp1-epoff-seqs64-mbt2048-ngram2a1.8"]
    assert pd["status"] == "searched" and pd["capacity"]["gpus"] == 2  # prefill + decode GPUs
    assert pd["topology"] == "P: 1x(TP1 DP1) 1 GPU -> D: 1x(TP1 DP1 ngram2 A1.8) 1 GPU [h100-sxm]"
    assert pd["binds"]["fast"]["binds"] in (
        "compute", "HBM bandwidth", "all-to-all/TP comm", "step+launch overhead", "KV capacity",
        "prefill compute", "KV transfer")
    # the throughput front: rising tokens/s/GPU, falling per-user rate, drawn from both candidates' probes
    tf = doc["throughput_front"]
    assert tf and all(a["tokens_per_s_per_gpu"] < b["tokens_per_s_per_gpu"] and a["rate"] > b["rate"]
                      for a, b in zip(tf, tf[1:]))
    assert {p["config"] for p in tf} <= set(by)
    # a target no simulated deployment reaches: how far short, on which topology, and what binds
    tgt = doc["target"]
    assert tgt["reached"] is False and tgt["config"] in by and tgt["best_rate"] >= 100
    assert tgt["shortfall"] == 1e9 / tgt["best_tokens_per_s_per_gpu"]
    assert tgt["binds"] is not None and tgt["binds"]["summary"]
    best = doc["best"]["fast"]
    assert best["topology"] == by[best["config"]]["topology"]
    assert "Pareto front (tokens/s/GPU" in text and "x short" in text and best["topology"] in text


def test_plan_with_per_role_sizes(tmp_path, tiny_workload, capsys):
    """Unequal GPU shares (--split 1p1d:1/2,1p1d:2/1) x decode TP (--tp-decode 1,2) on 3 GPUs: the 2-GPU decode
    engine at TP2 does not fit the 1-GPU decode share, so three candidates; the best carries its per-role sizes
    in its id, diagram and overrides, and the plan's table prints them."""
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    sets = [a for s in SMALL + ["load.duration_s=10", "load.capacity.resolution_rel=0.2", "load.capacity.max=128",
                                "load.tiers=[{name: fast, p90_user_tok_s: 100, p90_ttft_s: 2}]"] for a in ("--set", s)]
    rc = main(["plan", "--params", "/dev/null", *sets, "--workload", str(wl), "--gpus", "3",
               "--split", "1p1d:1/2,1p1d:2/1", "--tp-decode", "1,2", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads((tmp_path / "out/plan.json").read_text())
    by = {c["id"]: c for c in doc["configs"]}
    diagrams = {
        "h100-sxmx3-1p1d-ptp1-pdp1-dtp1-ddp2-epoff-seqs64-mbt2048": "P: 1x(TP1 DP1) 1 GPU -> D: 1x(TP1 DP2) 2 GPU",
        "h100-sxmx3-1p1d-ptp1-pdp2-dtp1-ddp1-epoff-seqs64-mbt2048": "P: 1x(TP1 DP2) 2 GPU -> D: 1x(TP1 DP1) 1 GPU",
        "h100-sxmx3-1p1d-ptp1-pdp1-dtp2-ddp1-epoff-seqs64-mbt2048": "P: 1x(TP1 DP1) 1 GPU -> D: 1x(TP2 DP1) 2 GPU",
    }
    assert {k: c["topology"] for k, c in by.items()} == {k: d + " [h100-sxm]" for k, d in diagrams.items()}
    assert all(c["status"] == "searched" and c["capacity"]["gpus"] == 3 for c in by.values())
    best = doc["best"]["fast"]
    # this workload's short prompts keep the one prefill GPU under half busy: the 2-GPU decode shares serve more
    assert best["config"] in {"h100-sxmx3-1p1d-ptp1-pdp1-dtp1-ddp2-epoff-seqs64-mbt2048",
                              "h100-sxmx3-1p1d-ptp1-pdp1-dtp2-ddp1-epoff-seqs64-mbt2048"}
    topo = by[best["config"]]["overrides"]["topology"]
    gpus = {k: r["instances"] * r["tensor_parallel_size"] * r["data_parallel_size"] for k, r in topo.items()
            if k != "router"}
    assert gpus == {"prefill": 1, "decode": 2}
    table = text.split("best configuration per tier", 1)[1]
    assert f"{best['config']}: {best['max_agents']} agents" in table and best["topology"] in table
