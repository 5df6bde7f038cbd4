"""agentperf-local (AA-AgentPerf's local client) and benchcamp on the same server, side by side.

    uv run --frozen python bench/agentperf_side_by_side.py [--engine simulated|real]
        [--replay agentperf-default-v1] [--turns N] [--tool-choice none|auto]
        [--out bench/results/agentperf_side_by_side/agentperf_side_by_side.json]

Both clients replay the same recorded trajectories (agentperf-local 0.3.4's package data; with
``--turns N`` each task's first N turns, written as a replay folder both read) against a fresh
engine each (same flags, so neither finds the other's prefixes cached):

- agentperf-local 0.3.4 (``agentperf-local run``, Python >= 3.12, its own venv under
  ~/.cache/benchcamp/peers/ via bench/common/peers.py): one agent, the tasks one after another
  (its only mode: the replay is sequential), ``--output-token-policy exact`` (ignore_eos, each
  turn its recorded length), ``--tool-mode fixed_delay`` (the recorded tool time between turns),
  ``--no-cache-isolation`` (no namespace prefix: the same prompts as benchcamp's).
- benchcamp: ``benchcamp workload import-agentperf`` of the same folder, text replay
  (``load.api=chat``: the recorded ``messages`` and ``tools`` as is), closed loop at concurrency
  1 (the same one agent, tasks in the same order, the tool time as think time), stopped after
  the replay's turn count (records of a recycled session, ``~1``, are dropped).

``--tool-choice none`` (default; agentperf-local's own advice for exact-length runs on vLLM)
adds ``"tool_choice": "none"`` to both clients' requests, so every turn streams text. With
``auto`` the recorded requests go as they are and a server with tool calling (the simulated
engine) answers each with ``tool_calls``: agentperf-local's output speed then has no turn to
measure (it excludes tool-call turns) and reads ``-``.

agentperf-local counts output tokens with tiktoken's ``o200k_base`` when the server reports no
usage, and loads that encoding at start-up (it downloads it). Offline, bench/common/peers.py rebuilds
``o200k_base.tiktoken`` from the npm registry's ``tiktoken`` package
(``encoders/o200k_base.json``, pinned version), checks the sha256 tiktoken pins
(tiktoken_ext/openai_public.py), and places it in a private TIKTOKEN_CACHE_DIR under the name
tiktoken/load.py looks for (sha1 of the blob URL).

Definitions (agentperf-local's, computed from each client's per-request records with one
function; the table says which rows are agentperf's own headline figures):

- TTFT: request start -> first output chunk; p50 and p95 linear-interpolated (agentperf's
  ``common/statistics.percentile``: numpy's default "linear" is the same). Where the clock
  starts differs: agentperf-local takes ``started_at`` before its client builds the body
  (``request.body()``, ``orjson.dumps``) and httpx opens the stream (replay/runner.py
  ``_run_turn``); benchcamp builds the body ahead and stamps ``sent_s`` at the send. So
  agentperf's TTFT carries its own client's per-request cost (seen: ~2-3 ms here, on a loaded
  2-core box), which shows as a ratio on millisecond TTFTs and vanishes on real ones.
- Sampling: benchcamp's requests carry agentperf-local's standard sampling (temperature 0.7,
  top_p 0.8, top_k 20, min_p 0; on the real engine temperature 0 for both, ``--temperature``:
  greedy, so both clients get the same text) and, with ``--tool-choice none``, its ``tool_choice``; both force
  the recorded length (agentperf: ``ignore_eos`` + ``max_tokens``; benchcamp: also ``min_tokens``).
- Known open problem, real CPU vLLM only (aa-mini-v1, 6 turns): agentperf-local's TTFT p50
  (first non-empty delta) came out 0.5-0.9 s against benchcamp's 31-54 ms in 3 of 4 runs (38 vs
  40 ms in the other), at temperature 0.7 and at 0, with its TPOT p50 near 0 (the visible text
  arriving in a burst) while E2E, end-to-end tok/s, prompt tokens and cache hit agree within
  ~7%. Not seen on the simulated engine. The cause (what each client counts as the first
  token on vLLM's stream, or when agentperf's reads are stamped) is not established.
- Output speed (agentperf's ``output_tokens_per_second``): pooled over successful turns that
  returned no tool calls and have >= 2 output tokens: sum(out - 1) / sum(last - first output
  chunk). benchcamp's records give the same (first/last token times, completion tokens).
- End-to-end output tok/s (agentperf's ``end_to_end_output_tokens_per_second``):
  sum(out) / sum(request durations).
- TPOT: per request (last - first token) / (out - 1), p50/p95 (agentperf reports no TPOT; it
  is computed from its turns.jsonl).
- Cache hit: client side, sum(cached prompt tokens) / sum(prompt tokens) from the usage both
  clients record; server side, the /metrics prefix-cache counters' delta over each run.
- benchcamp's own window throughput (output tokens of requests sent in the window / window)
  is printed apart: agentperf has no such figure.
- Agents at the tier: agentperf-local measures one agent and reports no concurrency figure
  (AA's hosted benchmark finds the most concurrent agents meeting a tier). The table gives,
  for both clients, whether one agent meets AA-AgentPerf's easiest tier (per-agent output
  speed >= 20 tok/s, TTFT p50 <= 10 s) by agentperf's definitions: 1 if so, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import plots, tables
from bench.common.paths import output
from bench.common.peers import AGENTPERF_VERSION, agentperf_exe, python312, tiktoken_cache
from bench.common.runs import benchcamp_cli, benchcamp_point
from bench.common.servers import Server, cache_delta, engine, http, scrape
from bench.common.stats import pct, succeeded

# agentperf-local's "standard" sampling (replay/config.py STANDARD_*), sent by benchcamp too: on a
# real model the sampled text decides when the first visible token arrives
AGENTPERF_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}
TIER = {"output_tok_s": 20.0, "ttft_s": 10.0}  # AA-AgentPerf's easiest service tier


# ---------------------------------------------------------------------------- the replay
def replay_source(name: str) -> Path:
    from benchcamp.workload.agentperf import find_replays

    root = find_replays()
    if root is None or not (root / name).is_dir():
        raise SystemExit(f"agentperf-local replays not found: run `make agentperf-data` ({name})")
    return root / name


def write_replay(src: Path, dst: Path, turns: int | None) -> tuple[Path, int]:
    """A replay folder both clients read: each task's first ``turns`` turns (all: None), the
    manifest's counts (model calls, tool calls) to match. Returns (its manifest, turn count)."""
    dst.mkdir(parents=True, exist_ok=True)
    man_name = "manifest-x86_64.json" if (src / "manifest-x86_64.json").exists() else "manifest.json"
    man = json.loads((src / man_name).read_text())
    for p in src.iterdir():  # everything but the traces and manifests, as links
        if p.name not in ("traces",) and not p.name.startswith("manifest"):
            (dst / p.name).symlink_to(p.resolve())
    (dst / "traces").mkdir(exist_ok=True)
    n = 0
    for task in man["tasks"]:
        rows = (src / task["trace"]).read_text().splitlines()
        rows = [r for r in rows if r.strip()][: turns or None]
        n += len(rows)
        (dst / task["trace"]).write_text("\n".join(rows) + "\n")
        task["model_calls"] = len(rows)
        if "tool_calls" in task:  # agentperf-local checks it against the kept turns' recorded tool calls
            task["tool_calls"] = sum(len(json.loads(r).get("recorded_tool_calls_after") or []) for r in rows)
    for name in ("manifest-x86_64.json", "manifest-arm64.json", "manifest.json"):
        if (src / name).exists():
            (dst / name).write_text(json.dumps(man, indent=1))
    return dst / man_name, n


# ---------------------------------------------------------------------------- statistics (one function, both clients)
def stats(
    ttft_s: np.ndarray,
    first_s: np.ndarray,
    last_s: np.ndarray,
    dur_s: np.ndarray,
    out: np.ndarray,
    prompt: np.ndarray,
    cached: np.ndarray,
    tool_turn: np.ndarray,
) -> dict[str, float]:
    """agentperf-local's definitions over one client's successful turns (arrays aligned)."""
    gen = last_s - first_s
    meas = (~tool_turn) & (out >= 2) & (gen > 0)
    pooled = float(np.sum(out[meas] - 1) / np.sum(gen[meas])) if meas.any() else float("nan")
    tpot = np.where(out > 1, gen / np.maximum(out - 1, 1), np.nan)
    tpot = tpot[np.isfinite(tpot)]
    res = {
        "turns": int(len(out)),
        "prompt_tokens_mean": float(np.mean(prompt)) if len(prompt) else float("nan"),
        "output_tokens": float(np.sum(out)),
        "tool_call_turns": int(np.sum(tool_turn)),
        "output_tok_s_pooled": pooled,
        "output_tok_s_e2e": float(np.sum(out) / np.sum(dur_s)) if np.sum(dur_s) > 0 else float("nan"),
        "ttft_p50_ms": pct(ttft_s, 50) * 1e3,
        "ttft_p95_ms": pct(ttft_s, 95) * 1e3,
        "ttft_mean_ms": float(np.mean(ttft_s) * 1e3) if len(ttft_s) else float("nan"),
        "tpot_p50_ms": pct(tpot, 50) * 1e3,
        "tpot_p95_ms": pct(tpot, 95) * 1e3,
        "e2e_p50_ms": pct(dur_s, 50) * 1e3,
        "cache_hit_client": float(np.sum(cached) / np.sum(prompt)) if np.sum(prompt) > 0 else float("nan"),
    }
    res["agents_at_tier"] = float(
        np.isfinite(pooled) and pooled >= TIER["output_tok_s"] and res["ttft_p50_ms"] <= TIER["ttft_s"] * 1e3
    )
    return res


# ---------------------------------------------------------------------------- agentperf-local
def run_agentperf(server: Any, manifest: Path, n: int, tmp: Path, tool_choice: str, timeout_s: float) -> dict[str, Any]:
    exe = agentperf_exe()
    if exe is None:
        return {"client": f"agentperf-local {AGENTPERF_VERSION}", "error": "needs Python >= 3.12 (none found): skipped"}
    out_dir = tmp / "agentperf-out"
    argv = [
        str(exe),
        "run",
        str(manifest),
        "--base-url",
        server.url + "/v1",
        "--model",
        server.model,
        "--output-dir",
        str(out_dir),
        "--output-token-policy",
        "exact",
        "--tool-mode",
        "fixed_delay",
        "--no-cache-isolation",
        "--no-progress",
        "--no-power",
        "--timeout-seconds",
        str(int(timeout_s)),
    ]
    if tool_choice == "none":
        argv += ["--tool-choice", "none"]
    if AGENTPERF_SAMPLING["temperature"] != 0.7:
        argv += ["--temperature", str(AGENTPERF_SAMPLING["temperature"])]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    tk = tiktoken_cache()
    if tk is not None:
        env["TIKTOKEN_CACHE_DIR"] = str(tk)
    if server.api_key:
        env["BENCHCAMP_PEER_KEY"] = server.api_key
        argv += ["--api-key-env", "BENCHCAMP_PEER_KEY"]
    before = scrape(server)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tmp), timeout=3600)
    wall = time.monotonic() - t
    cache = cache_delta(before, scrape(server))
    turns_f = out_dir / "turns.jsonl"
    if not turns_f.exists():
        return {
            "client": f"agentperf-local {AGENTPERF_VERSION}",
            "error": f"exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}",
        }
    rows = [json.loads(x) for x in turns_f.read_text().splitlines() if x.strip()]
    ok = [r for r in rows if r["success"] and r["timing"]["time_to_first_token_ms"] is not None]

    def col(f):
        return np.asarray([f(r) for r in ok], float)

    ttft = col(lambda r: r["timing"]["time_to_first_token_ms"] / 1e3)
    gen = col(lambda r: (r["timing"]["generation_ms"] or 0.0) / 1e3)
    res = stats(
        ttft,
        ttft,  # first output chunk, relative to the request's start
        ttft + gen,
        col(lambda r: r["timing"]["e2e_latency_ms"] / 1e3),
        col(
            lambda r: (
                r["tokens"]["server_output_tokens"]
                if r["tokens"]["server_output_tokens"] is not None
                else r["tokens"]["local_output_tokens"]
            )
        ),
        col(lambda r: r["tokens"]["server_prompt_tokens"] or 0),
        col(lambda r: r["tokens"]["server_cached_prompt_tokens"] or 0),
        np.asarray([r["response_tool_calls"] > 0 for r in ok], bool),
    )
    summary = json.loads((out_dir / "summary.json").read_text()) if (out_dir / "summary.json").exists() else {}
    lat = summary.get("latency_distributions_ms", {}).get("time_to_first_token", {})
    reported = {
        "output_tokens_per_second": summary.get("output_tokens_per_second"),
        "end_to_end_output_tokens_per_second": summary.get("end_to_end_output_tokens_per_second"),
        "ttft_p50_ms": lat.get("p50"),
        "ttft_p95_ms": lat.get("p95"),
    }
    return {
        "client": f"agentperf-local {AGENTPERF_VERSION}",
        **res,
        "visible_output_tokens": sum(r["tokens"]["local_output_tokens"] or 0 for r in ok),  # tiktoken of the text
        "sent": n,
        "failed": len(rows) - len(ok),
        "cache": cache,
        "wall_s": wall,
        "reported": reported,
        "exit": p.returncode,
    }


# ---------------------------------------------------------------------------- benchcamp
def warm_up(server: Server) -> None:
    """One short chat request before benchcamp's run, as agentperf-local's pre-run probes
    (ignore_eos, context) warm the engine before its replay: a cold CPU vLLM's first request
    is slow, and that turn would otherwise be benchcamp's alone."""
    body = {"model": server.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}
    code, text = http(server.url + "/v1/chat/completions", server.api_key, body, timeout=300)
    if code != 200:
        raise SystemExit(f"warm-up request failed on {server.url}: HTTP {code} {text[:200]!r}")


def run_benchcamp(server: Any, replay: Path, n: int, tmp: Path, tool_choice: str, timeout_s: float) -> dict[str, Any]:
    from benchcamp.loadgen import PointSpec
    from benchcamp.workload.model import read_workload

    wl_path = tmp / "agentperf.parquet"
    benchcamp_cli("workload", "import-agentperf", str(replay), "--out", str(wl_path))
    wl = read_workload(wl_path)
    # the chat column's members go into the body as they are: add what agentperf-local sends
    extra = {**AGENTPERF_SAMPLING, **({"tool_choice": "none"} if tool_choice == "none" else {})}
    for s in wl.sessions:
        s.requests = [
            replace(r, chat=json.dumps({**json.loads(r.chat), **extra}, separators=(",", ":")))
            if r.chat is not None
            else r
            for r in s.requests
        ]
    spec = PointSpec(
        "c1",
        "closed",
        1,
        warmup_s=0.0,
        duration_s=3600.0,
        max_requests=n,
        drain_s=timeout_s,
        request_timeout_s=timeout_s,
        workers=1,
        api="chat",
        prompt="text",
    )
    warm_up(server)
    run = benchcamp_point(server, wl, spec, tmp / "benchcamp")
    res, df = run.result, run.records
    df = df[~df["session_id"].astype(str).str.contains("~")]  # the replay once, no recycled session
    ok = succeeded(df)
    sent = ok["sent_s"].to_numpy(float)
    # a chat request with tools and no tool_choice "none" is answered with tool_calls by the
    # simulated engine; benchcamp's records keep no finish reason, so the request says it
    tool_turn = np.full(len(ok), tool_choice != "none", bool)
    r = stats(
        ok["first_token_s"].to_numpy(float) - sent,
        ok["first_token_s"].to_numpy(float) - sent,
        ok["last_token_s"].to_numpy(float) - sent,
        ok["done_s"].to_numpy(float) - sent,
        ok["completion_tokens"].to_numpy(float),
        ok["prompt_tokens"].to_numpy(float),
        ok["cached_tokens"].to_numpy(float).clip(min=0),
        tool_turn,
    )
    w0, w1 = res.window
    in_win = df[(df["sent_s"] >= w0) & (df["sent_s"] < w1)]
    r["output_tok_s_window"] = (
        float(in_win["completion_tokens"].clip(lower=0).sum() / (w1 - w0)) if w1 > w0 else float("nan")
    )
    return {
        "client": "benchcamp",
        **r,
        "sent": int(len(df)),
        "failed": int(len(df) - len(ok)),
        "cache": run.cache,
        "wall_s": run.wall_s,
    }


# ---------------------------------------------------------------------------- output
ROWS = [
    ("turns completed / sent", None),
    ("mean prompt tokens (server usage)", "prompt_tokens_mean"),
    ("TTFT p50 (ms) [agentperf headline]", "ttft_p50_ms"),
    ("TTFT p95 (ms) [agentperf headline]", "ttft_p95_ms"),
    ("TTFT mean (ms)", "ttft_mean_ms"),
    ("TPOT p50 (ms)", "tpot_p50_ms"),
    ("TPOT p95 (ms)", "tpot_p95_ms"),
    ("E2E p50 (ms)", "e2e_p50_ms"),
    ("output tok/s pooled, text turns [agentperf]", "output_tok_s_pooled"),
    ("output tok/s, sum out / sum E2E", "output_tok_s_e2e"),
    ("cache hit, client usage", "cache_hit_client"),
    ("cache hit, server /metrics", "cache_hit"),
    ("agents at tier (20 tok/s, TTFT p50 10 s)", "agents_at_tier"),
]
fmt = tables.figure_format(",.2f")


def value(r: dict, key: str | None) -> Any:
    return tables.figure(r, key, done="turns")


def table(a: dict, b: dict) -> str:
    lines = tables.compare(ROWS, [a, b], ["agentperf", "benchcamp"], value, fmt, label_width=46, width=13,
                           ratio_width=8).splitlines()
    lines.append(tables.render([], [["output tok/s, window rule (benchcamp only)", "n/a",
                                     fmt(b.get("output_tok_s_window"), "")]], widths=[46, 13, 13]))
    lines.append(
        "Definitions: agentperf-local's, applied to each client's own per-turn records (one function). "
        "TTFT: agentperf's clock starts before its body build and httpx setup, benchcamp's at the send "
        "(body built ahead). Agents at tier: agentperf-local runs one agent; 1 = that agent meets the tier."
    )
    if a.get("reported"):
        lines.append(f"agentperf-local's own summary.json: {json.dumps(a['reported'])}")
    return "\n".join(lines)


def plot(a: dict, b: dict, path: Path, title: str) -> None:
    keys = [(lab, k) for lab, k in ROWS if k and k != "agents_at_tier"]
    ratios = plots.Ratios([lab for lab, _ in keys], [tables.ratio(value(a, k), value(b, k)) or float("nan")
                                                     for _, k in keys])
    panel = ratios.panel("benchcamp / agentperf-local (same replay, same server; dashed: +-5%)",
                         title.replace("; ", ";\n"), annotate=True)
    plots.write(path, [panel], size=(7.5, 4))


def compare(kind: str, replay_name: str, turns: int | None, tool_choice: str, timeout_s: float, dp: int) -> dict:
    """Both clients on ``kind``'s engine (a fresh one each); the rows for ``table``."""
    with tempfile.TemporaryDirectory(prefix="aaside-") as d:
        tmp = Path(d)
        manifest, n = write_replay(replay_source(replay_name), tmp / "replay", turns)
        print(f"replay {replay_name}, {'all' if not turns else f'first {turns}'} turns per task: {n} turns", flush=True)
        rows: dict[str, Any] = {}
        for name, fn in (("agentperf", run_agentperf), ("benchcamp", run_benchcamp)):
            if name == "agentperf" and python312() is None:
                print("agentperf-local needs Python >= 3.12 and none was found (pyenv or PATH): its half is skipped")
                rows[name] = {"client": "agentperf-local", "error": "no Python >= 3.12"}
                continue
            with engine(kind, tmp / f"engine-{name}", dp) as server:
                print(f"{name} on {server.name} ...", flush=True)
                rows[name] = fn(
                    server, manifest if name == "agentperf" else manifest.parent, n, tmp, tool_choice, timeout_s
                )
            if rows[name].get("error"):
                print(f"{name}: {rows[name]['error']}")
    return {"turns": n, **rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["simulated", "real"], default="simulated")
    ap.add_argument("--replay", default="agentperf-default-v1", choices=["agentperf-default-v1", "aa-mini-v1"])
    ap.add_argument("--turns", type=int, default=None, help="each task's first N turns (default: all)")
    ap.add_argument("--tool-choice", choices=["none", "auto"], default="none")
    ap.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="both clients' temperature (default agentperf's 0.7; the real engine: 0, greedy, so both "
        "see the same text and its first visible token at the same place)",
    )
    ap.add_argument("--dp", type=int, default=1, help="simulated engine: data-parallel H200s")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--out", default=None,
                    help="default bench/results/agentperf_side_by_side/agentperf_side_by_side[.real].json")
    a = ap.parse_args()
    temp = a.temperature if a.temperature is not None else (0.0 if a.engine == "real" else 0.7)
    AGENTPERF_SAMPLING["temperature"] = temp
    out = Path(a.out or output("agentperf_side_by_side", "real" if a.engine == "real" else ""))
    rows = compare(a.engine, a.replay, a.turns, a.tool_choice, a.timeout_s, a.dp)
    title = (
        f"{a.replay} ({rows['turns']} turns, tool_choice {a.tool_choice}, temperature {temp:g}) on the {a.engine} engine, one agent; "
        "agentperf-local's definitions from both clients' per-turn records"
    )
    print()
    print(title + ":")
    ag, bc = rows.get("agentperf", {}), rows.get("benchcamp", {})
    txt = table(ag, bc)
    print(txt)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(a), "title": title, "table": txt, **rows}, indent=2, default=str))
    out.with_suffix(".txt").write_text(title + ":\n" + txt + "\n")
    plot(ag, bc, out.with_suffix(".png"), title)
    print(f"\n{out}\n{out.with_suffix('.txt')}\n{out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
