"""Per-point prompt salts: exact sharing within a sweep point, none across points.

The end-to-end test runs a two-point sweep against the simulated vLLM engine
(a real subprocess on loopback, with its prefix cache) and reads the cached
tokens it reports.
"""

from __future__ import annotations

import json

import pytest
from loadgen_support import make_workload
from simulated_engine import simulated_engine

from benchcamp.config import from_dict
from benchcamp.loadgen import run_sweep
from benchcamp.loadgen.body import chat_body, completions_body
from benchcamp.loadgen.spec import point_salt
from benchcamp.results.records import read_records
from benchcamp.workload.tokens import block_tokens, prompt_text, prompt_tokens, salted_block_id

ENGINE_MODEL = "m"


def test_salt_zero_is_todays_tokens_and_salts_keep_sharing_within_not_across():
    blocks = (3, 4, 5, 6)
    # salt 0: the unsalted synthesis, block by block
    assert prompt_tokens(blocks, 50, 16, 32000) == prompt_tokens(blocks, 50, 16, 32000, salt=0)
    assert prompt_tokens(blocks, 50, 16, 32000) == [t for b in blocks for t in block_tokens(b, 16, 32000)][:50]
    assert salted_block_id(7, 0) == 7
    a, b = point_salt("c4", "exec-1/seed=0"), point_salt("c8", "exec-1/seed=0")
    assert a and b and a != b and a == point_salt("c4", "exec-1/seed=0")
    assert point_salt("c4", "exec-2/seed=0") != a
    # within one salt: a prompt extending another shares its whole prefix
    short, long_ = prompt_tokens(blocks[:2], 32, 16, 32000, salt=a), prompt_tokens(blocks, 64, 16, 32000, salt=a)
    assert long_[:32] == short
    # across salts (and against unsalted): not even the first block is shared
    for other in (0, b):
        assert prompt_tokens(blocks, 64, 16, 32000, salt=other)[:16] != long_[:16]
    # distinct block ids stay distinct under a salt
    assert len({salted_block_id(i, a) for i in range(1000)}) == 1000


@pytest.mark.parametrize("prompt_len", [15, 16, 40])
def test_bodies_carry_the_salted_tokens(prompt_len):
    blocks, salt = (9, 10, 11), point_salt("r2", "x")
    body = json.loads(completions_body("m", blocks, prompt_len, 3, 16, 32000, salt=salt))
    assert body["prompt"] == prompt_tokens(blocks, prompt_len, 16, 32000, salt=salt)
    assert body["prompt"] != prompt_tokens(blocks, prompt_len, 16, 32000)
    chat = json.loads(chat_body("m", blocks, prompt_len, 3, 16, 32000, salt=salt))
    assert chat["messages"][0]["content"] == prompt_text(blocks, prompt_len, 16, 32000, salt=salt)


@pytest.fixture
def engine():
    """The simulated engine, as `benchcamp engine serve` runs it, on a free port."""
    with simulated_engine(ENGINE_MODEL) as url:  # tests/fakes/ (on the path: tests/loadgen/conftest.py)
        yield url


def test_second_sweep_point_finds_nothing_of_the_first_in_the_prefix_cache(engine, tmp_path):
    cfg = from_dict({
        "engine": {"served_model_name": ENGINE_MODEL, "data_parallel_size": 1},
        "hardware": {"gpu_count": 1},
        # lanes from session j's first turn (not load.steady's sampled start), so both points open on s0 and s1
        "load": {"levels": [2, 3], "warmup_s": 0.2, "duration_s": 0.8, "drain_s": 5, "workers": 1,
                 "request_timeout_s": 10, "steady": {"lane_start": "first_turn"}},
    })
    wl = make_workload(n_sessions=4, turns=3, prompt_len=40, output_len=4)
    first, second = run_sweep(cfg.load, cfg.served_model_name, wl, engine, None, tmp_path, progress=None, execution_id="exec-test")
    assert first.aborted is None and second.aborted is None
    salts = [json.loads((tmp_path / p / "point.json").read_text())["spec"]["salt"] for p in ("c2", "c3")]
    assert all(salts) and salts[0] != salts[1]

    d1, d2 = read_records(first.records_path), read_records(second.records_path)
    assert d1["error"].isna().all() and d2["error"].isna().all()
    # point 1 ran s0 and s1; unsalted, point 2's s0/s1 turn 0 would hit their cached blocks
    assert {"s0", "s1"} <= set(d1["session_id"])
    opening = d2[(d2["turn"] == 0) & ~d2["session_id"].str.contains("~")]
    assert {"s0", "s1"} <= set(opening["session_id"])
    assert (opening["cached_tokens"] == 0).all(), opening[["session_id", "cached_tokens"]]
    # sharing within the point is intact: a session's next turn reuses its first turn's blocks
    later = d2[(d2["turn"] == 1) & ~d2["session_id"].str.contains("~")]
    assert len(later) and (later["cached_tokens"] >= 32).all()
