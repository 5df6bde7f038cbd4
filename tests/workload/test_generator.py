"""The synthetic agentic generator: determinism, session structure, spec validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchcamp.workload.generator import SpecError, generate, load_spec, parse_spec
from benchcamp.workload.model import read_workload, write_workload
from benchcamp.workload.stats import workload_stats
from benchcamp.workload.tokens import prompt_tokens

REPO = Path(__file__).resolve().parents[2]


def test_same_spec_and_seed_give_identical_bytes_and_digest(small_spec, tmp_path):
    a, b = generate(parse_spec(small_spec)), generate(parse_spec(small_spec))
    assert a.digest == b.digest
    da, db = write_workload(a, tmp_path / "a.parquet"), write_workload(b, tmp_path / "b.parquet")
    assert da == db == a.digest
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert read_workload(tmp_path / "a.parquet").digest == a.digest


def test_different_seed_gives_different_workload(small_spec):
    a = generate(parse_spec(small_spec))
    b = generate(parse_spec(small_spec), seed=12)
    assert a.digest != b.digest
    # block ids are salted per (name, seed): no accidental sharing across workloads
    ids_a = {x for _, r in a.requests() for x in r.blocks}
    ids_b = {x for _, r in b.requests() for x in r.blocks}
    assert not ids_a & ids_b


def test_turns_grow_by_output_plus_tool_result(small_spec):
    w = generate(parse_spec(small_spec))
    for s in w.sessions:
        for prev, cur in zip(s.requests, s.requests[1:]):
            # the previous prompt (incl. its partial tail block) is a prefix of the next one
            assert cur.blocks[:len(prev.blocks)] == prev.blocks
            assert cur.prompt_len > prev.prompt_len + prev.output_len
            assert cur.think_s > 0
        assert s.requests[0].think_s == 0
        for r in s.requests:
            assert len(r.blocks) == -(-r.prompt_len // w.block_size)


def test_all_sessions_share_the_full_blocks_of_the_system_prefix(small_spec):
    w = generate(parse_spec(small_spec))
    prefix = 160 // 16  # system + tool schema tokens, in full 16-token blocks
    firsts = [s.requests[0].blocks for s in w.top_level()]
    assert len({b[:prefix] for b in firsts}) == 1
    # the partial 160 % 16 == 0 case has no tail; the block after the prefix is per-session
    assert len({b[prefix] for b in firsts}) == len(firsts)


def test_subagents_branch_from_parent_context_and_join(small_spec):
    w = generate(parse_spec(small_spec))
    children = w.children()
    assert children, "the small spec spawns subagents with probability 0.5"
    by_id = {s.id: s for s in w.sessions}
    for (pid, turn), subs in children.items():
        parent = by_id[pid]
        spawned = parent.requests[turn]
        ctx = spawned.prompt_len + spawned.output_len  # context after the spawning turn's output
        full = ctx // w.block_size
        nxt = parent.requests[turn + 1]  # a join always has a following parent turn
        for sub in subs:
            first = sub.requests[0]
            assert first.blocks[:full] == nxt.blocks[:full]
            assert first.prompt_len == ctx + 40
            if ctx % w.block_size:  # the fork's partial tail is new content
                assert first.blocks[full] != nxt.blocks[full]
    stats = workload_stats(w)
    assert stats["subagent_sessions"] == sum(len(v) for v in children.values())


def _common_ids(a, b):
    k = 0
    while k < min(len(a.blocks), len(b.blocks)) and a.blocks[k] == b.blocks[k]:
        k += 1
    return k


def _common_tokens(x, y):
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def test_prompts_sharing_k_blocks_share_exactly_k_blocks_of_tokens(small_spec):
    w = generate(parse_spec(small_spec))
    bs, vocab = w.block_size, w.vocab_size
    reqs = [(s, r) for s, r in w.requests()]
    pairs = full_shared = 0
    for i in range(0, len(reqs), 3):
        for j in range(i + 1, min(len(reqs), i + 9)):
            (sa, a), (sb, b) = reqs[i], reqs[j]
            if sa.id == sb.id:
                continue  # same session: one prompt is a prefix of the other (checked below)
            # k equal leading ids = k blocks of equal tokens (a partial tail being a prefix
            # of the same block, full elsewhere); the first differing id ends the sharing
            k = _common_ids(a, b)
            ta = prompt_tokens(a.blocks, a.prompt_len, bs, vocab)
            tb = prompt_tokens(b.blocks, b.prompt_len, bs, vocab)
            assert _common_tokens(ta, tb) == min(k * bs, a.prompt_len, b.prompt_len), (sa.id, sb.id)
            full_shared += (k * bs <= min(a.prompt_len, b.prompt_len) and k < min(len(a.blocks), len(b.blocks)))
            pairs += 1
    assert pairs > 20 and full_shared > 10
    s = w.sessions[0]
    t0 = prompt_tokens(s.requests[0].blocks, s.requests[0].prompt_len, bs, vocab)
    t1 = prompt_tokens(s.requests[1].blocks, s.requests[1].prompt_len, bs, vocab)
    assert t1[:len(t0)] == t0 and len(t1) > len(t0)


def test_default_spec_lands_in_published_ranges():
    spec = load_spec(REPO / "workloads" / "agentic-coding.yaml")
    assert spec.block_size % 16 == 0, "the engine's default block size 16 must divide it"
    st = workload_stats(generate(spec))
    # coding agents: 85.7% (Copilot) to ~96% (Claude Code / Codex) cached; ~128 prompt/output (Copilot)
    assert 0.85 <= st["theoretical_hit_rate"] <= 0.96
    assert 100 <= st["prompt_output_ratio"] <= 160
    assert 100 <= st["sessions"] <= 300
    assert 10_000 <= st["context_p90"] <= 100_000
    assert st["subagent_sessions"] > 0 and 0.5 <= st["think_s_p50"] <= 10


def test_chat_spec_is_short_and_valid():
    st = workload_stats(generate(load_spec(REPO / "workloads" / "chat-short.yaml")))
    assert st["context_max"] <= 8000 + 2000 and st["subagent_sessions"] == 0


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["session"].update(turnz=3), "session.turnz: unknown field"),
    (lambda d: d.update(block_size="big"), "block_size"),
    (lambda d: d["session"]["turns"].update(kind="zipf"), "session.turns.kind: 'zipf' is not a distribution"),
    (lambda d: d["session"]["output_tokens"].update(median=-3), "session.output_tokens.median"),
    (lambda d: d["session"]["turns"].update(low=9, high=2), "session.turns"),
    (lambda d: d.pop("shared_prefix"), "shared_prefix: Field required"),
    (lambda d: d["subagents"].update(spawn_probability=1.5), "subagents.spawn_probability"),
    (lambda d: d["session"].update(think_s={"median": 1}), "session.think_s: a distribution needs `kind`"),
])
def test_malformed_spec_names_the_field(small_spec, mutate, expect):
    mutate(small_spec)
    with pytest.raises(SpecError) as err:
        parse_spec(small_spec, "tiny.yaml")
    assert expect in str(err.value)


def test_spec_file_errors(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    bad.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(SpecError, match="mapping"):
        load_spec(bad)
