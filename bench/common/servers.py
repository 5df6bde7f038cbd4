"""Engines the scripts start (the simulated one, the real CPU vLLM of ``make real-engine``) or are
given (an endpoint), their readiness, free ports, logs and /metrics counters."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.common.paths import ROOT, benchcamp_exe

SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REAL_MODEL = "benchcamp/tiny-llama"  # `make real-engine`'s model


def real_limits(max_num_seqs: int = 16) -> list[str]:
    """The tiny model's engine limits, the same flags for the real engine and the simulated one beside it."""
    return ["--block-size", "32", "--max-num-seqs", str(max_num_seqs), "--max-num-batched-tokens", "2048",
            "--max-model-len", "8192"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, api_key: str | None, body: dict | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """(status, body) of a GET (a POST with ``body``, or to /reset_prefix_cache); status 0 when nothing answers."""
    req = urllib.request.Request(url, json.dumps(body).encode() if body is not None else None,
                                 {"Content-Type": "application/json"} if body is not None else {})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    if body is not None or url.endswith("reset_prefix_cache"):
        req.method = "POST"
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
    """Stop a process started with ``start_new_session``: ``sig`` to its group, SIGKILL after ``wait_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


class Server:
    """An engine a script started (its own process group, its log in ``work/engine.log``), or an
    endpoint given to it (no process). A context manager: leaving it stops the engine."""

    def __init__(self, name: str, url: str, api_key: str | None, model: str, proc: subprocess.Popen | None = None,
                 work: Path | None = None, scratch: list[Path] | None = None, argv: list[str] | None = None):
        self.name, self.url, self.api_key, self.model = name, url, api_key, model
        self.proc, self.work, self.scratch, self.argv = proc, work, scratch or [], argv or []

    @property
    def log(self) -> Path | None:
        return self.work / "engine.log" if self.work else None

    def wait_ready(self, timeout_s: float = 300.0) -> float:
        """Wait for /health; the seconds it took. Exits with the log's tail if the engine dies or stays down."""
        t = time.monotonic()
        while http(self.url + "/health", self.api_key, timeout=2)[0] != 200:
            if self.proc is not None and self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited ({self.proc.returncode}) before /health:\n" + self.log_tail())
            if time.monotonic() - t > timeout_s:
                raise SystemExit(f"{self.name} not ready after {timeout_s:.0f} s:\n" + self.log_tail())
            time.sleep(1.0)
        return time.monotonic() - t

    def log_tail(self) -> str:
        log = self.log
        return log.read_text(errors="replace")[-2000:] if log and log.exists() else ""

    def public_argv(self) -> list[str]:
        """The engine's command line with its API key left out."""
        return [("<key>" if i and self.argv[i - 1] == "--api-key" else x) for i, x in enumerate(self.argv)]

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
        for d in self.scratch:
            shutil.rmtree(d, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(name: str, argv: list[str], work: Path, port: int, key: str | None, model: str,
           env: dict[str, str] | None = None, cwd: Path | None = None, scratch: list[Path] | None = None) -> Server:
    work.mkdir(parents=True, exist_ok=True)
    log = open(work / "engine.log", "wb")  # noqa: SIM115 - the engine writes it until stopped
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    return Server(name, f"http://127.0.0.1:{port}", key, model, proc, work, scratch, argv)


def start_simulated(model: str, work: Path, flags: list[str], name: str = "simulated engine",
                    with_key: bool = True) -> Server:
    """``benchcamp engine serve --model MODEL FLAGS`` on a free loopback port (an API key unless ``with_key`` is
    false), usage with cached-token details."""
    key, port = (secrets.token_hex(8) if with_key else None), free_port()
    argv = [str(benchcamp_exe()), "engine", "serve", "--model", model, *flags, "--host", "127.0.0.1",
            "--port", str(port), "--enable-prompt-tokens-details", *(["--api-key", key] if key else [])]
    return _spawn(name, argv, work, port, key, model)


def start_real(model: str, work: Path, flags: list[str] | None = None, port: int | None = None,
               key: str | None = None, env: dict[str, str] | None = None) -> Server:
    """The real vLLM that ``benchcamp.deploy.find_vllm`` finds (``make real-engine``), dev mode on (for
    /reset_prefix_cache), with ``flags`` (default: ``real_limits()``); every cache inside ``work``."""
    from benchcamp.deploy.vllm_install import engine_environment, find_vllm, scratch_dirs

    found = find_vllm()
    if found is None:
        raise SystemExit("no vLLM here: run `make real-engine` (or set BENCHCAMP_VLLM to a vllm executable)")
    key, port = key or secrets.token_hex(8), port or free_port()
    env = {**os.environ, **engine_environment(found, work), "VLLM_SERVER_DEV_MODE": "1", "VLLM_API_KEY": key,
           **(env or {})}
    argv = [str(found.executable), "serve", found.model_path(model), "--served-model-name", model,
            "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--enable-prompt-tokens-details",
            *(real_limits() if flags is None else flags)]
    return _spawn(f"real vLLM {found.version}", argv, work, port, key, model, env, scratch=scratch_dirs(work))


def engine(kind: str, work: Path, dp: int = 1, ready_s: float = 600.0) -> Server:
    """A ready engine for the side-by-side scripts: ``simulated`` = Llama-3.1-8B on ``dp`` data-parallel H200s
    (no API key), ``real`` = the CPU vLLM's tiny model."""
    if kind == "simulated":
        flags = ["--gpu", "h200", "--data-parallel-size", str(dp), "--num-gpus", str(dp), "--max-model-len", "131072"]
        s = start_simulated(SIM_MODEL, work, flags, f"simulated engine ({dp} x H200, Llama-3.1-8B)", with_key=False)
    elif kind == "real":
        s = start_real(REAL_MODEL, work)
    else:
        raise SystemExit(f"engine {kind!r}: use simulated or real")
    s.wait_ready(ready_s)
    return s


# ---------------------------------------------------------------------------- the tiny model, long-context
SLIDING_WINDOW = 1024
MAX_MODEL_LEN = 163_840


def long_context_model(tmp: Path) -> Path:
    """The tiny model with a 262,144-position context (its weights are random: positions are free) and Mistral's
    sliding window of ``SLIDING_WINDOW`` tokens (the same weights; a Mistral layer is a Llama layer), so one
    prefill of a 128K-token prompt is linear in its length: seconds, not minutes, on 2 cores."""
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    if found is None:
        raise SystemExit("no vLLM here: run `make real-engine` (or set BENCHCAMP_VLLM to a vllm executable)")
    src = Path(found.model_path(REAL_MODEL))
    dst = tmp / "tiny-llama-long"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(
        max_position_embeddings=262_144,
        architectures=["MistralForCausalLM"],
        model_type="mistral",
        sliding_window=SLIDING_WINDOW,
    )
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    tok = json.loads((dst / "tokenizer_config.json").read_text())
    tok["model_max_length"] = 262_144
    (dst / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
    return dst


def engine_flags(api_servers: int = 1) -> list[str]:
    """The long-context tiny model's engine flags (``--api-server-count`` when more than 1)."""
    return [
        "--block-size",
        "32",
        "--max-num-seqs",
        "16",
        "--max-num-batched-tokens",
        "8192",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        *(["--api-server-count", str(api_servers)] if api_servers > 1 else []),
    ]


def start_listening(argv: list[str], pattern: str, **popen: Any) -> tuple[subprocess.Popen, tuple[str, int]]:
    """Start a server that prints where it listens (``pattern``'s groups: host, port), and read that line."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    assert proc.stdout is not None
    for line in proc.stdout:
        if m := re.search(pattern, line):
            return proc, (m.group(1), int(m.group(2)))
    raise RuntimeError(f"{' '.join(argv[:4])} did not start")


SERVE_LINE = r"Uvicorn running on http://([\d.]+):(\d+)"  # `benchcamp engine serve --port 0` says where it is


# ---------------------------------------------------------------------------- /metrics
def scrape(server: Server) -> dict | None:
    from benchcamp.loadgen.scrape import scrape as scrape_metrics

    return scrape_metrics(server.url, server.api_key)


def cache_delta(before: dict | None, after: dict | None) -> dict[str, Any]:
    """The server's prefix-cache hit rate over a run (the /metrics counters' delta), total and per DP engine."""
    from benchcamp.loadgen.scrape import delta
    from benchcamp.metrics import engine_hit_rates, server_hit_rate

    d = delta(before, after)
    return {"hit_rate": server_hit_rate(d), "per_engine": engine_hit_rates(d),
            "queries": d.get("vllm:prefix_cache_queries")}


def prompt_tokens(before: dict | None, after: dict | None) -> float | None:
    """Prompt tokens the server counted over a run (/metrics delta)."""
    from benchcamp.loadgen.scrape import delta

    d = delta(before, after)
    for k in ("vllm:prompt_tokens", "vllm:prompt_tokens_total"):
        if d.get(k) is not None:
            return float(d[k])
    return None


def server_ttft_mean(before: dict | None, after: dict | None) -> float | None:
    """The server's own mean TTFT over a run, seconds (``vllm:time_to_first_token_seconds`` sum / count delta:
    from the request's arrival at the HTTP handler to its first token leaving the engine)."""
    from benchcamp.loadgen.scrape import delta

    d = delta(before, after)
    n = d.get("vllm:time_to_first_token_seconds_count")
    return d["vllm:time_to_first_token_seconds_sum"] / n if n else None


def prefix_hits(server: Server) -> float | None:
    """The server's prefix-cache hits so far (every engine's counter summed), None without /metrics."""
    m = scrape(server)
    if not m:
        return None
    vals = [v for k, v in m.items() if k.split("{", 1)[0] in ("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")]
    return sum(vals) if vals else None
