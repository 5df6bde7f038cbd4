"""benchcamp's AgentX trace import against SemiAnalysis' own harness (agentx-harness 1.0.12, its trace
models and loader run whole in their own venv: `make agentx-harness`, scripts/agentx_harness/oracle.py).

On the edge-case corpus (agentx_edge/, agentx_conformance.EDGE_CASES) and on seeded random traces
(half of them with one field given a value of another type): every trace the harness accepts benchcamp
imports, with the same structure (the conversations, their turns, the spawn and join turns of every
branch, background children, the cross-stream dependencies, the model map); every trace it rejects
benchcamp rejects with one line that names the field. One harness subprocess for all of them."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentx_conformance import (  # noqa: E402
    EDGE,
    KEPT_DIFFERENCES,
    SERVED,
    by_play,
    corpus_paths,
    edge_corpus,
    harness_python,
    harness_verdicts,
    mutate,
    random_trace,
)

from benchcamp.errors import TraceError  # noqa: E402
from benchcamp.workload.agentx.plan import structure  # noqa: E402
from benchcamp.workload.agentx.traces import read_agentx, read_plans  # noqa: E402
from benchcamp.workload.model import Request, Session  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
N_RANDOM = 120


@pytest.fixture(scope="module")
def harness():
    if not harness_python().exists():
        why = f"agentx-harness is not installed at {harness_python()}: run `make agentx-harness`"
        if os.environ.get("BENCHCAMP_REQUIRE_AGENTX_HARNESS") == "1":
            pytest.fail(f"BENCHCAMP_REQUIRE_AGENTX_HARNESS=1 but {why}")
        pytest.skip(why)
    return harness_python()


@pytest.fixture(scope="module")
def verdicts(harness, tmp_path_factory):
    """path -> the harness's verdict, for the corpus, the random traces and the committed sample."""
    gen = tmp_path_factory.mktemp("generated")
    paths = corpus_paths()
    for i in range(N_RANDOM):
        doc = random_trace(i) if i % 2 == 0 else mutate(random_trace(i), i)
        (gen / f"gen_{i:04d}.json").write_text(json.dumps(doc))
        paths.append(gen / f"gen_{i:04d}.json")
    sample = tmp_path_factory.mktemp("sample")  # the committed sample, one trace per file as the harness takes it
    for t in json.loads((REPO / "workloads/agentx-sample.json").read_text()):
        (sample / f"{t['id']}.json").write_text(json.dumps(t))
    paths.append(sample)
    return dict(zip(paths, harness_verdicts(paths)))


def _kind(sid: str) -> str:  # oracle.py's names for a conversation
    if "::sa:" in sid:
        return "sub_aux" if ":aux:" in sid.split("::sa:", 1)[1] else "subagent"
    if "::aux:" in sid:
        return "aux"
    return "chain" if "::fa:" in sid or "::wg:" in sid else "main"


def _theirs(structure_: dict) -> dict:
    return {
        t: dict(v, sessions={s: {"kind": x["kind"], "turns": x["turns"]} for s, x in v["sessions"].items()})
        for t, v in structure_.items()
    }


def _ours(path: Path) -> dict:
    plans, _ = read_plans(path)
    out = {}
    for pl in plans:
        s = structure(pl, SERVED)
        s["sessions"] = {sid: {"kind": _kind(sid), "turns": x["turns"]} for sid, x in s["sessions"].items()}
        out[pl.id] = s
    return out


def _field(error: str) -> str | None:
    """The field a pydantic error of the harness names (the last name of its location), if any."""
    m = re.search(r"validation error for \w+\s*\n?\s*([\w.\[\]-]+)", error)
    if not m:
        return None
    names = [p for p in m.group(1).split(".") if not p.isdigit() and p not in ("n", "s", "subagent", "WekaTrace")]
    return names[-1] if names else "type"


def _agree(path: Path, verdict: dict) -> None:
    if path.name in KEPT_DIFFERENCES:
        return
    if verdict["ok"]:
        read_agentx(path)  # imports
        assert _ours(path) == _theirs(verdict["structure"]), f"{path.name}: another structure than the harness's"
        return
    with pytest.raises(TraceError) as exc:
        read_agentx(path)
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg
    field = _field(verdict["error"])
    if field is not None:
        # the harness names its own models' fields; the trace field behind each
        alias = {"input_length": "in", "output_length": "out", "start_timestamp_ms": "t"}.get(field, field)
        assert alias in msg, f"{path.name}: {msg!r} does not name {alias} (the harness: {verdict['error'][:300]})"


def test_the_edge_corpus_on_disk_is_what_agentx_conformance_writes():
    on_disk = {str(p.relative_to(EDGE)): json.loads(p.read_text()) for p in EDGE.rglob("*.json")}
    assert on_disk == edge_corpus()


def test_edge_corpus_accepts_rejects_and_structure_as_the_harness(verdicts):
    corpus = [p for p in verdicts if p.is_relative_to(EDGE)]
    assert len(corpus) == len(corpus_paths()) > 50
    for p in corpus:
        _agree(p, verdicts[p])
    accepted = sum(verdicts[p]["ok"] for p in corpus)
    assert 15 < accepted < len(corpus) - 15  # both verdicts well represented


def test_generated_traces_accept_reject_and_structure_as_the_harness(verdicts):
    gen = [p for p in verdicts if p.name.startswith("gen_")]
    assert len(gen) == N_RANDOM
    for p in gen:
        _agree(p, verdicts[p])
    # the generator reaches the structures it is for (counted on the harness's side)
    seen = {"chain": 0, "aux": 0, "tiered": 0, "background": 0, "deps": 0, "rejected": 0}
    for p in gen:
        v = verdicts[p]
        if not v["ok"]:
            seen["rejected"] += 1
            continue
        for t in v["structure"].values():
            kinds = [x["kind"] for x in t["sessions"].values()]
            seen["chain"] += kinds.count("chain")
            seen["aux"] += kinds.count("aux")
            seen["tiered"] += sum(b["join_turn"] is not None and b["join_turn"] > b["spawn_turn"] + 1 for b in t["branches"])
            seen["background"] += sum(b["background"] for b in t["branches"])
            seen["deps"] += t["dependencies"]
    assert all(n > 0 for n in seen.values()), seen


def test_the_committed_sample_has_the_harness_structure(verdicts):
    (sample,) = [p for p in verdicts if p.is_dir() and not p.is_relative_to(EDGE)]
    assert verdicts[sample]["ok"]
    assert _ours(sample) == _theirs(verdicts[sample]["structure"])


def test_the_title_generation_preamble_is_split_off(verdicts):
    """The issue's example shape: benchcamp took the Haiku title call for the main agent (1 main turn, 9
    auxiliary requests, 11 background children); the harness keeps 9 main turns, 1 auxiliary, 2 subagents."""
    path = EDGE / "title_generation_preamble"
    w = read_agentx(path)
    counts = w.meta["agentx"]
    assert (counts["main_requests"], counts["aux_requests"], counts["subagents"]) == (9, 1, 2)
    assert counts["background_children"] == 1
    assert _ours(path) == _theirs(verdicts[path]["structure"])


def test_a_subagent_outliving_the_next_turn_is_joined_later(verdicts):
    path = EDGE / "subagent_joined_two_turns_later.json"
    (branch,) = [b for b in verdicts[path]["structure"]["edge"]["branches"] if "edge::sa:agent_a" in b["children"]]
    assert (branch["spawn_turn"], branch["join_turn"]) == (1, 3)
    sa = {s.id: s for s in read_agentx(path).sessions}["edge::sa:agent_a"]
    assert (sa.parent_turn, sa.joined, sa.join_turn, sa.joins_at()) == (1, True, 3, 3)


def test_the_kept_differences_still_hold(verdicts):
    """Where benchcamp keeps its own rule, on purpose (agentx_conformance.KEPT_DIFFERENCES)."""
    for name in KEPT_DIFFERENCES:
        path = EDGE / name
        assert verdicts[path]["ok"], f"the harness now rejects {name}: drop it from KEPT_DIFFERENCES"
        with pytest.raises(TraceError, match="nothing to replay|at most 10,000,000 tokens"):
            read_agentx(path)


_SCENARIO_DUMP = """
import json
from aiperf.common.enums import CacheBustTarget
from aiperf.common.environment import Environment
from aiperf.common.scenario.registry import SCENARIOS
from aiperf.dataset.loader.weka_trace import WekaTraceLoader
out = {}
for name, spec in SCENARIOS.items():
    cli = spec.cli_defaults
    out[name] = {
        "start_min_ratio": spec.default_trajectory_start_min_ratio,
        "start_max_ratio": spec.default_trajectory_start_max_ratio,
        "duration_s": spec.default_benchmark_duration_seconds,
        "min_duration_s": spec.min_benchmark_duration_seconds,
        "idle_gap_cap_s": spec.system_idle_gap_cap_seconds,
        "min_metric_coverage": spec.minimum_profile_metric_coverage_ratio,
        "warmup_requests_per_lane": cli.get("warmup_requests_per_lane", 0),
        "trace_idle_gap_cap_s": cli.get("trace_idle_gap_cap_seconds"),
        "failed_request_threshold": cli.get("failed_request_threshold"),
        "ignore_eos": spec.require_ignore_eos,
        "streaming": spec.require_streaming,
        "cache_bust": spec.require_cache_bust == CacheBustTarget.FIRST_TURN_PREFIX,
        # the weka loader's fixed context mode: the recorded answers in every turn (benchcamp's context)
        "context": {"deltas_with_responses": "recorded"}.get(str(WekaTraceLoader.get_default_context_mode().value)),
    }
facts = {"scenarios": out, "overflow": list(Environment.AGENTX.CONTEXT_OVERFLOW_SUBSTRINGS),
         "overflow_rate": Environment.AGENTX.CONTEXT_OVERFLOW_RATE_LIMIT,
         "endpoint": SCENARIOS["agentx"].cli_defaults.get("endpoint_type")}
"""


_RECONSTRUCT = """
import sys
from aiperf.dataset.loader.weka_synth_buf import ConversationReconstructor, compute_asst_block_caps
out = []
for s in json.load(sys.stdin):
    bs, turns = s["bs"], s["turns"]
    caps = compute_asst_block_caps([(h, n) for h, n, _ in turns], bs)
    rec = ConversationReconstructor(block_size=bs, decode_block_tokens=lambda ids: [0] * (len(ids) * bs),
                                    sample_partial_tail_tokens=lambda n, seed: [0] * n,
                                    decode_tokens_to_text=lambda toks: "")
    mine = []
    for k, (h, n, o) in enumerate(turns):
        if k == 0:
            rec.init_turn_0(hash_ids=h, in_tokens=n, tool_tokens=s["fixed"] * bs, system_tokens=0, seed="x")
        else:
            p = turns[k - 1]
            rec.advance_turn(prev_hash_ids=p[0], prev_in_tokens=p[1], prev_out_tokens=p[2], curr_hash_ids=h,
                             curr_in_tokens=n, seed="x", max_asst_blocks=caps[k])
        rec.turn_delta()
        mine.append([[g.role, g.block_start, len(g.tokens)] for g in rec._segments])
    out.append(mine)
facts["reconstruct"] = out
"""


def _conversations(n: int, bs: int = 16) -> list[Session]:
    """Seeded sessions of growing turns with compactions (a cut inside the conversation), pull-backs that add
    nothing, partial last blocks and answers of every size (each partial block's id its own)."""
    import random

    rng = random.Random(32)
    fresh = iter(range(1, 10**9))
    out = []
    for i in range(n):
        tile = [next(fresh) for _ in range(rng.randint(1, 6))]
        reqs = []
        fixed = min(rng.choice([0, 1, 2]), len(tile))
        for t in range(rng.randint(2, 12)):
            if t:
                op = rng.random()
                if op < 0.2:
                    del tile[rng.randint(1, len(tile)) :]  # a compaction (or a pull-back below)
                if op < 0.1:
                    tail = 0  # a pull-back: no new token
                else:
                    tile += [next(fresh) for _ in range(rng.randint(0, 6))]
            tail = rng.choice([0, 0, rng.randint(1, bs - 1)]) if not (t and op < 0.1) else 0
            blocks = tuple(tile) + ((next(fresh),) if tail else ())
            reqs.append(Request(t, blocks, len(tile) * bs + tail, rng.randint(1, 3 * bs)))
        out.append(Session(f"c{i}", reqs, fixed_blocks=fixed))
    return out


@pytest.fixture(scope="module")
def harness_reads(harness):
    """What the harness's own code says, read in its venv in one subprocess: its scenario registry
    (``_SCENARIO_DUMP``) and its reconstruction of ``_conversations``' turns as chat messages (``_RECONSTRUCT``)."""
    import subprocess

    doc = [
        {"bs": 16, "fixed": s.fixed_blocks, "turns": [[list(r.blocks), r.prompt_len, r.output_len] for r in s.requests]}
        for s in _conversations(60)
    ]
    script = _SCENARIO_DUMP + _RECONSTRUCT + "print(json.dumps(facts))\n"
    r = subprocess.run([str(harness), "-c", script], input=json.dumps(doc), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_scenario_table_is_the_installed_harnesss(harness_reads):
    """benchcamp's copy of the two scenarios (benchcamp/workload/agentx/scenarios.py) against the harness's own
    registry, read in its venv: every parameter load.agentx.scenario sets, the overflow rule, the context mode
    and the endpoint its AgentX scenario sends to."""
    from benchcamp.workload.agentx.scenarios import CONTEXT_OVERFLOW_SUBSTRINGS, HARNESS_API, scenario

    theirs = harness_reads
    assert set(theirs["scenarios"]) == {"agentx", "inferencex-agentx-mvp"}
    for name, want in theirs["scenarios"].items():
        ours = scenario(name)
        assert {k: ours[k] for k in want} == want, name
    assert tuple(theirs["overflow"]) == CONTEXT_OVERFLOW_SUBSTRINGS
    assert theirs["overflow_rate"] == scenario("agentx")["max_context_overflow_rate"]
    assert theirs["endpoint"] == HARNESS_API  # it sends chat: token ids are an override (load.api)


def test_chat_messages_are_the_harnesss_reconstruction(harness_reads):
    """load.api chat under load.agentx: every turn's messages (role, first block, tokens) are what the harness's
    own ConversationReconstructor builds from the same turns (with its first-pass answer caps), on seeded
    sessions with compactions and pull-backs; the messages tile the prompt exactly."""
    from benchcamp.loadgen.chat_context import conversation, seg_tokens

    sessions, theirs = _conversations(60), harness_reads["reconstruct"]
    roles = set()
    for s, want in zip(sessions, theirs):
        ours = conversation(s, 16)
        for req, w in zip(s.requests, want):
            got = [[g.role, g.start, seg_tokens(g, 16)] for g in ours[req.turn]]
            assert got == w, (s.id, req.turn)
            assert sum(x[2] for x in got) == req.prompt_len
            roles |= {x[0] for x in got}
    assert roles == {"system", "user", "assistant"}


def _harness_edges_and_models(verdicts: dict, paths: list[Path]) -> tuple[set, dict]:
    edges, models = set(), {}
    for p in paths:
        for t in verdicts[p]["structure"].values():
            edges |= {tuple(e) for e in t["edges"]}
            for sid, x in t["sessions"].items():
                models.update({(sid, k): m for k, m in enumerate(x["models"])})
    return edges, models


def test_every_request_carries_the_harness_predecessors_and_served_model(verdicts, tmp_path):
    """The workload file's ``after`` of every request is the harness's ``replay_predecessors``, and its
    recorded model maps (benchcamp.workload.agentx.models.served_models) onto the served model the harness sends."""
    from benchcamp.workload.agentx.models import served_models
    from benchcamp.workload.model import read_workload, write_workload

    accepted = [p for p in verdicts if p.name.startswith("gen_") and verdicts[p]["ok"]]
    (sample,) = [p for p in verdicts if p.is_dir() and not p.is_relative_to(EDGE)]
    for p in accepted:
        (tmp_path / p.name).write_text(p.read_text())
    for folder, paths in ((tmp_path, accepted), (sample, [sample])):
        write_workload(read_agentx(folder), tmp_path / "w.parquet")
        w = read_workload(tmp_path / "w.parquet")  # through the file
        edges, models = _harness_edges_and_models(verdicts, paths)
        ours = {(s.id, r.turn, *a) for s in w.sessions for r in s.requests for a in r.after}
        assert ours == edges and len(edges) > (100 if folder == tmp_path else 5)
        maps = served_models(w, SERVED)
        tree = {s.id: s.id.split("::", 1)[0] for s in w.sessions}
        mapped = {(s.id, r.turn): maps[tree[s.id]][r.model] for s in w.sessions for r in s.requests}
        assert mapped == models


def test_every_edge_the_harness_infers_is_gated_in_virtual_time(verdicts, tmp_path):
    """The harness's own edges, checked in the records of a closed loop in virtual time (the wall clock's gate
    is the same TreeGate: tests/loadgen/test_agentx_dependencies.py checks it on these traces' edges)."""
    from benchcamp.sim.clock.simulate import SimLoad, simulate
    from benchcamp.sim.engine.settings import EngineSettings

    accepted = [p for p in verdicts if p.name.startswith("gen_") and verdicts[p]["ok"]]
    for p in accepted:
        (tmp_path / p.name).write_text(p.read_text())
    w = read_agentx(tmp_path)
    edges, _ = _harness_edges_and_models(verdicts, accepted)
    settings = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                              max_num_batched_tokens=2048)
    df = simulate(w, settings, SimLoad(level=len(w.top_level()), warmup_s=0.0, duration_s=30.0, drain_s=30.0, seed=0))
    at = by_play(df)
    checked = 0
    for sid, turn, psid, pturn in edges:
        for play in {k[2] for k in at}:
            if (sid, turn, play) in at and (psid, pturn, play) in at:
                checked += 1
                assert at[(sid, turn, play)][0] >= at[(psid, pturn, play)][1] - 1e-9, (sid, turn, psid, pturn, play)
    assert checked > 100
