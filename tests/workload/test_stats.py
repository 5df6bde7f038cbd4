"""Workload stats against values computed by hand on a tiny hand-built workload."""

from __future__ import annotations

import pytest

from benchcamp.workload.model import Request, Session, Workload
from benchcamp.workload.stats import cache_hits, theoretical_hit_rate, workload_stats
from benchcamp.workload.tokens import prompt_tokens

# block_size 4. Replay order: y (arrival 0, A then B), z (arrival 0, D), x (arrival 1, C).
A = Request(0, (1, 2, 3), 10, 2, 0.0)      # 2 full blocks + 2 tokens of block 3
B = Request(1, (1, 2, 4), 12, 3, 2.0)      # 3 full blocks
C = Request(0, (1, 2, 4, 5), 13, 4, 0.0)   # 3 full + 1 token
D = Request(0, (1, 2, 3), 12, 1, 0.0)      # block 3 now full


def fixture() -> Workload:
    return Workload("hand", 4, 32000, [
        Session("x", [C], arrival_s=1.0),
        Session("y", [A, B], arrival_s=0.0),
        Session("z", [D], arrival_s=0.0, parent="y", parent_turn=0),
    ])


def test_hits_per_request_at_workload_block_size():
    # A: nothing seen -> 0. B: blocks 1, (1,2) seen full in A -> 8; (1,2,4) new.
    # D: (1,2,3) was only partial in A -> 8. C: (1,2,4) full in B -> 12.
    assert cache_hits(fixture()) == [0, 8, 8, 12]
    assert theoretical_hit_rate(fixture()) == pytest.approx(28 / 47)


def test_hits_at_a_finer_engine_block_size():
    # b=2: D also hits the first half of block 3 (tokens 8-9 were a full 2-token unit in A).
    assert cache_hits(fixture(), 2) == [0, 8, 10, 12]
    with pytest.raises(ValueError, match="must divide"):
        cache_hits(fixture(), 3)


def test_hits_leave_the_last_token_to_compute_like_vllm():
    w = Workload("again", 4, 32000, [Session("a", [B]), Session("b", [B])])
    assert cache_hits(w) == [0, 8]  # 12 tokens all seen, but at least the last block is recomputed


def test_stats_summary_by_hand():
    st = workload_stats(fixture())
    assert st["sessions"] == 2 and st["requests"] == 4
    assert st["input_tokens"] == 47 and st["output_tokens"] == 10
    assert st["prompt_output_ratio"] == 4.7
    assert st["context_mean"] == 11.8  # 47 / 4 = 11.75, one decimal
    assert st["context_p50"] == 12 and st["context_p90"] == pytest.approx(12.7)
    assert st["context_max"] == 13
    assert st["think_s_mean"] == 2.0 and st["think_s_p50"] == 2.0
    assert st["subagent_sessions"] == 1 and st["subagent_requests"] == 1
    assert st["subagent_joins"] == 1 and st["subagent_fanout_max"] == 1
    assert st["arrival_span_s"] == 1.0
    assert st["cached_tokens_theoretical"] == 28
    assert st["theoretical_hit_rate"] == round(28 / 47, 6)


def test_token_sharing_of_the_fixture_matches_the_block_ids():
    tok = {name: prompt_tokens(r.blocks, r.prompt_len, 4, 32000) for name, r in zip("ABCD", (A, B, C, D))}
    common = lambda x, y: next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))  # noqa: E731
    assert common(tok["A"], tok["B"]) == 8      # 2 shared blocks, not one token more
    assert common(tok["B"], tok["C"]) == 12
    assert common(tok["A"], tok["D"]) == 10     # A's partial tail is a prefix of D's full block 3
    assert tok["D"][:10] == tok["A"]
