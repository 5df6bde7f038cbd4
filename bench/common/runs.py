"""Runs of the clients the scripts compare: one benchcamp load point over HTTP, the benchcamp CLI, and
AIPerf's ``profile``, each with its records, its wall time and the server's cache delta over the run."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.common import peers
from bench.common.paths import ROOT, benchcamp_exe
from bench.common.servers import Server, cache_delta, prompt_tokens, scrape


@dataclass
class BenchcampRun:
    result: Any  # benchcamp.loadgen.PointResult
    records: pd.DataFrame
    wall_s: float
    cache: dict[str, Any] = field(default_factory=dict)  # the server's /metrics delta: hit rate, per engine
    server_prompt_tokens: float | None = None


def benchcamp_point(server: Server | str, workload: Any, spec: Any, out: Path, model: str | None = None,
                    metrics: bool = True) -> BenchcampRun:
    """``benchcamp.loadgen.run_point`` against ``server`` (a Server, or a bare URL with ``model``), its records
    read back; with ``metrics``, the server's /metrics scraped before and after."""
    from benchcamp.loadgen import run_point
    from benchcamp.records import read_records

    url, key, name = (server.url, server.api_key, server.model) if isinstance(server, Server) else (server, None, model)
    before = scrape(server) if metrics and isinstance(server, Server) else None
    t = time.monotonic()
    res = run_point(url, key, name or "", workload, spec, out)
    wall = time.monotonic() - t
    run = BenchcampRun(res, read_records(res.records_path), wall)
    if metrics and isinstance(server, Server):
        after = scrape(server)
        run.cache, run.server_prompt_tokens = cache_delta(before, after), prompt_tokens(before, after)
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

    def error(self, client: str, tail: int = 1500) -> dict[str, Any] | None:
        """The row to report when the peer left no records; None when it did."""
        return None if self.records else {"client": client, "error": f"exit {self.returncode}: {self.output[-tail:]}"}


def aiperf_value(record: dict, metric: str) -> Any:
    """One metric of an AIPerf per-request record (profile_export.jsonl), in AIPerf's unit (ms for times)."""
    return ((record.get("metrics") or {}).get(metric) or {}).get("value")


def aiperf_profile(server: Server, args: list[str], tmp: Path, endpoint: str = "completions",
                   timeout_s: float = 900.0, workers: int = 2) -> PeerRun:
    """``aiperf profile`` (AIPerf ``peers.AIPERF_VERSION`` from its own venv) against ``server`` with the word
    tokenizer, streaming, per-request records exported; ``args`` are the run's own options."""
    art, hf = tmp / "aiperf", tmp / "hf"
    argv = [str(peers.aiperf_exe()), "profile", "--model", server.model, "--url", server.url, "--endpoint-type",
            endpoint, "--streaming", "--tokenizer", peers.aiperf_tokenizer(hf), *args, "--workers-max", str(workers),
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
                   prompt_tokens(before, after))


def aiperf_summary(art: Path) -> dict[str, Any]:
    """AIPerf's own summary (profile_export_aiperf.json), {} when it wrote none."""
    for f in art.rglob("profile_export_aiperf.json"):
        return dict(json.loads(f.read_text()))
    return {}
