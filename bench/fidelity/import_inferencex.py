"""Validation points from SemiAnalysis InferenceX, read by a script rather than by hand.

InferenceX (github.com/SemiAnalysisAI/InferenceX) benchmarks serving engines every night; its dashboard's
API answers `/benchmarks` with one row per run configuration: GPU, engine, model, precision, parallel
layout, ISL/OSL, concurrency, the engine's container image, the GitHub Actions run, and the client's
figures (`utils/bench_serving/benchmark_serving.py`: per-GPU throughput, TTFT/TPOT/E2E in seconds).
The dashboard's repository (SemiAnalysisAI/InferenceX-app) keeps a snapshot of that answer as a test
fixture, `packages/app/cypress/fixtures/api/benchmarks.json`. This reads it and prints one corpus point
per row the simulator can model:

    git -C <InferenceX-app mirror> show 528c4146:packages/app/cypress/fixtures/api/benchmarks.json > /tmp/ix.json
    uv run python bench/fidelity/import_inferencex.py.py /tmp/ix.json > bench/fidelity/corpus/inferencex-dsr1-fp8.yaml.points

With --spread, it reads the history fixture (benchmarks-history.json: the same configurations on earlier
nights) and prints how far each kept configuration's published median TPOT and throughput moved between
runs (max / min over the nights), by GPU: the spread of the reference itself across engine releases.

The issue keeps InferenceX for independent validation: every point is `set: validation`, and nothing in
the profiles may be chosen by looking at them.

The workload is InferenceX's, from its benchmark_lib.sh `run_benchmark_serving` and the workflow's
RANDOM_RANGE_RATIO (0.8): `--dataset-name random`, lengths uniform in [0.8 L, L] (its benchmark_serving.py
`sample_uniform`, the same draw as sglang.bench_serving's, hence `length_sampling: sglang`), `--ignore-eos`,
`--num-prompts` 10 x concurrency, closed loop at `--max-concurrency`, completions API.

The engine flags are the launch scripts' (`launch` below), which the rows do not carry. Left out, each with
the reason on stderr: engines or speculative decoding the simulator does not model (TensorRT-LLM, ATOM,
Dynamo/disaggregated, MTP), FP4 checkpoints (no FP4 model profile), GPUs without a profile (MI325X), and
rows whose decode GPU count is not their tensor-parallel size (not one replica on one node).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

from bench.common.fidelity import MODELS, config_id, skip_reason, spread_by_gpu
from benchcamp.profiles import available

RANGE_RATIO = 0.8  # .github/workflows/benchmark-tmpl.yml RANDOM_RANGE_RATIO
PROMPTS_PER_CONCURRENCY = 10  # --num-prompts $(( CONC * 10 ))

# SGLang launch flags (`launch`) of benchmarks/single_node/dsr1_fp8_<gpu>.sh at InferenceX commit 2dca6019 (the last
# before 2026-06-01, the scripts in force for every row dated 2026-02 to 2026-05; the B200 script of 2025-12-31,
# benchmarks/dsr1_fp8_b200_docker.sh at d27433dff, sets the same TP 8 values). Every script passes
# --disable-radix-cache. By GPU:
#   h200:   --max-running-requests 512 at 1k/1k, else 256; --chunked-prefill-size 32768; --mem-fraction-static 0.82;
#           no --kv-cache-dtype (BF16 KV)
#   b200, b300: (--max-running-requests, --chunked-prefill-size, --mem-fraction-static) (128, 32768, 0.82) at TP 8,
#           (32, 8192, 0.95) at TP 4 (8k/1k only); --kv-cache-dtype fp8_e4m3; --ep-size from the row
#   mi300x: --chunked-prefill-size 131072, --mem-fraction-static 0.8, fp8_e4m3, --num-continuous-decode-steps 4
#   mi355x: --chunked-prefill-size 196608, --mem-fraction-static 0.8, fp8_e4m3, --num-continuous-decode-steps 8
# --num-continuous-decode-steps N runs N decode steps before the scheduler admits new work: the simulator's
# num_scheduler_steps (vLLM 0.6's --num-scheduler-steps) is that behaviour.


def launch(gpu: str, tp: int, isl: int, osl: int) -> dict:
    """The point fields a row's launch script sets (the comment above)."""
    if gpu == "h200":
        return {"max_num_seqs": 512 if (isl, osl) == (1024, 1024) else 256, "max_num_batched_tokens": 32768,
                "gpu_memory_utilization": 0.82, "kv_cache_dtype": "auto"}
    if gpu in ("b200", "b300"):
        seqs, chunk, mem = (128, 32768, 0.82) if tp == 8 else (32, 8192, 0.95)
        return {"max_num_seqs": seqs, "max_num_batched_tokens": chunk, "gpu_memory_utilization": mem,
                "kv_cache_dtype": "fp8_e4m3"}
    if gpu == "mi300x":
        return {"max_num_batched_tokens": 131072, "gpu_memory_utilization": 0.8, "kv_cache_dtype": "fp8_e4m3",
                "num_scheduler_steps": 4}
    if gpu == "mi355x":
        return {"max_num_batched_tokens": 196608, "gpu_memory_utilization": 0.8, "kv_cache_dtype": "fp8_e4m3",
                "num_scheduler_steps": 8}
    raise KeyError(gpu)


def published(metrics: dict, gpus: int) -> dict[str, float]:
    """The corpus's metrics from a row's: throughputs per GPU x GPUs (the corpus compares whole deployments),
    seconds -> ms. output_tput_per_gpu is in the newer rows only."""
    out = {"total_tok_s": metrics["tput_per_gpu"] * gpus}
    if "output_tput_per_gpu" in metrics:
        out["output_tok_s"] = metrics["output_tput_per_gpu"] * gpus
    for ours, theirs in (("ttft_mean_ms", "mean_ttft"), ("ttft_median_ms", "median_ttft"),
                         ("ttft_p99_ms", "p99_ttft"), ("tpot_mean_ms", "mean_tpot"),
                         ("tpot_median_ms", "median_tpot"), ("tpot_p99_ms", "p99_tpot"),
                         ("e2e_median_ms", "median_e2el")):
        if theirs in metrics:
            out[ours] = metrics[theirs] * 1e3
    return {k: round(float(v), 3) for k, v in out.items()}






def point(row: dict) -> dict:
    gpu, tp, isl, osl, conc = row["hardware"], row["decode_tp"], row["isl"], row["osl"], row["conc"]
    model, profile = MODELS[row["model"]]
    version = re.search(r":v(\d+\.\d+(?:\.\d+)?)", row["image"])
    return {
        "id": config_id(row),
        "set": "validation", "source": "inferencex-dsr1-fp8", "engine": row["framework"],
        "engine_version": version.group(1) if version else row["image"], "image": row["image"],
        "model": model, "model_profile": profile, "precision": row["precision"], "gpu": gpu, "gpus": tp,
        "tp": tp, "dp": 1, "ep": row["decode_ep"] > 1, "dataset": "random", "input_len": isl, "output_len": osl,
        "range_ratio": RANGE_RATIO, "length_sampling": "sglang", "num_prompts": PROMPTS_PER_CONCURRENCY * conc,
        "concurrency": conc, "request_rate": "inf", "prefix_caching": False, **launch(gpu, tp, isl, osl),
        "per_gpu_divisor": tp, "date": row["date"], "run_url": row["run_url"],
        "published": published(row["metrics"], tp),
    }


def points(rows: list[dict]) -> list[dict]:
    gpus_known = set(available("gpus"))
    out, seen = [], set()
    for row in rows:
        reason = skip_reason(row, gpus_known)
        if reason is None and not row.get("image"):
            reason = "no engine image recorded (version unknown)"
        label = (f"{row['hardware']} {row['framework']} {row['model']} {row['precision']} spec={row['spec_method']} "
                 f"tp{row['decode_tp']} {row['isl']}/{row['osl']} c{row['conc']}")
        if reason:
            print(f"left out: {label}: {reason}", file=sys.stderr)
            continue
        p = point(row)
        if p["id"] in seen:
            print(f"left out: {label}: repeats an earlier row's configuration", file=sys.stderr)
            continue
        seen.add(p["id"])
        out.append(p)
    return out


def spread(rows: list[dict]) -> list[str]:
    """Per GPU: how many kept configurations ran on several nights, and the median and largest max/min ratio of
    their published median TPOT and per-GPU throughput across those nights."""
    return [f"{gpu:7} {n:3} configurations  median TPOT max/min {tpot:.2f} (largest {tpot_max:.2f})  throughput "
            f"{tput:.2f} (largest {tput_max:.2f})"
            for gpu, (n, tpot, tpot_max, tput, tput_max) in spread_by_gpu(rows).items()]




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture", type=Path, help="InferenceX-app's packages/app/cypress/fixtures/api/benchmarks.json")
    ap.add_argument("--spread", action="store_true", help="the fixture is benchmarks-history.json: print how far "
                    "each configuration's published figures moved between nights")
    args = ap.parse_args(argv)
    try:
        rows = json.loads(args.fixture.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: {args.fixture}: {exc}; pass the /benchmarks fixture's path", file=sys.stderr)
        return 2
    if args.spread:
        print("\n".join(spread(rows)))
        return 0
    kept = points(rows)
    print(f"{len(kept)} of {len(rows)} rows kept", file=sys.stderr)
    yaml.safe_dump({"points": kept}, sys.stdout, sort_keys=False, width=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
