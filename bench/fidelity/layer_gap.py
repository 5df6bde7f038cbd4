"""The per-layer gap of a graphed decode step per model, engine and GPU, from aiconfigurator-core's measured tables.

For each model, engine and GPU asked, aiconfigurator-core composes a decode step from its measured per-operation
tables (benchcamp/calibrate/layer_gap.py says how and what is solved for) at batches 1, 2, 4 and 8 and a 1,024-token
context; the perf model's step without its per-layer term is set beside it, and the scale that closes the difference
is printed per batch and as their median: the figure a model profile's ``layer_overhead_scales`` takes.

    uv run python bench/fidelity/layer_gap.py [--engines sglang,vllm] [--gpus h200,b200] [--models deepseek-v3]

About 10 s a (model, engine, GPU) on 2 cores. No published end-to-end result is read.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchcamp.calibrate.layer_gap import layer_gap
from benchcamp.calibrate.sources import CalibrateError

# benchcamp model profile -> (the checkpoint aiconfigurator-core knows it by, TP the corpus runs it at, KV dtype)
MODELS = {
    "deepseek-v3": ("deepseek-ai/DeepSeek-R1", 8, "fp8"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", 8, "bfloat16"),
}
GPUS = ("h100-sxm", "h200", "b200", "b300", "gb200", "gb300")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="sglang", help="comma-separated: sglang, vllm")
    ap.add_argument("--gpus", default=",".join(GPUS), help="comma-separated GPU profiles with measured tables")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    args = ap.parse_args()
    for model in args.models.split(","):
        if model not in MODELS:
            print(f"error: --models {model}: no checkpoint known for it; choose from {', '.join(MODELS)}",
                  file=sys.stderr)
            return 2
    print("model            engine  GPU       tables   scale   per batch: measured ms / perf model without the "
          "gap ms / scale")
    for model in args.models.split(","):
        hf, tp, kv = MODELS[model]
        for engine in args.engines.split(","):
            for gpu in args.gpus.split(","):
                t0 = time.perf_counter()
                try:
                    g = layer_gap(gpu, engine, model, hf, tp, kv)
                except CalibrateError as exc:
                    print(f"{model:16} {engine:7} {gpu:9} no measured step: {str(exc)[:160]}", flush=True)
                    continue
                rows = "  ".join(f"b={r.batch}: {r.measured_ms:.2f}/{r.roofline_ms:.2f}/{r.scale:.3f}" for r in g.rows)
                print(f"{model:16} {engine:7} {gpu:9} {g.version:8} {g.scale:6.3f}   {rows}  "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
