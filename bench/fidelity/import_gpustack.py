"""Corpus points from a GPUStack performance-lab page, read by a script rather than by hand.

Each page (gpustack/gpustack, docs/performance-lab/<model>/<gpu>.md) pairs `vllm serve` /
`sglang.launch_server` commands with `vllm bench serve` result blocks. This reads the page's markdown and
prints one corpus point per result block it can model, with the serve command's flags, the workload its
label names (none: ShareGPT, 1000 prompts; "# random 32K input": 32000 / 100 ...), the block's token
totals and every figure it publishes, and `quote_line` = the line of the block's header in the page.

    git -C <gpustack mirror> show <commit>:docs/performance-lab/qwen3-14b/h100.md > /tmp/page.md
    uv run python bench/fidelity/import_gpustack.py.py /tmp/page.md --source gpustack-qwen3-14b-h100 \
        --set fit --short q14 --model Qwen/Qwen3-14B > bench/fidelity/corpus/gpustack-qwen3-14b-h100.yaml.points

Left out, each with the reason printed to stderr: TensorRT-LLM blocks (not modelled), checkpoints with no
profile (AWQ) or named by a local path (precision unknown), serve flags the replay has no counterpart for
(non-default attention backends, pipeline parallelism, CUDA-graph sizes), and a block that repeats an
earlier one's configuration and workload (kept once, so no run counts twice).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import yaml

from benchcamp.profiles import available, load_model

# "# random 32K input" -> (input_len, output_len), the page's "Benchmark Dataset" list
RANDOM_LABELS = {"32k": (32000, 100), "4k": (4000, 200), "2k": (2000, 100), "128": (128, 4)}
FIELDS = {"Successful requests": "num_prompts", "Total input tokens": "total_input_tokens",
          "Total generated tokens": "total_output_tokens", "Total Token throughput (tok/s)": "total_tok_s",
          "Output token throughput (tok/s)": "output_tok_s", "Mean TTFT (ms)": "ttft_mean_ms",
          "Median TTFT (ms)": "ttft_median_ms", "P99 TTFT (ms)": "ttft_p99_ms", "Mean TPOT (ms)": "tpot_mean_ms",
          "Median TPOT (ms)": "tpot_median_ms", "P99 TPOT (ms)": "tpot_p99_ms"}
# Serve flags the replay has no counterpart for: a block that sets one is left out
UNMODELLED = ("--attention-backend", "--pp-size", "--pipeline-parallel-size", "--cuda-graph-max-bs")
GPUS = {"A100": "a100-sxm", "H100": "h100-sxm", "H200": "h200"}


def serve_command(line: str) -> tuple[str, dict[str, str]] | None:
    """(engine, flags) of a `vllm serve` / `sglang.launch_server` / `trtllm-serve` line, else None."""
    words = shlex.split(line.strip())
    if words[:2] == ["vllm", "serve"]:
        engine, rest = "vllm", words[2:]
        flags = {"--model": rest.pop(0)} if rest and not rest[0].startswith("-") else {}
    elif "sglang.launch_server" in words:
        engine, rest, flags = "sglang", words[words.index("sglang.launch_server") + 1:], {}
    elif words and words[0] == "trtllm-serve":
        return "trtllm", {"--model": words[1] if len(words) > 1 else ""}
    else:
        return None
    i = 0
    while i < len(rest):
        key, _, value = rest[i].partition("=")
        if not value and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            value, i = rest[i + 1], i + 1
        flags[key] = value or "true"
        i += 1
    if "--model-path" in flags:
        flags["--model"] = flags.pop("--model-path")
    if "--ep-size" in flags or "--enable-expert-parallel" in flags:
        flags["ep"] = "true"
    return engine, flags


def blocks(lines: list[str]):
    """Yield (engine, flags, serve_line, label, header_line, figures) for each result block of the page."""
    command: tuple[str, dict[str, str]] | None = None
    serve_line = 0
    label = ""
    for n, raw in enumerate(lines, 1):
        text = raw.strip()
        nxt = n
        while text.endswith("\\") and nxt < len(lines):  # a command continued on the next line
            text, nxt = text[:-1] + " " + lines[nxt].strip(), nxt + 1
        parsed = serve_command(text) if re.match(r"(vllm serve|python3? -m sglang|trtllm-serve)", text) else None
        if parsed:
            command, serve_line, label = parsed, n, ""
        elif text.startswith("# ") and command:
            label = text[2:].strip()
        elif "Serving Benchmark Result" in text and command:
            figures: dict[str, float] = {}
            for row in lines[n:]:
                row = row.strip()
                if row.startswith("=====") and figures:
                    break
                key, _, value = row.partition(":")
                if key.strip() in FIELDS and value.strip():
                    figures[FIELDS[key.strip()]] = float(value)
            yield command[0], dict(command[1]), serve_line, label, n, figures
            label = ""


def page_facts(text: str) -> tuple[str, int, dict[str, str]]:
    """(gpu profile, GPU count, engine versions) from the page's Experimental Setup."""
    hardware = re.search(r"### Hardware\s+(.+)", text).group(1)
    gpu = next(v for k, v in GPUS.items() if k in hardware)
    count = 1 if re.search(r"\bA single\b", hardware) else int(re.search(r"(\d+)\s*[x×]", hardware).group(1))
    versions = {m.group(1).lower(): m.group(2) for m in re.finditer(r"- (vLLM|SGLang): v?([\w.]+)", text)}
    return gpu, count, versions


def profile_of(checkpoint: str) -> tuple[str, str] | None:
    """(profile, precision) of the model profile whose hf_names list ``checkpoint`` exactly, else None (no guessing:
    an AWQ checkpoint must not borrow its base model's profile)."""
    for name in available("models"):
        prof = load_model(name)
        if checkpoint in prof.hf_names:
            if 0 < prof.expert_weight_bytes < 1:
                return name, "mxfp4"
            return name, "fp8" if prof.weight_bytes == 1.0 else "bf16"
    return None


def points(path: Path, source: str, which: str, short: str, page_model: str) -> list[dict]:
    text = path.read_text()
    gpu, gpus, versions = page_facts(text)
    out, seen = [], set()
    for engine, flags, serve_line, label, header, fig in blocks(text.splitlines()):
        model = flags.get("--model", "")
        where = f"{path.name}:{header}"
        if engine == "trtllm":
            print(f"{where}: TensorRT-LLM, not modelled", file=sys.stderr)
            continue
        if "/" not in model:
            print(f"{where}: {model} is a local path, not a checkpoint: precision unknown", file=sys.stderr)
            continue
        if not model.startswith(page_model):
            # e.g. the gpt-oss-20b H100 page's "vllm serve openai/gpt-oss-120b ..." whose figures are the 20B's
            print(f"{where}: command names {model} on the {page_model} page: read as {page_model}", file=sys.stderr)
            model = page_model
        found = profile_of(model)
        if found is None:
            print(f"{where}: {model} has no profile", file=sys.stderr)
            continue
        profile, precision = found
        dataset, lens = "sharegpt", None
        match = re.match(r"random (\w+) input", label, re.I)
        if match:
            dataset, lens = "random", RANDOM_LABELS[match.group(1).lower()]
        elif label.startswith("--"):
            key, _, value = label.replace(" ", "=", 1).partition("=")
            flags[key] = value or "true"
        unmodelled = [f for f in UNMODELLED if f in flags] or (["--attention-backend"] if label in ("fa3", "flashinfer", "triton") else [])
        if unmodelled:
            print(f"{where}: {unmodelled[0]} {flags.get(unmodelled[0]) or label}, not modelled", file=sys.stderr)
            continue
        tp = int(flags.get("--tensor-parallel-size") or flags.get("-tp") or flags.get("--tp") or flags.get("--tp-size") or 1)
        ep = "ep" in flags
        batched = flags.get("--max-num-batched-tokens") or flags.get("--chunked-prefill-size")
        key = (engine, model, tp, ep, "--async-scheduling" in flags, batched, flags.get("--max-model-len"), dataset, lens)
        if key in seen:
            print(f"{where}: same configuration and workload as an earlier block, kept once", file=sys.stderr)
            continue
        seen.add(key)
        parts = [short, gpu.split("-")[0], engine] + (["fp8"] if precision == "fp8" else [])
        parts += [f"tp{tp}" + ("ep" if ep else "")] if tp > 1 else []
        parts += ["async"] if "--async-scheduling" in flags else []
        parts += [f"mbt{int(batched) // 1024}k"] if batched else []
        parts += [dataset] if not lens else ["random", "128" if lens[0] == 128 else f"{lens[0] // 1000}k"]
        point: dict = {"id": "-".join(parts), "set": which, "source": source, "engine": engine,
                       "engine_version": versions[engine], "model": model, "model_profile": profile,
                       "precision": precision, "gpu": gpu, "gpus": gpus, "tp": tp, "dp": 1, "ep": ep,
                       "dataset": dataset}
        if lens:
            point.update(input_len=lens[0], output_len=lens[1], range_ratio=0.0)
        point.update(num_prompts=int(fig.pop("num_prompts")), concurrency=None, request_rate="inf",
                     total_input_tokens=int(fig.pop("total_input_tokens")),
                     total_output_tokens=int(fig.pop("total_output_tokens")), per_gpu_divisor=gpus)
        if "--async-scheduling" in flags:
            point["async_scheduling"] = True
        if batched:
            point["max_num_batched_tokens"] = int(batched)
        if flags.get("--max-model-len"):
            point["max_model_len"] = int(flags["--max-model-len"])
        point.update(launch_line=serve_line, quote_line=header, published=fig)
        out.append(point)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path, help="the page's markdown")
    ap.add_argument("--source", required=True, help="the corpus source name the points cite")
    ap.add_argument("--set", required=True, choices=["fit", "validation"])
    ap.add_argument("--short", required=True, help="point id prefix, e.g. q14")
    ap.add_argument("--model", required=True, help="the page's model (a command naming another is a typo)")
    args = ap.parse_args(argv)
    found = points(args.page, args.source, args.set, args.short, args.model)
    print(yaml.safe_dump({"points": found}, sort_keys=False, width=120), end="")
    print(f"{len(found)} points", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
