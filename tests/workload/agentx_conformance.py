"""Traces for the conformance tests against SemiAnalysis' AgentX harness (test_agentx_conformance.py):
an edge-case corpus (``agentx_edge/``, written by ``write_edge_corpus``) and seeded random traces
(``random_trace``) with the structures the harness's loader finds (a title-generation preamble,
flattened fan-outs, parallel worker groups, compaction seams, subagents with their own fan-outs, joins
one or several turns later, background children), optionally with one field given a value of
another type (``mutate``), and ``harness_verdicts``: the harness's own loader on many paths in one
subprocess (scripts/agentx_harness/oracle.py in its venv, `make agentx-harness`)."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EDGE = Path(__file__).resolve().parent / "agentx_edge"
ORACLE = REPO / "scripts/agentx_harness/oracle.py"
HARNESS_VERSION = "1.0.12"
SERVED = ["served-main", "served-other"]  # oracle.py's endpoint model names
OPUS, HAIKU, SONNET = "claude-opus-4-5-20251101", "claude-haiku-4-5-20251001", "claude-sonnet-4-5"
BS = 64


def harness_python() -> Path:
    home = os.environ.get("BENCHCAMP_AGENTX_HARNESS_HOME") or str(
        Path.home() / f".cache/benchcamp/peers/agentx-harness-{HARNESS_VERSION}-loader"
    )
    return Path(home) / "bin/python"


def harness_verdicts(paths: list[Path]) -> list[dict]:
    """The harness's loader on each path (one subprocess for all): {"ok", "error" | "structure"}."""
    proc = subprocess.run(
        [str(harness_python()), str(ORACLE)],
        input=json.dumps([str(p) for p in paths]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"oracle.py failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def _req(t: float, model: str, n_in: int, n_out: int, ids: list[int], api: float, kind: str = "n") -> dict:
    return {
        "t": round(t, 3),
        "type": kind,
        "model": model,
        "in": n_in,
        "out": n_out,
        "hash_ids": ids,
        "input_types": ["tool_result"],
        "output_types": ["text"],
        "stop": "tool_use",
        "api_time": round(api, 3),
        "think_time": 0.0,
    }


class _Ids:
    def __init__(self, start: int) -> None:
        self.n = start

    def take(self, k: int) -> list[int]:
        out = list(range(self.n, self.n + k))
        self.n += k
        return out


def random_trace(seed: int) -> dict:
    """A trace in the real format with a random mix of the structures the harness's loader detects."""
    rng = random.Random(seed)
    ids = _Ids(1000)
    prefix = ids.take(2)  # tool_tokens + system_tokens = 128 tokens: 2 blocks every turn 0 starts with
    reqs: list[dict] = []
    t = 0.0
    if rng.random() < 0.4:  # Claude Code's title generation: small, on its own fresh context
        reqs.append(_req(t, HAIKU, rng.randint(100, 400), rng.randint(8, 64), ids.take(rng.randint(1, 5)), 0.4))
        t += 0.1 if rng.random() < 0.5 else 0.6
    ctx = prefix + ids.take(rng.randint(2, 6))
    model = OPUS
    pending_subagent_ends: list[float] = []
    for k in range(rng.randint(1, 9)):
        n_in = len(ctx) * BS - rng.randint(0, 40)
        api = round(rng.uniform(0.3, 3.0), 3)
        reqs.append(_req(t, model, n_in, rng.randint(1, 300), list(ctx), api, rng.choice("ns")))
        end = t + api
        roll = rng.random()
        if roll < 0.2:  # a flattened fan-out: workers forked off this context, interleaved in time
            n = rng.choice([1, 2, 3, 4])
            for w in range(n):
                wctx = list(ctx) + ids.take(rng.randint(1, 3))
                wt = end + 0.05 * (w + 1)
                wmodel = rng.choice([model, model, HAIKU])
                for _step in range(rng.randint(1, 3)):
                    wapi = rng.uniform(0.2, 2.0)
                    reqs.append(_req(wt, wmodel, len(wctx) * BS, rng.randint(1, 200), list(wctx), wapi))
                    wt += wapi + 0.1
                    wctx = wctx + ids.take(1)
        elif roll < 0.35:  # a one-off sidecar on a small fresh context
            reqs.append(_req(end + 0.05, rng.choice([HAIKU, model]), rng.randint(200, 2000), rng.randint(1, 80),
                             ids.take(rng.randint(1, 4)), rng.uniform(0.1, 1.0)))
        elif roll < 0.6:  # a subagent, maybe outliving several main turns
            st = end + 0.05
            sctx = prefix + ids.take(rng.randint(1, 4))
            inner = []
            it = st
            for _j in range(rng.randint(0, 4)):
                iapi = rng.uniform(0.2, 2.0)
                octx = sctx if rng.random() < 0.8 else prefix + ids.take(2)  # a nested one-shot or fork
                inner.append(_req(it, rng.choice([HAIKU, SONNET]), len(octx) * BS, rng.randint(1, 200), list(octx), iapi))
                it += iapi + rng.uniform(0.0, 1.0)
                sctx = sctx + ids.take(1)
            relative = rng.random() < 0.3
            if relative:
                for q in inner:
                    q["t"] = round(q["t"] - st, 3)
            long = rng.random() < 0.4
            dur = None if rng.random() < 0.3 else int((it - st + (rng.uniform(3, 20) if long else 0.0)) * 1000)
            reqs.append({
                "t": round(st, 3), "type": "subagent", "agent_id": f"agent_{seed}_{k}",
                "subagent_type": rng.choice(["Explore", "general-purpose"]),
                "duration_ms": dur, "total_tokens": None, "tool_use_count": None,
                "status": "completed" if dur is not None else "async_launched",
                "requests": inner, "models": [HAIKU], "tool_tokens": 64, "system_tokens": 64,
            })
            pending_subagent_ends.append(st + (dur or 0) / 1000)
            if long:
                end = st + 0.5  # the parent goes on while the subagent runs: a later turn joins it
            else:
                end = max(end, it)
        if rng.random() < 0.15:  # a compaction: the context shrinks to a prefix and goes on (a seam)
            ctx = ctx[: max(2, len(ctx) // 2)] + ids.take(1)
        else:
            ctx = ctx + ids.take(rng.randint(1, 3))
        t = end + rng.uniform(0.1, 2.0)
    if rng.random() < 0.2:
        reqs.sort(key=lambda r: r["t"]) if rng.random() < 0.5 else rng.shuffle(reqs)  # order not by index
    return {"id": f"gen_{seed:04d}", "models": [OPUS, HAIKU], "block_size": BS, "hash_id_scope": "local",
            "tool_tokens": 64, "system_tokens": 64, "requests": reqs, "totals": {"requests": len(reqs)}}


# values of every JSON type, for ``mutate``: lax coercions the harness takes and ones it rejects
_VALUES: list[Any] = [0, 1, -5, 7, 4160.0, 4160.5, "4160", " 12 ", "4_160", "1.5", "abc", "", True, False, None, [],
                      [1, 2], {}, {"a": 1}, 2**63, -(2**63), 1e20, "nan"]


def mutate(doc: dict, seed: int) -> dict:
    """``doc`` with one field (at any level) set to a value of a random type, or removed, or added."""
    rng = random.Random(seed)
    d = copy.deepcopy(doc)
    targets: list[dict] = [d]
    for r in d["requests"]:
        if isinstance(r, dict):
            targets.append(r)
            targets.extend(q for q in r.get("requests", []) if isinstance(q, dict))
    obj = rng.choice(targets)
    op = rng.random()
    key = rng.choice(sorted(obj))
    if op < 0.1:
        del obj[key]
    elif op < 0.15:
        obj[rng.choice(["ttft", "extra", "input_length", "duration_ms", "totals"])] = rng.choice(_VALUES)
    elif key == "hash_ids" and obj[key] and op < 0.4:
        obj[key][rng.randrange(len(obj[key]))] = rng.choice(_VALUES)
    else:
        obj[key] = rng.choice(_VALUES)
    for k in ("in", "out", "input_length", "output_length"):  # a prompt of 2**63 tokens: the harness would build it
        if obj.get(k) == 2**63:
            obj[k] = -(2**63)
    return d


def _base() -> dict:
    """The edge corpus's trace: 3 main turns, a joined subagent, a background one and a sidecar."""
    ids = _Ids(500)
    prefix = ids.take(2)
    c0 = prefix + ids.take(3)
    c1 = c0 + ids.take(2)
    c2 = c1 + ids.take(2)
    sub_ctx = prefix + ids.take(2)
    return {
        "id": "edge",
        "models": [OPUS, HAIKU],
        "block_size": BS,
        "hash_id_scope": "local",
        "tool_tokens": 64,
        "system_tokens": 64,
        "requests": [
            _req(0.0, OPUS, 300, 40, c0, 1.0),
            dict(_req(2.0, OPUS, 420, 50, c1, 1.0, "s"), ttft=0.3),
            {"t": 3.1, "type": "subagent", "agent_id": "agent_a", "subagent_type": "Explore", "duration_ms": 1500,
             "total_tokens": 400, "tool_use_count": 1, "status": "completed", "models": [HAIKU],
             "tool_tokens": 64, "system_tokens": 64,
             "requests": [_req(3.1, HAIKU, 250, 30, sub_ctx, 0.6), _req(3.9, HAIKU, 320, 30, sub_ctx + ids.take(1), 0.6)]},
            _req(5.0, OPUS, 560, 60, c2, 1.0),
            _req(6.1, HAIKU, 900, 20, ids.take(3), 0.3),
            {"t": 6.2, "type": "subagent", "agent_id": "agent_b", "subagent_type": "general-purpose",
             "duration_ms": None, "total_tokens": None, "tool_use_count": None, "status": "async_launched",
             "models": [HAIKU], "requests": [_req(0.0, HAIKU, 200, 30, ids.take(3), 30.0)]},
            _req(7.0, OPUS, 700, 30, c2 + ids.take(2), 1.0),
        ],
        "totals": {"requests": 7},
    }


def _sub(d: dict, k: int = 0) -> dict:
    return [r for r in d["requests"] if r.get("type") == "subagent"][k]


# name -> how it differs from _base(); each is one of the issue's or the probes' differences
EDGE_CASES: dict[str, Any] = {
    "ok": lambda d: None,
    "missing_models": lambda d: d.pop("models"),
    "models_not_a_list": lambda d: d.update(models="claude"),
    "subagent_without_subagent_type": lambda d: _sub(d).pop("subagent_type"),
    "subagent_without_status": lambda d: _sub(d).pop("status"),
    "subagent_without_models": lambda d: _sub(d).pop("models"),
    "ttft_on_an_n_request": lambda d: d["requests"][0].update(ttft=0.3),
    "fractional_duration_ms": lambda d: _sub(d).update(duration_ms=1500.5),
    "integral_float_duration_ms": lambda d: _sub(d).update(duration_ms=1500.0),
    "totals_a_list": lambda d: d.update(totals=[7]),
    "totals_null": lambda d: d.update(totals=None),
    "out_zero": lambda d: d["requests"][0].update(out=0),
    "in_zero": lambda d: d["requests"][0].update({"in": 0}),
    "in_negative": lambda d: d["requests"][0].update({"in": -5}),
    "in_integral_float": lambda d: d["requests"][0].update({"in": 300.0}),
    "in_fractional": lambda d: d["requests"][0].update({"in": 300.5}),
    "in_numeric_string": lambda d: d["requests"][0].update({"in": "300"}),
    "in_by_field_name": lambda d: d["requests"][0].update(input_length=d["requests"][0].pop("in")),
    "in_beyond_64_bits": lambda d: d["requests"][0].update({"in": 1e20}),
    "in_above_ten_million": lambda d: d["requests"][0].update({"in": 10_000_001}),
    "api_time_numeric_string": lambda d: d["requests"][0].update(api_time="1.0"),
    "api_time_word": lambda d: d["requests"][0].update(api_time="fast"),
    "api_time_negative": lambda d: d["requests"][0].update(api_time=-1.0),
    "t_negative_top_level": lambda d: d["requests"][0].update(t=-1.0),
    "t_negative_subagent": lambda d: _sub(d).update(t=-1.0),
    "t_out_of_order": lambda d: d["requests"][0].update(t=1e9),
    "block_size_integral_float": lambda d: d.update(block_size=64.0),
    "block_size_zero": lambda d: d.update(block_size=0),
    "id_empty": lambda d: d.update(id=""),
    "id_not_a_string": lambda d: d.update(id=5),
    "model_not_a_string": lambda d: d["requests"][0].update(model=5),
    "stop_null": lambda d: d["requests"][0].update(stop=None),
    "input_types_a_string": lambda d: d["requests"][0].update(input_types="text"),
    "hash_id_negative": lambda d: d["requests"][0]["hash_ids"].__setitem__(4, -1),
    "hash_id_at_2_63": lambda d: d["requests"][0]["hash_ids"].__setitem__(4, 2**63),
    "hash_ids_cut_below_the_prefix": lambda d: d["requests"][0].update(hash_ids=[500]),
    "no_hash_ids": lambda d: d["requests"][0].pop("hash_ids"),
    "tool_tokens_null": lambda d: d.update(tool_tokens=None),
    "subagent_tool_tokens_null": lambda d: _sub(d).update(tool_tokens=None),
    "subagent_total_tokens_fractional": lambda d: _sub(d).update(total_tokens=5.5),
    "subagent_agent_id_not_a_string": lambda d: _sub(d).update(agent_id=7),
    "subagent_extra_field": lambda d: _sub(d).update(bogus=1),
    "subagent_nested_subagent": lambda d: _sub(d)["requests"].append(copy.deepcopy(_sub(d, 1))),
    "subagent_without_requests": lambda d: _sub(d).update(requests=[]),
    "subagent_before_any_turn": lambda d: d["requests"].insert(0, copy.deepcopy(_sub(d, 1))),
    "duplicate_agent_id": lambda d: _sub(d, 1).update(agent_id="agent_a"),
    "scope_global": lambda d: d.update(hash_id_scope="global"),
    "extra_top_level_field": lambda d: d.update(extra=1),
    "type_unknown": lambda d: d["requests"][0].update(type="x"),
    "request_not_an_object": lambda d: d["requests"].append(5),
    "no_requests": lambda d: d.update(requests=[]),
    "only_a_subagent": lambda d: d.update(requests=[_sub(d)]),
    "subagent_joined_two_turns_later": lambda d: _sub(d).update(duration_ms=3500),
}
# folders: several traces, as the harness reads a folder
EDGE_FOLDERS = ("mixed_block_sizes", "duplicate_trace_id", "title_generation_preamble")

# where benchcamp keeps to its own behaviour on purpose (test_agentx_conformance checks each still holds)
KEPT_DIFFERENCES = {
    "in_above_ten_million.json": "benchcamp: at most 10,000,000 tokens a request (the harness has no bound and "
    "builds the prompt)",
    "no_requests.json": "benchcamp: nothing to replay in the whole set is an error (the harness loads 0 turns)",
    "only_a_subagent.json": "benchcamp: nothing to replay in the whole set is an error (the harness drops the "
    "subagent: no main turn before it)",
}


def preamble_trace() -> dict:
    """The issue's example shape: a title-generation preamble on Haiku, then 8 Opus turns, a sidecar
    and two subagents (the harness: 9 main turns with the preamble, 1 auxiliary, 2 subagents)."""
    ids = _Ids(9000)
    prefix = ids.take(2)
    reqs: list[dict] = [_req(0.0, HAIKU, 180, 12, ids.take(3), 0.4)]  # the title call
    ctx = prefix + ids.take(3)
    t = 0.5
    for k in range(8):
        reqs.append(_req(t, OPUS, len(ctx) * BS, 120, list(ctx), 1.0, "s" if k % 2 else "n"))
        end = t + 1.0
        if k == 2:
            reqs.append(_req(end + 0.1, HAIKU, 700, 40, ids.take(2), 0.4))  # a web-fetch summary
        if k in (3, 5):
            sctx = prefix + ids.take(2)
            reqs.append({"t": round(end + 0.1, 3), "type": "subagent", "agent_id": f"agent_{k}",
                         "subagent_type": "Explore", "duration_ms": 2000 if k == 3 else 9000,
                         "total_tokens": None, "tool_use_count": None, "status": "completed", "models": [HAIKU],
                         "tool_tokens": 64, "system_tokens": 64,
                         "requests": [_req(end + 0.1, HAIKU, len(sctx) * BS, 60, sctx, 0.8),
                                      _req(end + 1.0, HAIKU, (len(sctx) + 1) * BS, 60, sctx + ids.take(1), 0.8)]})
            end += 2.2 if k == 3 else 0.2  # the second one outlives two main turns: a tiered join
        ctx = ctx + ids.take(2)
        t = end + 1.0
    return {"id": "preamble", "models": [HAIKU, OPUS], "block_size": BS, "hash_id_scope": "local",
            "tool_tokens": 64, "system_tokens": 64, "requests": reqs, "totals": None}


def edge_corpus() -> dict[str, Any]:
    """relative path -> the JSON document of each corpus file."""
    out: dict[str, Any] = {}
    for name, change in EDGE_CASES.items():
        d = _base()
        change(d)
        out[f"{name}.json"] = d
    a, b = _base(), _base()
    b["id"], b["block_size"] = "edge_bs32", 32
    for r in b["requests"]:  # the same tokens at 32 per block: twice the hash ids
        for q in r.get("requests", [r]):
            q["hash_ids"] = [2 * h + j for h in q["hash_ids"] for j in (0, 1)]
    out["mixed_block_sizes/a.json"], out["mixed_block_sizes/b.json"] = a, b
    out["duplicate_trace_id/a.json"], out["duplicate_trace_id/b.json"] = _base(), _base()
    out["title_generation_preamble/preamble.json"] = preamble_trace()
    return out


def write_edge_corpus(root: Path) -> None:
    for rel, doc in edge_corpus().items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def corpus_paths(root: Path = EDGE) -> list[Path]:
    return sorted(root.glob("*.json")) + [root / f for f in EDGE_FOLDERS]


def without_edges(w: Any) -> Any:
    """The workload ``w`` with every request's cross-stream predecessors dropped (the replay ungated)."""
    from dataclasses import replace

    return replace(w, sessions=[replace(s, requests=[replace(r, after=()) for r in s.requests]) for s in w.sessions])


def by_play(records: Any) -> dict[tuple[str, int, str], tuple[float, float]]:
    """Records -> (workload session id, turn, play) -> (sent_s, done_s); a record's session id ``x~c`` is play c
    of workload session x."""
    out = {}
    for r in records.itertuples():
        sid, _, play = r.session_id.partition("~")
        out[(sid, int(r.turn), play)] = (float(r.sent_s), float(r.done_s))
    return out


def broken_edges(w: Any, sent: dict[tuple[str, int, str], tuple[float, float]]) -> tuple[int, int]:
    """(edges seen in the records, edges whose request was sent before its predecessor of the same tree play
    ended), for the predecessors of the workload ``w`` (``Request.after``)."""
    after = {(s.id, r.turn): r.after for s in w.sessions for r in s.requests}
    seen = broken = 0
    for (sid, turn, play), (sent_s, _) in sent.items():
        for p in after[(sid, turn)]:
            pred = sent.get((p[0], p[1], play))
            if pred is not None:
                seen += 1
                broken += sent_s < pred[1] - 1e-9
    return seen, broken
