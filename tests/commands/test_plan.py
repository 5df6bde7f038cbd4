"""`benchcamp plan`: a small matrix in virtual time -> best configuration per tier, Pareto front, JSON + PNG."""

from __future__ import annotations

import json

from capacity_support import SMALL

from benchcamp.cli import main
from benchcamp.workload.model import write_workload


def test_plan_small_matrix(tmp_path, tiny_workload, capsys):
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    sets = [a for s in SMALL + ["engine.gpu_memory_utilization=0.2", "load.capacity.resolution_rel=0.05",
                                "load.capacity.max=1024",
                                "load.tiers=[{name: fast, p90_user_tok_s: 150, p90_ttft_s: 1}]"] for a in ("--set", s)]
    rc = main(["plan", "--params", "/dev/null", *sets, "--workload", str(wl),
               "--gpu", "h100-sxm,b200", "--max-num-seqs", "4,16", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0
    doc = json.loads((tmp_path / "out/plan.json").read_text())
    by = {c["id"]: c for c in doc["configs"]}
    assert len(by) == 4
    # 8B weights + headroom exceed 0.2 x 80 GiB of an H100: skipped with the reason, not a crash
    assert all(c["status"] == "skipped" and "does not fit" in c["error"] for k, c in by.items() if "h100" in k)
    assert all(c["status"] == "searched" for k, c in by.items() if "b200" in k)
    best = doc["best"]["fast"]
    assert best["config"] == "b200x1-tp1-dp1-epoff-seqs16-mbt2048"   # more sequences per step serve more agents
    seqs4 = by["b200x1-tp1-dp1-epoff-seqs4-mbt2048"]["capacity"]["tiers"][0]
    assert best["max_agents"] > seqs4["max_agents"] > 0
    front = doc["pareto_front"]
    assert front and all(a["agents"] < b["agents"] and a["rate"] > b["rate"] for a, b in zip(front, front[1:]))
    assert (tmp_path / "out/plan.png").read_bytes()[:4] == b"\x89PNG"
    assert "best configuration per tier" in text and "Pareto front" in text
    # the expected error of each GPU's simulated figures: no dense model was validated on a B200, one was on an H100
    err = doc["expected_error"]
    assert {p: e["match"] for p, e in err["b200"].items()} == dict.fromkeys(("throughput", "tpot", "ttft"),
                                                                            "unvalidated")
    assert err["h100-sxm"]["throughput"]["match"] == "same silicon and architecture"
    assert best["gpu"] == "b200" and best["expected_error"] == err["b200"]
    line = text.split("best configuration per tier")[1]
    assert "simulated; expected error: tokens/s/GPU unvalidated" in line
    assert f"{best['total_tokens_per_s_per_gpu']:,.0f} tok/s/GPU" not in line  # two digits when unvalidated


def test_plan_refuses_a_real_engine(tmp_path, capsys):
    rc = main(["plan", "--params", "/dev/null", "--set", "engine.kind=vllm"])
    assert rc == 2 and "simulated" in capsys.readouterr().err


def test_plan_refuses_engine_sizes_that_miss_the_gpu_count(tmp_path, capsys):
    # one line, before any workload is read or built
    rc = main(["plan", "--params", "/dev/null", "--gpus", "16,24", "--split", "3p1d:8/48",
               "--workload", str(tmp_path / "absent.parquet")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--split 3p1d:8/48" in err and "add 72 to --gpus" in err


def test_plan_over_topologies(tmp_path, tiny_workload, capsys):
    """--split unified,1p1d x --spec off,ngram:2:1.8: four deployments of 2 GPUs, each searched in virtual time."""
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    sets = [a for s in SMALL + ["load.capacity.resolution_rel=0.1", "load.capacity.max=256",
                                "load.tiers=[{name: fast, p90_user_tok_s: 100, p90_ttft_s: 2}]"] for a in ("--set", s)]
    rc = main(["plan", "--params", "/dev/null", *sets, "--workload", str(wl), "--gpus", "2",
               "--split", "unified,1p1d", "--spec", "off,ngram:2:1.8", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads((tmp_path / "out/plan.json").read_text())
    by = {c["id"]: c for c in doc["configs"]}
    assert set(by) == {
        "h100-sxmx2-tp1-dp2-epoff-seqs64-mbt2048",
        "h100-sxmx2-unified-tp1-dp2-epoff-seqs64-mbt2048-ngram2a1.8",
        "h100-sxmx2-1p1d-tp1-dp1-epoff-seqs64-mbt2048",
        "h100-sxmx2-1p1d-tp1-dp1-epoff-seqs64-mbt2048-ngram2a1.8",
    }
    assert all(c["status"] == "searched" for c in by.values()), [c.get("error") for c in by.values()]
    pd_cap = by["h100-sxmx2-1p1d-tp1-dp1-epoff-seqs64-mbt2048"]["capacity"]
    assert pd_cap["gpus"] == 2  # prefill + decode GPUs
    spec = by["h100-sxmx2-unified-tp1-dp2-epoff-seqs64-mbt2048-ngram2a1.8"]["capacity"]["probes"]
    plain = by["h100-sxmx2-tp1-dp2-epoff-seqs64-mbt2048"]["capacity"]["probes"]
    first = {p["level"]: p for p in plain}
    same = [p for p in spec if p["level"] in first and p["valid"] and first[p["level"]]["valid"]]
    assert same and all(p["p90_user_tokens_per_s"] > first[p["level"]]["p90_user_tokens_per_s"] for p in same)
    assert "best configuration per tier" in text


def test_a_one_engine_candidate_drops_the_params_own_topology():
    """The default params.yaml has a 1P2D topology: a flat (one-engine) candidate of `plan` must unset it, or the
    search would simulate the params' deployment under the candidate's name."""
    import argparse
    from pathlib import Path

    from benchcamp.commands.plan import matrix
    from benchcamp.config import load_config
    from benchcamp.planning.planner import config_id

    params = Path(__file__).resolve().parents[2] / "params.yaml"
    base = load_config(params)
    assert base.topology is not None
    axes = ("gpu", "gpus", "tp", "ep", "max_num_seqs", "max_num_batched_tokens", "kv_tier")
    args = argparse.Namespace(**dict.fromkeys(axes), split="unified,1p2d", spec=None)
    flat, pd = matrix(base, args)
    assert flat["topology"] is None and config_id(flat) == "gb300x72-tp1-dp72-epon-seqs256-mbt8192"
    assert load_config(params, [f"{k}={json.dumps(v)}" for k, v in flat.items()]).topology is None
    assert set(pd["topology"]) == {"prefill", "decode", "router"}
    assert load_config(None).topology is None and "topology" not in matrix(load_config(None), args)[0]


def test_plan_in_parallel_processes_gives_the_same_plan(tmp_path, tiny_workload, capsys):
    """--jobs 2 searches two candidates at once in forked processes: the same plan.json, in grid order."""
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    sets = [a for s in SMALL + ["load.capacity.resolution_rel=0.1", "load.capacity.max=256",
                                "load.tiers=[{name: fast, p90_user_tok_s: 150, p90_ttft_s: 1}]"] for a in ("--set", s)]
    docs = {}
    for jobs in ("1", "2"):
        rc = main(["plan", "--params", "/dev/null", *sets, "--workload", str(wl), "--gpu", "b200",
                   "--max-num-seqs", "4,16,32", "--jobs", jobs, "--out", str(tmp_path / jobs)])
        text = capsys.readouterr().out
        assert rc == 0, text
        doc = json.loads((tmp_path / jobs / "plan.json").read_text())
        for c in doc["configs"]:
            c.pop("search_s")
        docs[jobs] = {k: v for k, v in doc.items() if k != "elapsed_s"}
    assert "2 candidates at a time" in text
    assert [c["id"] for c in docs["2"]["configs"]] == [c["id"] for c in docs["1"]["configs"]]
    assert docs["2"] == docs["1"]
    assert all(c["status"] == "searched" for c in docs["2"]["configs"])
