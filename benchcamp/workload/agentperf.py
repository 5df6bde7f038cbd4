"""AA-AgentPerf replays (agentperf-local's package data) as benchcamp workloads.

agentperf-local (Artificial Analysis, Apache-2.0; https://pypi.org/project/agentperf-local/)
ships its recorded agent trajectories as plain files: ``data/replays/<replay>/manifest*.json``
lists the tasks, and ``traces/<task>.jsonl`` has one line per model call (turn): the full chat
``messages`` and ``tools`` sent, ``target_output_tokens``, ``simulated_tool_delay_ms_after`` (the
recorded tool time before the next turn) and, in recorded replays, ``recorded_prompt_tokens``,
``recorded_completion_tokens`` and ``recorded_model_duration_ms``. `make agentperf-data`
(scripts/agentperf_local/fetch.sh) downloads the pinned wheel and unpacks those files; the
files themselves are not part of benchcamp.

Each task becomes one session, each turn one request, with both replays in one workload:

* text: the ``chat`` column holds ``{"messages", "tools"}`` exactly as recorded, sent to
  ``/v1/chat/completions`` as is (``load.api: chat``); a real server tokenizes it itself.
* token ids: ``prompt_len`` = ``recorded_prompt_tokens`` (the estimate of
  ``benchcamp.workload.tokencount`` where a replay has no recorded counts, e.g. aa-mini-v1), and
  ``blocks`` give the prefix the turns share: a turn's messages extend the previous turn's,
  so its leading tokens up to the shared messages' count (the estimate's share of the turn,
  scaled to the recorded count) reuse the previous turn's block ids.

``output_len`` = ``target_output_tokens``; ``think_s`` = the previous turn's
``simulated_tool_delay_ms_after`` / 1000 (0 for a task's first turn).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchcamp.errors import TraceError
from benchcamp.workload.model import Request, Session, Workload

AGENTPERF_VERSION = "0.3.4"
AGENTPERF_BLOCK_SIZE = 16
DEFAULT_VOCAB_SIZE = 32000
REPLAYS = ("agentperf-default-v1", "aa-mini-v1")
FETCH_HINT = "run `make agentperf-data` (scripts/agentperf_local/fetch.sh) or give --from FOLDER"


def cache_root() -> Path:
    home = os.environ.get("BENCHCAMP_AGENTPERF_HOME") or str(Path.home() / ".cache/benchcamp/agentperf-local")
    return Path(home) / AGENTPERF_VERSION / "agentperf_local/data/replays"


def find_replays(folder: str | Path | None = None) -> Path | None:
    """The folder holding the replays: ``folder``; else the installed agentperf-local package's;
    else the cache `make agentperf-data` fills. None when none has them."""
    if folder is not None:
        return Path(folder)
    try:
        import importlib.util

        spec = importlib.util.find_spec("agentperf_local")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / "data/replays"
            if p.is_dir():
                return p
    p = cache_root()
    return p if p.is_dir() else None


@dataclass
class Turn:
    task_id: str
    body: dict[str, Any]  # {"messages", "tools"} (no "tools" when the turn has none)
    target_output_tokens: int
    delay_after_s: float
    recorded_prompt_tokens: int | None
    recorded_completion_tokens: int | None


def _manifest(replay_dir: Path) -> tuple[Path, dict[str, Any]]:
    for name in ("manifest.json", "manifest-x86_64.json"):
        p = replay_dir / name
        if p.exists():
            return p, json.loads(p.read_text())
    raise TraceError(f"{replay_dir}: no manifest.json (or manifest-x86_64.json): not an agentperf-local replay")


def read_turns(replay_dir: Path) -> dict[str, list[Turn]]:
    """task id -> its turns in order, as the replay's manifest lists the tasks."""
    mpath, manifest = _manifest(replay_dir)
    tasks = manifest.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise TraceError(f"{mpath}: no tasks listed")
    out: dict[str, list[Turn]] = {}
    for t in tasks:
        trace = replay_dir / str(t.get("trace", ""))
        if not trace.is_file():
            raise TraceError(f"{mpath}: task {t.get('task_id')!r}: trace {trace} not found")
        turns: list[Turn] = []
        for no, line in enumerate(trace.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{trace.name} line {no}"
            try:
                d = json.loads(line)
                msgs, tools = d["messages"], d.get("tools") or []
                out_tokens = int(d.get("target_output_tokens") or d["max_output_tokens"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise TraceError(f"{where}: not an agentperf-local turn ({type(exc).__name__}: {exc})") from None
            if not isinstance(msgs, list) or not msgs or out_tokens < 1:
                raise TraceError(f"{where}: needs a non-empty messages list and target_output_tokens >= 1")
            rp = d.get("recorded_prompt_tokens")
            rc = d.get("recorded_completion_tokens")
            turns.append(
                Turn(
                    str(d.get("task_id") or t["task_id"]),
                    {"messages": msgs, **({"tools": tools} if tools else {})},
                    out_tokens,
                    float(d.get("simulated_tool_delay_ms_after") or 0.0) / 1000.0,
                    int(rp) if rp is not None else None,
                    int(rc) if rc is not None else None,
                )
            )
        if not turns:
            raise TraceError(f"{trace}: no turns")
        out[str(t["task_id"])] = turns
    return out


def _shared_messages(prev: list[Any], cur: list[Any]) -> int:
    n = 0
    for a, b in zip(prev, cur):
        if a != b:
            break
        n += 1
    return n


def read_agentperf(replay: str = "agentperf-default-v1", folder: str | Path | None = None) -> Workload:
    """The replay ``replay`` (a name under the replays folder, or a replay folder's path)."""
    from benchcamp.workload.tokencount import Estimate

    root = find_replays(folder)
    replay_dir = Path(replay) if Path(replay).is_dir() else (root / replay if root is not None else None)
    if replay_dir is None or not replay_dir.is_dir():
        raise FileNotFoundError(f"agentperf-local replay {replay!r} not found; {FETCH_HINT}")
    tasks = read_turns(replay_dir)
    est = Estimate()
    bs = AGENTPERF_BLOCK_SIZE
    sessions: list[Session] = []
    recorded = estimated = 0
    digest = hashlib.sha256()
    for si, (task_id, turns) in enumerate(tasks.items()):
        next_block = si << 40  # block ids unique across tasks
        prev_blocks: tuple[int, ...] = ()
        prev_msgs: list[Any] = []
        prev_len = 0
        reqs: list[Request] = []
        for i, t in enumerate(turns):
            msgs, tools = t.body["messages"], t.body.get("tools")
            counts = est.chat_counts(msgs, tools)
            est_total = max(1, sum(n for _, n in counts))
            if t.recorded_prompt_tokens is not None:
                n, recorded = t.recorded_prompt_tokens, recorded + 1
            else:
                n, estimated = est_total, estimated + 1
            k = _shared_messages(prev_msgs, msgs)
            shared = 0
            if i and k:
                # tools piece + the k shared messages, scaled to this turn's count
                shared_est = sum(c for _, c in counts[: 1 + k])
                shared = min(round(shared_est * n / est_total), prev_len, n - 1)
            keep = shared // bs
            new = -(-n // bs) - keep
            blocks = prev_blocks[:keep] + tuple(range(next_block, next_block + new))
            next_block += new
            chat = json.dumps(t.body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            digest.update(chat.encode())
            think = turns[i - 1].delay_after_s if i else 0.0
            reqs.append(Request(i, blocks, n, t.target_output_tokens, think, chat))
            prev_blocks, prev_msgs, prev_len = blocks, msgs, n
        sessions.append(Session(task_id, reqs))
    meta = {
        "source": "agentperf-local",
        "agentperf_version": AGENTPERF_VERSION,
        "replay": replay_dir.name,
        "replay_sha256": digest.hexdigest(),
        "prompt_tokens": "recorded" if not estimated else ("estimated" if not recorded else "mixed"),
        "license": "agentperf-local replay data: Apache-2.0, Artificial Analysis",
    }
    return Workload(replay_dir.name, bs, DEFAULT_VOCAB_SIZE, sessions, meta)
