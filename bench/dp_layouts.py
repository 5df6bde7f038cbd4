"""vLLM's DP layouts in benchcamp's performance model beside NVIDIA aiconfigurator's estimates (issue 31, item 3).

Per case (model, GPUs, layout, batch per DP rank): the decode step time benchcamp's perf model gives at the mean
context of an ISL/OSL pair (ISL + OSL / 2: TPOT of decode-only steps), the same with the steady share of
prefill (b / OSL of the steps also prefill one ISL prompt: how aiconfigurator's agg mode spreads context work; the
ratio is of this one), the weights it holds per GPU, and what ``aiconfigurator cli estimate`` (its agg mode, the vLLM backend's measured tables) printed for
the same layout, when its outputs are given (``--aic DIR``: files named ``<case>-b<batch>.txt`` as below).

    uv run python bench/dp_layouts.py [--isl 4000 --osl 500] [--aic /tmp/aic] [--out bench/results/dp_layouts/dp_layouts.json]

aiconfigurator (0.12.0 from the registry, in its own venv: ``uv venv /tmp/aic-venv --python 3.11 && VIRTUAL_ENV=
/tmp/aic-venv uv pip install aiconfigurator``; ~4 s a case):

    aiconfigurator cli estimate --model-path meta-llama/Meta-Llama-3.1-70B --system h200_sxm --backend vllm \\
        --estimate-mode agg --tp-size 4 --batch-size B --isl 4000 --osl 500              # llama-tp4-bB.txt
    aiconfigurator cli estimate --model-path deepseek-ai/DeepSeek-V3 --system h200_sxm --backend vllm \\
        --estimate-mode agg --tp-size 8 --moe-tp-size 8 --batch-size B ...               # v3-tp8-bB.txt
    aiconfigurator cli estimate ... --tp-size 1 --attention-dp-size 8 --moe-tp-size 8 --batch-size B ...
                                                                                         # v3-dp8-moetp8-bB.txt

Two replicas of TP4 and one TP4 x DP2 engine of a dense model are the same step per rank now (independent ranks);
aiconfigurator estimates one TP4 worker (replicas multiply it). Result: bench/results/dp_layouts/.

Result (2026-12-02, ``--aic /tmp/aic``, aiconfigurator 0.12.0 vllm 0.24.0 tables on h200_sxm; ISL 4000 / OSL 500):

    case                              batch/rank       layout  decode TPOT ms  +prefill TPOT ms  aic TPOT ms  ratio  weights GiB/GPU  aic mem GB/GPU
    Llama-3.1-70B TP4 (x2 replicas)            1       single            12.9              13.3         12.4   1.07             32.9            37.4
    Llama-3.1-70B TP4 (x2 replicas)            8       single            13.9              17.5         17.1   1.02             32.9            39.8
    Llama-3.1-70B TP4 (x2 replicas)           32       single            17.6              32.0         31.8   1.01             32.9            48.0
    Llama-3.1-70B TP4 (x2 replicas)           64       single            22.6              51.0         51.1   1.00             32.9            59.0
    Llama-3.1-70B TP4 x DP2                    1  independent            12.9              13.3         12.4   1.07             32.9            37.4
    Llama-3.1-70B TP4 x DP2                    8  independent            13.9              17.5         17.1   1.02             32.9            39.8
    Llama-3.1-70B TP4 x DP2                   32  independent            17.6              32.0         31.8   1.01             32.9            48.0
    Llama-3.1-70B TP4 x DP2                   64  independent            22.6              51.0         51.1   1.00             32.9            59.0
    DeepSeek-V3 TP8                            1       single            15.0              15.3         15.5   0.99             78.1            90.9
    DeepSeek-V3 TP8                            8       single            20.2              22.7         20.8   1.09             78.1            91.9
    DeepSeek-V3 TP8                           64       single            42.0              60.0         57.4   1.05             78.1           100.2
    DeepSeek-V3 DP8, MoE TP8 (no EP)           1       moe_tp            23.0              25.2         19.3   1.31             92.0           115.3
    DeepSeek-V3 DP8, MoE TP8 (no EP)           8       moe_tp            38.1              56.1         47.0   1.19             92.0           116.4
    DeepSeek-V3 DP8, MoE TP8 (no EP)          64       moe_tp            50.2             195.9        166.5   1.18             92.0           124.9
    DeepSeek-V3 DP8 + EP8                      1       moe_ep            22.9              24.5            -      -             92.0               -
    DeepSeek-V3 DP8 + EP8                      8       moe_ep            38.1              49.9            -      -             92.0               -
    DeepSeek-V3 DP8 + EP8                     64       moe_ep            49.6             146.1            -      -             92.0               -

With the prefill share, benchcamp's TPOT is 0.99-1.09x aiconfigurator's for TP-only layouts of both models, and
1.18-1.31x for DeepSeek-V3 as attention DP8 with the experts TP over the 8 GPUs (the layout benchcamp could not
express before; it gave each rank a full expert copy, which does not fit an H200). aiconfigurator's memory per
GPU counts its KV/activation reservation too (benchcamp's column is weights only).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from bench.common.paths import command, output
from bench.common.tables import render

GIB = 1024**3
# (case, model, model profile, TP, DP, expert parallel, aiconfigurator file stem, batches per DP rank)
CASES = [
    ("Llama-3.1-70B TP4 (x2 replicas)", "meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b", 4, 1, False,
     "llama-tp4", (1, 8, 32, 64)),
    ("Llama-3.1-70B TP4 x DP2", "meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b", 4, 2, False, "llama-tp4",
     (1, 8, 32, 64)),
    ("DeepSeek-V3 TP8", "deepseek-ai/DeepSeek-V3", "deepseek-v3", 8, 1, False, "v3-tp8", (1, 8, 64)),
    ("DeepSeek-V3 DP8, MoE TP8 (no EP)", "deepseek-ai/DeepSeek-V3", "deepseek-v3", 1, 8, False, "v3-dp8-moetp8",
     (1, 8, 64)),
    ("DeepSeek-V3 DP8 + EP8", "deepseek-ai/DeepSeek-V3", "deepseek-v3", 1, 8, True, "", (1, 8, 64)),
]


def aic_figures(path: Path) -> dict[str, float]:
    """TPOT (ms), tokens/s/GPU and memory per GPU (GB) of one ``aiconfigurator cli estimate`` output."""
    text = path.read_text()
    out = {}
    for key, pat in (("tpot_ms", r"TPOT:\s+([\d.]+) ms"), ("tok_s_gpu", r"tokens/s/gpu:\s+([\d.]+)"),
                     ("mem_gb", r"Memory \(GPU\):\s+([\d.]+) GB")):
        if m := re.search(pat, text):
            out[key] = float(m.group(1))
    return out


def main() -> int:
    from benchcamp.sim.engine.perfmodel import BatchSummary, perf_model_for, prefill_pairs
    from benchcamp.sim.engine.settings import EngineSettings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isl", type=int, default=4000)
    ap.add_argument("--osl", type=int, default=500)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--aic", type=Path, help="folder of aiconfigurator estimate outputs (<stem>-b<batch>.txt)")
    ap.add_argument("--out", type=Path, default=output("dp_layouts"))
    a = ap.parse_args()
    ctx = a.isl + a.osl // 2
    rows, results = [], []
    for name, model, profile, tp, dp, ep, stem, batches in CASES:
        s = EngineSettings(model=model, model_profile=profile, gpu=a.gpu, tensor_parallel_size=tp,
                           data_parallel_size=dp, enable_expert_parallel=ep).validate()
        perf = perf_model_for(s)
        for b in batches:
            step = perf.cost([BatchSummary(decode_seqs=b, decode_ctx=b * ctx)] * (dp if perf.shared else 1))
            tpot = step.duration_s * 1e3
            # steady state: b / OSL of the steps also prefill one ISL prompt (each request's prompt once over its
            # OSL steps), as aiconfigurator's agg estimate spreads context work over the generation steps
            mixed = BatchSummary(decode_seqs=b, decode_ctx=b * ctx, prefill_seqs=1, prefill_tokens=a.isl,
                                 prefill_pairs=prefill_pairs(a.isl, 0), prefill_ctx=a.isl)
            with_prefill = perf.cost([mixed] * (dp if perf.shared else 1)).duration_s
            tpot_mixed = (step.duration_s + (with_prefill - step.duration_s) * b / a.osl) * 1e3
            r = {"case": name, "batch_per_rank": b, "tpot_ms": round(tpot, 2), "tpot_mixed_ms": round(tpot_mixed, 2),
                 "decode_tok_s_gpu": round(b * dp / step.duration_s / (tp * dp), 1),
                 "weights_gib_gpu": round(perf.weight_bytes_gpu / GIB, 1), "layout": perf.moe_tp and "moe_tp"
                 or (perf.ep and "moe_ep") or ("independent" if dp > 1 else "single")}
            f = a.aic / f"{stem}-b{b}.txt" if a.aic and stem else None
            if f is not None and f.is_file():
                r["aiconfigurator"] = aic_figures(f)
            results.append(r)
            aic = r.get("aiconfigurator", {})
            rows.append([name, b, r["layout"], f"{tpot:.1f}", f"{tpot_mixed:.1f}",
                         f"{aic['tpot_ms']:.1f}" if "tpot_ms" in aic else "-",
                         f"{tpot_mixed / aic['tpot_ms']:.2f}" if "tpot_ms" in aic else "-", f"{r['weights_gib_gpu']:.1f}",
                         f"{aic['mem_gb']:.1f}" if "mem_gb" in aic else "-"])
    print(f"ISL {a.isl} / OSL {a.osl} on {a.gpu}: decode step at context {ctx}")
    print(render(["case", "batch/rank", "layout", "decode TPOT ms", "+prefill TPOT ms", "aic TPOT ms", "ratio",
                  "weights GiB/GPU",
                  "aic mem GB/GPU"], rows))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"command": command(), "isl": a.isl, "osl": a.osl, "gpu": a.gpu,
                                 "results": results}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
