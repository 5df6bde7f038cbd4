"""benchcamp's planner beside NVIDIA's aiconfigurator on the same cases: each tool's best layout and output
tokens/s/GPU at a TTFT and TPOT target, aggregated (one kind of engine) and disaggregated (prefill + decode).

    uv run python bench/aiconfigurator_side_by_side.py [--models deepseek-v3,llama-3.1-70b] [--gpus h200,b200,gb200]
        [--pairs 4000/500,1000/1000] [--tpot-ms 30,60] [--ttft-ms 2000] [--total-gpus 8]
        [--out bench/results/aiconfigurator_side_by_side/aiconfigurator_side_by_side.json]

aiconfigurator 0.12.0 (``aiconfigurator cli default``, its own venv under ~/.cache/benchcamp/peers/, created on
first use; Apache-2.0) searches its layouts (TP, attention DP, MoE TP/EP, xPyD) for the vLLM 0.24.0 backend on its
measured per-operation tables, at fixed ISL/OSL, and reports output tokens/s/GPU of its best configuration
under the TTFT and TPOT limits (its TPOT: the mean inter-token time). Each case takes it ~20-30 s.

benchcamp runs ``benchcamp plan`` (the capacity search in virtual time, ``benchcamp.planning.planner``) over the layouts it
can express: every TP in 1, 2, 4, 8 (data parallel = GPUs / TP), expert parallel on and off for a MoE model,
unified and N independent replicas behind the router (``agg``), and xPyD splits (``disagg``: 1p1d, 1p3d, 3p1d on 8 GPUs), on a single-turn workload whose
lengths are jittered (lognormal, sigma 0.1, around the case's ISL and OSL: fixed lengths in a closed loop run
in lockstep waves), nothing shared between requests (no prefix cache hits). Its tier: P90 per-user rate >= 1000
/ TPOT and P90 TTFT <= the TTFT limit, a stricter reading than aiconfigurator's mean TPOT. Its figure is
total tokens/s/GPU (input + output); the output share is total x mean OSL / (mean ISL + mean OSL) of the
workload it ran (no cached input, one turn per request).

Output: a table (each tool's best layout and output tokens/s/GPU per case and mode, and benchcamp / aiconfigurator),
the JSON (``--out``) and a PNG beside it. The full default grid is 24 cases (~30 min on 2 cores).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import plots, tables
from bench.common.paths import command, output
from bench.common.peers import AICONFIGURATOR_VERSION, aiconfigurator_exe, offline_env
from bench.common.runs import benchcamp_cli

SCRIPT = "aiconfigurator_side_by_side"
# benchcamp's model profile -> (its Hugging Face name in benchcamp, aiconfigurator's model path, MoE)
MODELS = {
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3", True),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B", False),
}
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200",
           "gb300": "gb300"}
SPLITS = {"agg": "unified,replicas", "disagg": "1p1d,1p3d,3p1d"}
WORKLOAD = """name: isl{isl}-osl{osl}
description: single-turn requests, ISL ~{isl}, OSL ~{osl} (lognormal, sigma 0.1), nothing shared
seed: 3
block_size: 64
vocab_size: 32000
sessions: 4000
arrival: {{kind: all_at_start}}
shared_prefix: {{system_prompt_tokens: 0, tool_schema_tokens: 0}}
session:
  task_tokens: {{kind: lognormal, median: {isl}, sigma: 0.1, min: {isl_min}, max: {isl_max}}}
  turns: {{kind: lognormal, median: 1, sigma: 0.0, min: 1, max: 1}}
  output_tokens: {{kind: lognormal, median: {osl}, sigma: 0.1, min: {osl_min}, max: {osl_max}}}
  tool_result_tokens: {{kind: lognormal, median: 10, sigma: 0.1, min: 1, max: 20}}
  think_s: {{kind: lognormal, median: 0.5, sigma: 0.1, min: 0.1, max: 1}}
  max_context_tokens: {ctx}
"""


def aiconfigurator_best(model: str, system: str, gpus: int, isl: int, osl: int, ttft_ms: float, tpot_ms: float,
                        tmp: Path) -> dict[str, dict[str, Any]]:
    """mode (agg, disagg) -> aiconfigurator's best row (its best_config_topn.csv, top 1)."""
    out = tmp / f"aic-{system}-{isl}-{osl}-{tpot_ms:g}-{model.replace('/', '_')}"
    args = [str(aiconfigurator_exe()), "cli", "default", "--model-path", model, "--total-gpus", str(gpus),
            "--system", system, "--backend", "vllm", "--isl", str(isl), "--osl", str(osl), "--ttft", str(ttft_ms),
            "--tpot", str(tpot_ms), "--top-n", "1", "--no-color", "--log-level", "ERROR", "--save-dir", str(out)]
    r = subprocess.run(args, capture_output=True, text=True, env=offline_env(), timeout=900)
    best: dict[str, dict[str, Any]] = {}
    for mode in ("agg", "disagg"):
        found = sorted(out.glob(f"**/{mode}/best_config_topn.csv"))
        rows = list(csv.DictReader(found[0].open())) if found else []
        if rows:
            row = rows[0]
            layout = row.get("parallel") or (  # disagg: prefill workers x layout -> decode workers x layout
                f"{row['(p)workers']}x {row['(p)parallel']} -> {row['(d)workers']}x {row['(d)parallel']}")
            best[mode] = {"layout": layout, "output_tok_s_gpu": float(row["tokens/s/gpu"]),
                          "ttft_ms": float(row["ttft"]), "tpot_ms": float(row["tpot"]),
                          "concurrency": float(row.get("concurrency") or "nan")}
        else:
            best[mode] = {"layout": "none meets the targets" if r.returncode == 0 else f"failed rc={r.returncode}",
                          "output_tok_s_gpu": 0.0}
    return best


def benchcamp_best(profile: str, hf: str, moe: bool, gpu: str, gpus: int, spec: Path, data: Path, ttft_ms: float,
                   tpot_ms: float, tmp: Path) -> dict[str, dict[str, Any]]:
    """mode -> benchcamp plan's best configuration for the tier (its plan.json ``best``)."""
    tier = [{"name": "target", "p90_user_tok_s": round(1000.0 / tpot_ms, 3), "p90_ttft_s": ttft_ms / 1000.0}]
    best: dict[str, dict[str, Any]] = {}
    for mode, split in SPLITS.items():
        out = tmp / f"bc-{profile}-{gpu}-{spec.stem}-{tpot_ms:g}-{mode}"
        benchcamp_cli(
            "plan", "--set", "topology=null", "--set", f"hardware.gpu={gpu}", "--set", f"hardware.gpu_count={gpus}",
            "--set", f"engine.model={hf}", "--set", f"engine.model_profile={profile}",
            "--set", f"workload.spec={spec}", "--set", f"workload.data={data}", "--set", f"load.tiers={json.dumps(tier)}",
            "--gpu", gpu, "--gpus", str(gpus), "--tp", "1,2,4,8", "--ep", "on,off" if moe else "off",
            "--split", split, "--out", str(out), check=False,
        )
        plan_file = out / "plan.json"
        b = json.loads(plan_file.read_text())["best"].get("target") if plan_file.exists() else None
        if b and b.get("max_agents"):
            best[mode] = {"layout": b["topology"], "total_tok_s_gpu": b["total_tokens_per_s_per_gpu"],
                          "ttft_ms": b["ttft_p90_s"] * 1e3, "p90_user_tok_s": b["p90_user_tokens_per_s"],
                          "agents": b["max_agents"], "binds": (b.get("binds") or {}).get("binds", "")}
        else:
            best[mode] = {"layout": "none meets the tier", "total_tok_s_gpu": 0.0}
    return best


def workload(isl: int, osl: int, tmp: Path) -> tuple[Path, Path, float]:
    """The case's spec, its Parquet (built by benchcamp), and its output share of all tokens."""
    from benchcamp.workload.model import read_workload

    spec = tmp / f"isl{isl}-osl{osl}.yaml"
    spec.write_text(WORKLOAD.format(isl=isl, osl=osl, isl_min=isl // 2, isl_max=isl * 2, osl_min=max(1, osl // 2),
                                    osl_max=osl * 2, ctx=4 * (isl + osl)))
    data = tmp / f"isl{isl}-osl{osl}.parquet"
    benchcamp_cli("workload", "build", "--spec", str(spec), "--out", str(data))
    reqs = [r for s in read_workload(data).sessions for r in s.requests]
    prompt = sum(r.prompt_len for r in reqs)
    out = sum(r.output_len for r in reqs)
    return spec, data, out / (prompt + out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="deepseek-v3,llama-3.1-70b")
    ap.add_argument("--gpus", default="h200,b200,gb200")
    ap.add_argument("--pairs", default="4000/500,1000/1000", help="ISL/OSL pairs")
    ap.add_argument("--tpot-ms", default="30,60")
    ap.add_argument("--ttft-ms", type=float, default=2000.0)
    ap.add_argument("--total-gpus", type=int, default=8)
    ap.add_argument("--out", type=Path, default=output(SCRIPT))
    a = ap.parse_args()
    t0 = time.time()
    cases = []
    with tempfile.TemporaryDirectory(prefix="aic-side-") as d:
        tmp = Path(d)
        loads = {p: workload(*map(int, p.split("/")), tmp) for p in a.pairs.split(",")}
        for profile in a.models.split(","):
            hf, aic_model, moe = MODELS[profile]
            for gpu in a.gpus.split(","):
                for pair, (spec, data, out_share) in loads.items():
                    isl, osl = map(int, pair.split("/"))
                    for tpot in map(float, a.tpot_ms.split(",")):
                        aic = aiconfigurator_best(aic_model, SYSTEMS[gpu], a.total_gpus, isl, osl, a.ttft_ms, tpot, tmp)
                        bc = benchcamp_best(profile, hf, moe, gpu, a.total_gpus, spec, data, a.ttft_ms, tpot, tmp)
                        for m in bc.values():
                            m["output_tok_s_gpu"] = m["total_tok_s_gpu"] * out_share
                        cases.append({"model": profile, "gpu": gpu, "isl": isl, "osl": osl, "tpot_ms": tpot,
                                      "ttft_ms": a.ttft_ms, "output_share": out_share, "aiconfigurator": aic,
                                      "benchcamp": bc})
                        print(f"[{len(cases)}] {profile} {gpu} {pair} TPOT {tpot:g} ms ({time.time() - t0:.0f} s)",
                              flush=True)
    rows = []
    for c in cases:
        for mode in ("agg", "disagg"):
            x, y = c["aiconfigurator"][mode], c["benchcamp"][mode]
            rows.append([c["model"], c["gpu"], f"{c['isl']}/{c['osl']}", f"{c['tpot_ms']:g}", mode, x["layout"],
                         tables.number(x["output_tok_s_gpu"], ",.0f"), y["layout"],
                         tables.number(y["output_tok_s_gpu"], ",.0f"),
                         tables.number(tables.ratio(x["output_tok_s_gpu"], y["output_tok_s_gpu"]), ".2f")])
    head = ["model", "GPU", "ISL/OSL", "TPOT ms", "mode", "aiconfigurator best", "out tok/s/GPU", "benchcamp best",
            "out tok/s/GPU", "bc/aic"]
    print(tables.render(head, rows, rule=True))
    result = {"command": command(), "aiconfigurator": AICONFIGURATOR_VERSION, "elapsed_s": time.time() - t0,
              "cases": cases, "table": tables.render(head, rows, markdown=True)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".tmp").write_text(json.dumps(result, indent=1))
    a.out.with_suffix(".tmp").replace(a.out)
    labels = [f"{r[0]} {r[1]} {r[2]} {r[3]}ms {r[4]}" for r in rows]
    ratios = [tables.ratio(c["aiconfigurator"][m]["output_tok_s_gpu"], c["benchcamp"][m]["output_tok_s_gpu"]) or 0.0
              for c in cases for m in ("agg", "disagg")]
    plots.write(a.out.with_suffix(".png"), [plots.Panel(
        labels, [plots.Series(ratios, label="benchcamp / aiconfigurator")], lines=[plots.Line(1.0, style="--")],
        title="best output tokens/s/GPU at the target, benchcamp / aiconfigurator", horizontal=True,
        annotate=".2f", label_size=6.0)], size=(8.0, max(3.0, 0.22 * len(labels))))
    print(f"wrote {a.out} and {a.out.with_suffix('.png')} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
