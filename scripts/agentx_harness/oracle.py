"""The AgentX harness as an oracle: run its own trace models and loader on trace paths, print JSON.

Runs inside the harness's venv (scripts/agentx_harness/fetch.sh), never benchcamp's: it imports
``aiperf.dataset.loader.weka_trace`` from ``agentx-harness`` and nothing of benchcamp.

stdin: a JSON list of paths (a trace file or a folder of them, as the harness's loader takes it).
stdout: a JSON list, one entry per path: ``{"ok": false, "error": "..."}`` when the harness rejects
it (its load_dataset or convert_to_conversations raised), else ``{"ok": true, "structure": {...}}``.

The loader runs whole: ``load_dataset`` (schema, duplicate trace ids), ``convert_to_conversations``
(preamble split, flat fan-out chains, subagent chains, tiered joins, model map, cross-stream
dependencies, the orchestrator's validation). Only its prompt synthesis is stubbed (``_Prompts``):
it turns hash ids into token ids from a text corpus and a tokenizer, which changes no structure and
would need ``transformers`` and a tokenizer download.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from aiperf.common import random_generator as rng
from aiperf.common.hash_id_random_generator import HashIdRandomGenerator
from aiperf.dataset.loader.weka_trace import WekaTraceLoader

SERVED = ["served-main", "served-other"]  # endpoint.model_names for the model map


class _Tokenizer:
    def decode(self, tokens):
        return " ".join(f"w{t}" for t in tokens)


class _Prompts:
    """What the loader reads of a PromptGenerator: a corpus of token ids and a decoder."""

    def __init__(self) -> None:
        self._tokenized_corpus = list(range(1, 4097))
        self._corpus_size = len(self._tokenized_corpus)
        self._cache: dict = {}
        self._hash_id_corpus_rng = HashIdRandomGenerator.from_base_rng(rng.derive("benchcamp.oracle"))
        self._bpe_stable_terminator_tokens: list[int] = []
        self.tokenizer = _Tokenizer()


def _loader(path: str) -> WekaTraceLoader:
    ld = WekaTraceLoader.__new__(WekaTraceLoader)  # __init__ reads a BenchmarkRun; set what it would
    ld._path = Path(path)
    ld.prompt_generator = _Prompts()
    ld._configured_model_names = list(SERVED)
    ld._max_isl = ld._max_osl = ld._max_context_length = None
    ld._ignore_trace_delays = ld._use_think_time_only = False
    ld._inter_turn_delay_cap_seconds = None
    ld._fixed_schedule_start_offset = ld._fixed_schedule_end_offset = None
    ld._tokenizer_name, ld._trust_remote_code, ld._tokenizer_revision = "stub", False, None
    ld._user_block_size_override = None
    ld._block_size = 64
    from aiperf.common.environment import Environment
    from aiperf.dataset.loader._delay_cap import DelayCapTracker

    ld._delay_cap_tracker = DelayCapTracker(cap_seconds=None)
    ld._tool_shaped_messages = Environment.DATASET.WEKA_TOOL_SHAPED_MESSAGES
    ld._path_is_file = True
    return ld


def _kind(sid: str) -> str:
    if "::sa:" in sid:
        return "sub_aux" if ":aux:" in sid.split("::sa:", 1)[1] else "subagent"
    if "::aux:" in sid:
        return "aux"
    if "::fa:" in sid or "::wg:" in sid:
        return "chain"
    return "main"


def structure(convs, data) -> dict:
    """Per trace: its conversations by kind, turns (and each one's served model), joins, background branches,
    dependencies (counted, and each edge), model map."""
    out: dict = {}
    for c in convs:
        tid = c.session_id if c.is_root else c.parent_conversation_id
        t = out.setdefault(tid, {"sessions": {}, "branches": [], "dependencies": 0, "edges": []})
        t["sessions"][c.session_id] = {
            "kind": _kind(c.session_id),
            "turns": len(c.turns),
            "models": [x.model for x in c.turns],
            "in": [x.source_outer_idx for x in c.turns] if c.is_root else None,
        }
        t["dependencies"] += sum(len(x.replay_predecessors or []) for x in c.turns)
        t["edges"] += [  # [conversation, turn, predecessor's conversation, its turn]: the replay gates on these
            [c.session_id, k, p.conversation_id, p.turn_index] for k, x in enumerate(c.turns) for p in x.replay_predecessors
        ]
        if c.is_root:
            joins = {p.branch_id: k for k, x in enumerate(c.turns) for p in x.prerequisites}
            spawns = {b: k for k, x in enumerate(c.turns) for b in x.branch_ids}
            for b in c.branches:
                t["branches"].append(
                    {
                        "children": sorted(b.child_conversation_ids),
                        "spawn_turn": spawns.get(b.branch_id),
                        "join_turn": joins.get(b.branch_id),
                        "background": b.is_background,
                    }
                )
    return out


def run(path: str) -> dict:
    ld = _loader(path)
    try:
        data = ld.load_dataset()
        ld._path = None  # its file-backed filter-then-cap reads run.cfg; with no filters set it keeps all
        convs = ld.convert_to_conversations(data)
    except Exception as exc:  # the harness's rejection, whatever its type
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    maps = {tid: ld._build_model_map(w[0]) for tid, w in data.items()}
    s = structure(convs, data)
    for tid in s:
        s[tid]["model_map"] = maps.get(tid, {})
        s[tid]["edges"].sort()
    return {"ok": True, "structure": s}


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)
    rng.init(7)
    paths = json.load(sys.stdin)
    res = []
    for p in paths:
        try:
            res.append(run(p))
        except Exception:
            res.append({"ok": False, "error": "oracle crash: " + traceback.format_exc()[-1500:]})
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
