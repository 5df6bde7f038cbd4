"""Runs of the clients the scripts compare: one benchcamp load point over HTTP, the benchcamp CLI, and
AIPerf's ``profile``, each with its records, its wall time and the server's cache delta over the run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.common import peers
from bench.common.paths import ROOT, benchcamp_exe
from bench.common.servers import Server, cache_delta, prompt_tokens, scrape, server_ttft_mean


@dataclass
class BenchcampRun:
    result: Any  # benchcamp.loadgen.PointResult
    records: pd.DataFrame
    wall_s: float
    cache: dict[str, Any] = field(default_factory=dict)  # the server's /metrics delta: hit rate, per engine
    server_prompt_tokens: float | None = None
    server_ttft_mean_s: float | None = None  # the server's own TTFT (its /metrics histogram), mean over the run


def benchcamp_point(server: Server | str, workload: Any, spec: Any, out: Path, model: str | None = None,
                    metrics: bool = True) -> BenchcampRun:
    """``benchcamp.loadgen.run_point`` against ``server`` (a Server, or a bare URL with ``model``), its records
    read back; with ``metrics``, the server's /metrics scraped before and after."""
    from benchcamp.loadgen import run_point
    from benchcamp.results.records import read_records

    url, key, name = (server.url, server.api_key, server.model) if isinstance(server, Server) else (server, None, model)
    before = scrape(server) if metrics and isinstance(server, Server) else None
    t = time.monotonic()
    res = run_point(url, key, name or "", workload, spec, out)
    wall = time.monotonic() - t
    run = BenchcampRun(res, read_records(res.records_path), wall)
    if metrics and isinstance(server, Server):
        after = scrape(server)
        run.cache, run.server_prompt_tokens = cache_delta(before, after), prompt_tokens(before, after)
        run.server_ttft_mean_s = server_ttft_mean(before, after)
    return run


def benchcamp_cli(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``benchcamp ARGS`` of this environment, from the repository root, output captured."""
    return subprocess.run([str(benchcamp_exe()), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=check)


@dataclass
class PeerRun:
    """A peer's run: its exit code, its output (the tail), its per-request records, the server's cache delta."""

    returncode: int
    output: str
    records: list[dict]
    artifacts: Path
    wall_s: float
    argv: list[str]
    cache: dict[str, Any] = field(default_factory=dict)
    server_prompt_tokens: float | None = None
    server_ttft_mean_s: float | None = None

    def error(self, client: str, tail: int = 1500) -> dict[str, Any] | None:
        """The row to report when the peer left no records; None when it did."""
        return None if self.records else {"client": client, "error": f"exit {self.returncode}: {self.output[-tail:]}"}


def aiperf_value(record: dict, metric: str) -> Any:
    """One metric of an AIPerf per-request record (profile_export.jsonl), in AIPerf's unit (ms for times)."""
    return ((record.get("metrics") or {}).get(metric) or {}).get("value")


def aiperf_ok(records: list[dict]) -> list[dict]:
    """AIPerf's per-request records of requests that ended well (a TTFT, no error)."""
    return [r for r in records if aiperf_value(r, "time_to_first_token") is not None and not r.get("error")]


def aiperf_arrays(ok: list[dict]) -> tuple[list[float], ...]:
    """AIPerf's successful records -> what ``bench.common.stats.request_stats`` takes (``record_arrays`` for
    benchcamp's): ttft, tpot, e2e (s), prompt tokens, output tokens, send and end times (s)."""
    return ([aiperf_value(r, "time_to_first_token") / 1e3 for r in ok],
            [(aiperf_value(r, "inter_token_latency") or float("nan")) / 1e3 for r in ok],
            [aiperf_value(r, "request_latency") / 1e3 for r in ok],
            [aiperf_value(r, "input_sequence_length") or 0 for r in ok],
            [aiperf_value(r, "output_sequence_length") or 0 for r in ok],
            [r["metadata"]["request_start_ns"] / 1e9 for r in ok],
            [r["metadata"]["request_end_ns"] / 1e9 for r in ok])


def aiperf_profile(server: Server, args: list[str], tmp: Path, endpoint: str = "completions",
                   timeout_s: float = 900.0, workers: int = 2, exe: Path | None = None,
                   tokenizer: tuple[Path, str] | None = None) -> PeerRun:
    """``aiperf profile`` (AIPerf ``peers.AIPERF_VERSION`` from its own venv) against ``server`` with the word
    tokenizer, streaming, per-request records exported; ``args`` are the run's own options. ``exe``: another
    AIPerf build's CLI (the AgentX harness's fork), its tokenizer built with its own ``tokenizers``.
    ``tokenizer``: (folder, hub name) of a real tokenizer to use instead (the served model's)."""
    art, hf = tmp / "aiperf", tmp / "hf"
    exe = exe or peers.aiperf_exe()
    argv = [str(exe), "profile", "--model", server.model, "--url", server.url, "--endpoint-type",
            endpoint, "--streaming", "--tokenizer",
            peers.hub_tokenizer(exe, hf, *(tokenizer or ())), *args, "--workers-max", str(workers),
            "--record-processors", "1", "--ui-type", "none", "--no-gpu-telemetry", "--export-level", "records",
            "--output-artifact-dir", str(art)]
    if server.api_key:
        argv += ["--api-key", server.api_key]
    before = scrape(server)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=peers.offline_env(hf), cwd=str(tmp), timeout=timeout_s)
    wall = time.monotonic() - t
    after = scrape(server)
    records: list[dict] = []
    for f in art.rglob("profile_export.jsonl"):
        records = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return PeerRun(p.returncode, p.stdout + p.stderr, records, art, wall, argv, cache_delta(before, after),
                   prompt_tokens(before, after), server_ttft_mean(before, after))


def aiperf_summary(art: Path) -> dict[str, Any]:
    """AIPerf's own summary (profile_export_aiperf.json), {} when it wrote none."""
    for f in art.rglob("profile_export_aiperf.json"):
        return dict(json.loads(f.read_text()))
    return {}


# ---------------------------------------------------------------------------- a raw streaming client
class StreamClient(asyncio.Protocol):
    """One keep-alive connection that streams completion after completion."""

    def __init__(self, request: bytes, counter: list[int]) -> None:
        self.request, self.counter, self.tail = request, counter, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buf = self.tail + data
        self.counter[0] += buf.count(b"data: {")
        if b"data: [DONE]" in buf:
            # chunked body ends with 0\r\n\r\n right after [DONE]; send the next request
            self.transport.write(self.request)
        self.tail = buf[-11:]  # shorter than "data: [DONE]": never detected twice
        # avoid double counting across the overlap
        self.counter[0] -= self.tail.count(b"data: {")

    def connection_lost(self, exc: Exception | None) -> None:
        self.counter[1] += 1


async def count_chunks(host: str, port: int, streams: int, seconds: float, max_tokens: int, model: str) -> float:
    """Streamed SSE chunks/s that ``streams`` keep-alive connections read from ``host:port`` over ``seconds``
    (after 1 s of warm-up), each streaming ``max_tokens``-token completions back to back."""
    body = json.dumps({"model": model, "prompt": list(range(1000, 1032)), "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%b" % (host.encode(), len(body), body))
    counter = [0, 0]
    loop = asyncio.get_running_loop()
    conns = [await loop.create_connection(lambda: StreamClient(req, counter), host, port) for _ in range(streams)]
    await asyncio.sleep(1.0)                         # warm up: all streams running
    c0, t0 = counter[0], time.perf_counter()
    await asyncio.sleep(seconds)
    c1, t1 = counter[0], time.perf_counter()
    for tr, _ in conns:
        tr.close()
    if counter[1] > len(conns):
        raise RuntimeError("connections were lost during the measurement")
    return (c1 - c0) / (t1 - t0)


def event_loop_runner():  # type: ignore[no-untyped-def]
    """uvloop.run where uvloop is installed, else asyncio.run."""
    try:
        import uvloop

        return uvloop.run
    except ImportError:
        return asyncio.run
