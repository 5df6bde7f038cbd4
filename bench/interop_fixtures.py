"""The peers' own output files for `benchcamp import`'s tests: GuideLLM, AIPerf and `vllm bench serve`, each
run here (its own venv) against benchcamp's simulated engine over loopback, their files and console summaries
kept as test fixtures.

    uv run --frozen python bench/interop_fixtures.py [--tools vllm,guidellm,aiperf] [--requests 24]
        [--concurrency 4] [--out tests/interop/fixtures]

One engine for all: ``benchcamp engine serve`` with the tiny model's profile on the ``cpu`` GPU profile (the
real CPU vLLM's limits), serving ``benchcamp/tiny-llama``; every tool counts tokens with that model's own
tokenizer (the folder `make real-engine` built; AIPerf reads it from a private Hugging Face cache, offline,
bench/common/peers.py says why). Each tool sends ``--requests`` requests of about 64 prompt tokens and 16
output tokens at concurrency ``--concurrency`` and writes its native result file; its console output (the
summary table it prints) is kept beside it, so a test can check an imported figure against the number the
tool itself showed. The folder's README.md gets one row per tool: version, date, command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import peers
from bench.common.paths import ROOT, command
from bench.common.servers import Server, real_limits, start_simulated

MODEL = "benchcamp/tiny-llama"
IN_TOKENS, OUT_TOKENS = 64, 16


def tokenizer_dir() -> Path:
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    if found is None:
        raise SystemExit("the tiny model's tokenizer comes with `make real-engine` (and vllm bench serve with it)")
    return Path(found.model_path(MODEL))


def run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr


def vllm_bench(server: Server, n: int, c: int, tmp: Path) -> tuple[list[Path], str, list[str]]:
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    assert found is not None
    argv = [str(found.executable), "bench", "serve", "--backend", "vllm", "--base-url", server.url, "--model", MODEL,
            "--tokenizer", str(tokenizer_dir()), "--dataset-name", "random", "--random-input-len", str(IN_TOKENS),
            "--random-output-len", str(OUT_TOKENS), "--num-prompts", str(n), "--max-concurrency", str(c),
            "--request-rate", "inf", "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(tmp), "--result-filename",
            "vllm-bench-serve.json", "--disable-tqdm", "--num-warmups", "0"]
    env = dict(os.environ, OPENAI_API_KEY=server.api_key or "", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1")
    out = run(argv, env, tmp)
    return [tmp / "vllm-bench-serve.json"], out, argv


def guidellm(server: Server, n: int, c: int, tmp: Path) -> tuple[list[Path], str, list[str]]:
    """GuideLLM 0.8's scenario form (as bench/loadgen_ceiling.py runs it): a concurrent profile of ``c`` streams,
    synthetic text prompts, stopped after ``n`` requests; its console summary and its JSON file."""
    exe = peers.guidellm_exe()
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": server.url, "model": MODEL, "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": c},
        "data": [{"kind": "synthetic_text", "prompt_tokens": IN_TOKENS, "output_tokens": OUT_TOKENS}],
        "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer_dir())},
        "constraints": [{"kind": "max_requests", "count": n}],
    }}  # fmt: skip
    sc = tmp / "guidellm-scenario.json"
    sc.write_text(json.dumps(scenario))
    env = dict(peers.offline_env(), GUIDELLM__MAX_CONCURRENCY=str(c))
    argv = [str(exe), "run", "--scenario", str(sc), "--disable-console-interactive", "--output", "kind=console",
            "--output", f"kind=json,path={tmp / 'guidellm.json'}"]
    out = run(argv, env, tmp)
    return [tmp / "guidellm.json"], out, argv


def aiperf(server: Server, n: int, c: int, tmp: Path) -> tuple[list[Path], str, list[str]]:
    exe = peers.aiperf_exe()
    hf = tmp / "hf"
    tok = peers.hub_tokenizer(exe, hf, tokenizer_dir(), "benchcamp/tiny-llama")
    art = tmp / "aiperf"
    argv = [str(exe), "profile", "--model", MODEL, "--url", server.url, "--endpoint-type", "completions",
            "--streaming", "--tokenizer", tok, "--concurrency", str(c), "--request-count", str(n),
            "--prompt-input-tokens-mean", str(IN_TOKENS), "--prompt-input-tokens-stddev", "0",
            "--prompt-output-tokens-mean", str(OUT_TOKENS), "--extra-inputs", "ignore_eos:true",
            "--use-server-token-count", "--workers-max", "1", "--ui-type", "none", "--no-gpu-telemetry",
            "--no-server-metrics", "--output-artifact-dir", str(art)]
    if server.api_key:
        argv += ["--api-key", server.api_key]
    out = run(argv, peers.offline_env(hf), tmp)
    found = sorted(art.rglob("profile_export_aiperf.json"))
    if not found:
        raise SystemExit(f"aiperf wrote no profile_export_aiperf.json under {art}:\n{out[-2000:]}")
    return found[:1], out, argv


TOOLS = {"vllm": ("vllm bench serve", vllm_bench), "guidellm": ("GuideLLM", guidellm), "aiperf": ("AIPerf", aiperf)}


def version(tool: str) -> str:
    if tool == "guidellm":
        return peers.GUIDELLM_VERSION
    if tool == "aiperf":
        return peers.AIPERF_VERSION
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    return found.version if found is not None else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="vllm,guidellm,aiperf")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "tests" / "interop" / "fixtures"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [t.strip() for t in a.tools.split(",") if t.strip()]
    bad = [t for t in names if t not in TOOLS]
    if bad:
        ap.error(f"--tools {','.join(bad)}: use {', '.join(TOOLS)}")
    tmp = Path(tempfile.mkdtemp(prefix="bc-interop-"))
    rows = []
    try:
        for name in names:
            title, fn = TOOLS[name]
            server = start_simulated(MODEL, tmp / f"engine-{name}",
                                     ["--model-profile", "tiny-llama", "--gpu", "cpu", "--num-gpus", "1",
                                      *real_limits()], with_key=False)
            try:
                server.wait_ready(300)
                work = tmp / name
                work.mkdir()
                files, console, argv = fn(server, a.requests, a.concurrency, work)
            finally:
                server.stop()
            kept = [f.name if f.name.startswith(name) else f"{name}.{f.name}" for f in files]
            for f, k in zip(files, kept):
                shutil.copy2(f, out / k)
            (out / f"{name}.console.txt").write_text(console.replace(str(tmp), "$TMP"))
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
            shown = " ".join(argv).replace(str(tmp), "$TMP").replace(str(Path.home()), "~")
            rows.append((title, version(name), when, kept, shown))
            print(f"{title}: {', '.join(kept)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    readme = out / "README.md"
    old = readme.read_text() if readme.exists() else (
        "# Peers' native outputs (test fixtures)\n\nWritten by the tools themselves, each against benchcamp's "
        "simulated engine (`benchcamp engine serve --model benchcamp/tiny-llama --model-profile tiny-llama --gpu "
        "cpu`) on loopback, by `" + command().replace(" ".join(sys.argv[1:]), "").strip() + "`; "
        "`<tool>.console.txt` is what the tool printed.\n\n")
    text = old + "".join(f"## {t} {v}\n\n- date: {d}\n- files: {', '.join(fs)}\n- command: `{c}`\n\n"
                         for t, v, d, fs, c in rows)
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
