"""What a request costs vLLM's API server, measured on the real CPU vLLM (``make real-engine``), not assumed.

Method. Since V1 the API server (HTTP, request parsing, chat template, tokenization, the hand-off to the engine
core, detokenization and SSE chunks) is one process and the engine core another, so the API server's work is its
own process's CPU time, whatever the engine does meanwhile: the script reads it from
``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU, per thread) around each batch of requests, the asyncio
loop's thread (the process's main thread) apart from all its threads, less the idle rate measured first. Requests
go one at a time, so nothing queues and the loop's time is the request's own work. Client-side latency is shown
beside it, the engine's part of it being the rest.

The tiny model's context is made long enough for agentic prompts in a copy of its config in a temp folder:
max_position_embeddings 262,144 (its weights are random: positions are free) and Mistral's sliding window of 1,024
tokens (the same weights; a Mistral layer is a Llama layer), so the one prefill that fills the prefix cache for a
128K-token prompt is linear in its length (seconds, not minutes, on 2 cores). Every (kind, length) is sent once
first (not measured: it fills the cache, longest first, the shorter prompts being its prefixes), then ``repeats``
times with max_tokens 1: the engine computes one token and the API server does all of its per-request work.

Phases: (1) prompt length x kind: token ids to /v1/completions (what benchcamp sends: no tokenizer), the same
tokens as text to /v1/completions, and as one user message to /v1/chat/completions (template + tokenizer); a
least-squares line per kind gives us per prompt token and the per-request constant. (2) streamed chunks: a
128-token id prompt, max_tokens 1 vs 257 (ignore_eos) at 1 and 8 concurrent streams: the API server's CPU per
extra chunk; the wall time per decode step at 1 and 8 streams bounds the engine's per-sequence CPU from above
(on the CPU build the same process runs the tiny model, whose compute is in it). (3) ``--api-server-count 2``:
a second engine, 4 concurrent 32K-token text prompts through 1 and 2 API servers (requests per second, API-server
CPU per request).

    uv run python bench/frontend_costs.py [--lengths 1024,8192,32768,131072] [--repeats 3] [--no-api-servers]

Writes bench/results/frontend_costs/frontend_costs.{json,txt,png}. On a shared 2-core box the figures carry the
other tenants' noise (the spread over repeats is printed); a run takes ~5 minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.common import plots
from bench.common.paths import command, output
from bench.common.servers import MAX_MODEL_LEN, Server, engine_flags, long_context_model, start_real
from bench.common.tables import number, render

KINDS = ("ids", "text", "chat")
PATHS = {"ids": "/v1/completions", "text": "/v1/completions", "chat": "/v1/chat/completions"}
STREAMS = (1, 4, 16)  # concurrent streams of the chunk phase


# ---------------------------------------------------------------------------- processes and their CPU time
def thread_ns(pid: int, main_only: bool = False) -> int:
    """Nanoseconds the process's threads (its main thread only: ``main_only``) have run on a CPU."""
    tasks = [Path(f"/proc/{pid}/task/{pid}")] if main_only else list(Path(f"/proc/{pid}/task").iterdir())
    total = 0
    for t in tasks:
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended between listing and reading
    return total


def roles(server: Server) -> tuple[list[int], list[int]]:
    """(API-server pids, engine-core pids) of ``server``'s process tree, by vLLM's process titles."""
    assert server.proc is not None
    root = psutil.Process(server.proc.pid)
    tree = [root, *root.children(recursive=True)]
    titles = {p.pid: " ".join(p.cmdline()) for p in tree if p.is_running()}
    engines = [pid for pid, t in titles.items() if "EngineCore" in t]
    apis = [pid for pid, t in titles.items() if "APIServer" in t]
    return (apis or [root.pid]), engines


class Meter:
    """CPU seconds of the API servers (all threads, the loop thread) and the engine cores over a block of work,
    the API servers' idle rate taken off."""

    def __init__(self, server: Server):
        self.apis, self.engines = roles(server)
        self.idle_per_s = 0.0
        t0, a0 = time.monotonic(), self._api()
        time.sleep(3.0)
        self.idle_per_s = (self._api() - a0) / (time.monotonic() - t0)

    def _api(self, main_only: bool = False) -> float:
        return sum(thread_ns(p, main_only) for p in self.apis) * 1e-9

    def _engine(self) -> float:
        return sum(thread_ns(p) for p in self.engines) * 1e-9

    def measure(self, work: Any) -> dict[str, float]:
        a0, l0, e0, t0 = self._api(), self._api(True), self._engine(), time.monotonic()
        work()
        wall = time.monotonic() - t0
        idle = self.idle_per_s * wall
        return {
            "api_s": self._api() - a0 - idle,
            "loop_s": self._api(True) - l0 - idle,
            "engine_s": self._engine() - e0,
            "wall_s": wall,
        }


# ---------------------------------------------------------------------------- requests
def post(server: Server, path: str, body: bytes, timeout: float = 600.0) -> bytes:
    req = urllib.request.Request(
        server.url + path, body, {"Content-Type": "application/json", "Authorization": f"Bearer {server.api_key}"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


def usage(sse: bytes) -> dict:
    for line in reversed(sse.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage":{' in line:
            return dict(json.loads(line[6:])["usage"])
    raise RuntimeError(f"no usage chunk in the stream: {sse[-300:]!r}")


def body(server: Server, kind: str, prompt: list[int] | str, max_tokens: int) -> bytes:
    b: dict[str, Any] = {
        "model": server.model,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if kind == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    return json.dumps(b).encode()


def master_tokens(server: Server, n: int) -> list[int]:
    """At least ``n`` token ids of seeded pseudo-words, as the served tokenizer makes them."""
    rng = random.Random(0)
    syll = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    text = " ".join(rng.choice(words) for _ in range(n))  # >= 1 token a word
    out = json.loads(
        post(
            server,
            "/tokenize",
            json.dumps({"model": server.model, "prompt": text, "add_special_tokens": False}).encode(),
        )
    )
    return list(out["tokens"])[:n]


def detokenize(server: Server, ids: list[int]) -> str:
    return str(
        json.loads(post(server, "/detokenize", json.dumps({"model": server.model, "tokens": ids}).encode()))["prompt"]
    )


# ---------------------------------------------------------------------------- phases
def prompt_sweep(server: Server, meter: Meter, lengths: list[int], repeats: int) -> list[dict]:
    ids = master_tokens(server, max(lengths))
    texts = {n: detokenize(server, ids[:n]) for n in lengths}
    rows = []
    for kind in KINDS:
        for n in sorted(lengths, reverse=True):  # the longest first: its prefill caches the shorter prompts
            raw = body(server, kind, ids[:n] if kind == "ids" else texts[n], 1)
            prompt_tokens = usage(post(server, PATHS[kind], raw))["prompt_tokens"]  # warm-up, not measured
            reps = [meter.measure(lambda raw=raw, kind=kind: post(server, PATHS[kind], raw)) for _ in range(repeats)]
            rows.append(
                {
                    "kind": kind,
                    "prompt_tokens": prompt_tokens,
                    "body_bytes": len(raw),
                    **{k: [r[k] for r in reps] for k in reps[0]},
                }
            )
            print(
                f"  {kind:4} {prompt_tokens:>7,} tokens: API server "
                f"{statistics.median(rows[-1]['api_s']) * 1e3:8.2f} ms",
                flush=True,
            )
    return rows


def parallel(server: Server, raw: bytes, path: str, streams: int, per_stream: int) -> None:
    with ThreadPoolExecutor(streams) as pool:
        list(pool.map(lambda _: [post(server, path, raw) for _ in range(per_stream)], range(streams)))


def chunk_sweep(server: Server, meter: Meter, repeats: int, decode: int = 256) -> list[dict]:
    ids = master_tokens(server, 128)
    rows = []
    for streams in STREAMS:
        for max_tokens in (1, decode + 1):
            raw = body(server, "ids", ids, max_tokens)
            post(server, PATHS["ids"], raw)  # warm-up (prefix cache)
            reps = [
                meter.measure(lambda raw=raw, s=streams: parallel(server, raw, PATHS["ids"], s, 1))
                for _ in range(repeats)
            ]
            rows.append({"streams": streams, "max_tokens": max_tokens, **{k: [r[k] for r in reps] for k in reps[0]}})
    return rows


def api_server_scaling(tmp: Path, model: Path, lengths: int, requests: int) -> dict:
    """4 concurrent ``lengths``-token text prompts through 1 and 2 API servers (a fresh engine each)."""
    res: dict[str, Any] = {}
    for count in (1, 2):
        srv = start_real(str(model), tmp / f"scale{count}", engine_flags(count))
        try:
            try:
                srv.wait_ready(600)
            except SystemExit as exc:
                res[str(count)] = {"error": str(exc).splitlines()[0] + " ... " + srv.log_tail()[-400:]}
                continue
            meter = Meter(srv)
            ids = master_tokens(srv, lengths)
            raw = body(srv, "text", detokenize(srv, ids), 1)
            post(srv, PATHS["text"], raw)  # warm-up (prefix cache)
            m = meter.measure(lambda raw=raw, srv=srv: parallel(srv, raw, PATHS["text"], 4, requests // 4))
            res[str(count)] = {
                "api_processes": len(meter.apis),
                "req_per_s": requests / m["wall_s"],
                "api_ms_per_request": m["api_s"] / requests * 1e3,
                **m,
            }
        finally:
            srv.stop()
    return res


# ---------------------------------------------------------------------------- figures
def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(intercept), float(slope)


def summarize(sweep: list[dict], chunks: list[dict], decode: int) -> dict:
    med = statistics.median
    fits = {}
    for kind in KINDS:
        rs = [r for r in sweep if r["kind"] == kind]
        for what in ("api_s", "loop_s"):
            a, b = fit_line([r["prompt_tokens"] for r in rs], [med(r[what]) for r in rs])
            fits[f"{kind}.{what}"] = {"request_us": a * 1e6, "us_per_token": b * 1e6}
    by = {(r["streams"], r["max_tokens"]): r for r in chunks}
    chunk = {}
    for s in STREAMS:
        one, many = by[s, 1], by[s, decode + 1]
        chunk[str(s)] = {  # per decode step: every stream gets one token (one chunk) a step
            "api_us_per_step": (med(many["api_s"]) - med(one["api_s"])) / decode * 1e6,
            "loop_us_per_step": (med(many["loop_s"]) - med(one["loop_s"])) / decode * 1e6,
            "step_ms": (med(many["wall_s"]) - med(one["wall_s"])) / decode * 1e3,
        }
    streams = [float(s) for s in STREAMS]
    per_step = {}
    for what in ("api_us_per_step", "loop_us_per_step", "step_ms"):
        a, b = fit_line(streams, [chunk[str(s)][what] for s in STREAMS])
        per_step[what] = {"per_step": a, "per_stream": b}
    return {
        "fits": fits,
        "chunks": chunk,
        "per_step": per_step,
        "chunk_us": per_step["api_us_per_step"]["per_stream"],
        "step_us": per_step["api_us_per_step"]["per_step"],
        "seq_us_upper_bound": per_step["step_ms"]["per_stream"] * 1e3,
    }


def report(res: dict) -> str:
    med = statistics.median
    lines = [f"command: {res['command']}", f"machine: {res['machine']}; vLLM {res['vllm']}; {res['date']}", ""]
    rows = []
    for r in res["sweep"]:
        api = [x * 1e3 for x in r["api_s"]]
        rows.append(
            [
                r["kind"],
                f"{r['prompt_tokens']:,}",
                number(med(api), ".2f"),
                f"{min(api):.2f}-{max(api):.2f}",
                number(med(r["loop_s"]) * 1e3, ".2f"),
                number(med(r["engine_s"]) * 1e3, ".1f"),
                number(med(r["wall_s"]) * 1e3, ".1f"),
            ]
        )
    lines.append("1. one request at a time, max_tokens 1 (median of the repeats; ms)")
    lines.append(
        render(["prompt", "tokens", "API CPU", "spread", "loop thread", "engine CPU", "client wall"], rows, rule=True)
    )
    lines += ["", "   least-squares line per kind: per-request constant + per prompt token"]
    frows = [[k, number(f["request_us"], ",.0f"), number(f["us_per_token"], ".3f")] for k, f in res["fits"].items()]
    lines.append(render(["kind.cpu", "request (us)", "us / token"], frows, rule=True))
    lines += ["", "2. streamed chunks (128-token id prompt, 256 extra tokens, ignore_eos): per decode step"]
    crow = [
        [s, number(c["api_us_per_step"], ",.0f"), number(c["loop_us_per_step"], ",.0f"), number(c["step_ms"], ".2f")]
        for s, c in res["chunks"].items()
    ]
    lines.append(render(["streams", "API CPU (us)", "loop thread (us)", "step wall (ms)"], crow, rule=True))
    ps = res["per_step"]
    lines.append(
        f"   line over streams: API server {ps['api_us_per_step']['per_step']:,.0f} us per step + "
        f"{ps['api_us_per_step']['per_stream']:,.1f} us per chunk (loop thread "
        f"{ps['loop_us_per_step']['per_step']:,.0f} + {ps['loop_us_per_step']['per_stream']:,.1f})"
    )
    lines.append(
        f"   engine step wall {ps['step_ms']['per_step']:.2f} ms + {res['seq_us_upper_bound']:.0f} us per "
        "sequence: an upper bound of the scheduler's per-sequence cost (the tiny model's compute is in it)"
    )
    if res.get("api_servers"):
        lines += ["", "3. --api-server-count: 4 concurrent 32K-token text prompts, max_tokens 1"]
        srows = []
        for c, r in res["api_servers"].items():
            if "error" in r:
                srows.append([c, "-", "-", "-", r["error"][:120]])
            else:
                srows.append(
                    [c, r["api_processes"], number(r["req_per_s"], ".2f"), number(r["api_ms_per_request"], ".1f"), ""]
                )
        lines.append(render(["count", "processes", "req/s", "API ms/request", "note"], srows, rule=True))
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    med = statistics.median
    colors = {"ids": "#4c72b0", "text": "#dd8452", "chat": "#55a868"}
    lengths = sorted({r["prompt_tokens"] for r in res["sweep"] if r["kind"] == "ids"})
    labels = [f"{n // 1024}K" if n >= 1024 else str(n) for n in lengths]
    series = []
    for i, kind in enumerate(KINDS):
        rs = sorted((r for r in res["sweep"] if r["kind"] == kind), key=lambda r: r["prompt_tokens"])
        series.append(
            plots.Series(
                [med(r["api_s"]) * 1e3 for r in rs], kind, color=colors[kind], offset=(i - 1) * 0.27, width=0.27
            )
        )
    p1 = plots.Panel(
        labels,
        series,
        title="API-server CPU per request (max_tokens 1)",
        value_label="ms",
        axis_label="prompt tokens",
        log=True,
        grid=True,
    )
    ch = res["chunks"]
    p2 = plots.Panel(
        list(ch),
        [
            plots.Series([c["api_us_per_step"] for c in ch.values()], "API server"),
            plots.Series(
                [c["loop_us_per_step"] for c in ch.values()], "loop thread", color="#c44e52", kind="points", size=6
            ),
        ],
        title="API-server CPU per decode step (one chunk per stream)",
        value_label="us",
        axis_label="concurrent streams",
        grid=True,
    )
    plots.write(path, [p1, p2], size=(10.0, 4.0), columns=2, title=f"vLLM {res['vllm']} API server, {res['machine']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1024,8192,32768,131072", help="prompt lengths, tokens (comma-separated)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-api-servers", action="store_true", help="skip the --api-server-count phase")
    ap.add_argument("--out", type=Path, default=output("frontend_costs"))
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    if max(lengths) > MAX_MODEL_LEN - 64:
        raise SystemExit(f"--lengths: at most {MAX_MODEL_LEN - 64} tokens (the engine's --max-model-len)")
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    res: dict[str, Any] = {
        "command": command(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{psutil.cpu_count()} cores, {_cpu_model()} (shared)",
        "vllm": found.version if found else "-",
    }
    decode = 256
    with tempfile.TemporaryDirectory(prefix="frontend-costs-") as d:
        tmp = Path(d)
        model = long_context_model(tmp)
        with start_real(str(model), tmp / "engine", engine_flags()) as srv:
            print(f"engine ready in {srv.wait_ready(600):.0f} s", flush=True)
            meter = Meter(srv)
            res["idle_api_cpu_per_s"] = meter.idle_per_s
            print("1. prompt lengths", flush=True)
            res["sweep"] = prompt_sweep(srv, meter, lengths, a.repeats)
            print("2. streamed chunks", flush=True)
            res["chunk_runs"] = chunk_sweep(srv, meter, a.repeats, decode)
        res.update(summarize(res["sweep"], res["chunk_runs"], decode))
        if not a.no_api_servers:
            print("3. --api-server-count 1 vs 2", flush=True)
            res["api_servers"] = api_server_scaling(tmp, model, 32_768, 16)
    text = report(res)
    print(text)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    a.out.with_suffix(".txt").write_text(text + "\n")
    plot(res, a.out.with_suffix(".png"))
    print(f"wrote {a.out}, {a.out.with_suffix('.txt')}, {a.out.with_suffix('.png')}")
    return 0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
