"""Counter-hash token synthesis: range, determinism, exact prefix sharing, 64-bit block ids,
the batched array API, and request bodies built from the bounded per-block byte cache."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from benchcamp.loadgen import body
from benchcamp.loadgen.body import completions_body, prompt_ids_json
from benchcamp.workload.tokens import (
    RESERVED_LOW_IDS,
    block_tokens,
    blocks_token_array,
    prompt_text,
    prompt_tokens,
    salt_mask,
    salted_block_id,
)

M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    x &= M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _reference_block(block_id: int, block_size: int, vocab: int) -> tuple[int, ...]:
    """The module docstring's formula in plain Python ints (no numpy)."""
    low = min(RESERVED_LOW_IDS, vocab // 2)
    seed = _mix((block_id & M64) ^ _mix((block_size << 32) ^ vocab ^ 0x626C6F636B746F6B))
    return tuple(low + _mix(seed + (j + 1) * 0x9E3779B97F4A7C15) % (vocab - low) for j in range(block_size))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("block_id", [0, 1, 12345, 2**63, M64 - 5, M64])
@pytest.mark.parametrize("block_size,vocab", [(16, 32000), (64, 5000), (3, 1500), (1, 2)])
def test_numpy_path_is_the_documented_formula(block_id, block_size, vocab):
    assert block_tokens(block_id, block_size, vocab) == _reference_block(block_id, block_size, vocab)


@pytest.mark.parametrize("vocab", [32000, 151936, 1500, 1010, 3])
def test_ids_stay_in_range_and_cover_it(vocab):
    low = min(RESERVED_LOW_IDS, vocab // 2)
    arr = blocks_token_array(list(range(4000)) + [M64], 16, vocab)
    assert arr.dtype == np.int64 and arr.shape == (4001, 16)
    assert arr.min() >= low and arr.max() < vocab
    if vocab - low <= 1010:   # small spans: every id is reachable, both ends are hit
        assert arr.min() == low and arr.max() == vocab - 1


def test_same_values_in_a_fresh_process():
    code = ("from benchcamp.workload.tokens import block_tokens, prompt_tokens;"
            f"print(list(block_tokens({M64}, 16, 32000)), prompt_tokens([3, 1, 4, 1, 5], 70, 16, 32000, salt=9))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(list(block_tokens(M64, 16, 32000))) + " " + str(
        prompt_tokens([3, 1, 4, 1, 5], 70, 16, 32000, salt=9))


@pytest.mark.parametrize("salt", [0, 7])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_k_shared_leading_blocks_share_exactly_k_blocks_of_tokens(k, salt):
    shared = [500 + i for i in range(k)]
    a = prompt_tokens(shared + [11, 12], (k + 2) * 16, 16, 32000, salt)
    b = prompt_tokens(shared + [21, 22], (k + 2) * 16, 16, 32000, salt)
    assert _common_prefix(a, b) == k * 16
    assert a[k * 16:(k + 1) * 16] != b[k * 16:(k + 1) * 16]


def test_distinct_blocks_differ_including_salted_64_bit_ids():
    ids = list(range(20000)) + [salted_block_id(i, s) for s in (1, 2) for i in range(5000)] + [M64, M64 - 1]
    arr = blocks_token_array(ids, 16, 32000)
    assert len(np.unique(arr, axis=0)) == len(ids)


def test_64_bit_block_ids_are_accepted_in_every_form():
    expect = block_tokens(M64, 16, 32000)
    assert block_tokens(-1, 16, 32000) == expect                      # taken modulo 2^64
    for ids in ([M64], (M64,), np.array([M64], dtype=np.uint64), np.array([-1], dtype=np.int64)):
        assert tuple(blocks_token_array(ids, 16, 32000)[0].tolist()) == expect
    salted = salted_block_id(12345, 1)
    assert salted >= 2**63                                             # salts use the top bit too
    assert prompt_tokens([12345], 16, 16, 32000, salt=1) == list(block_tokens(salted, 16, 32000))


@pytest.mark.parametrize("n", [0, 1, 5, 8, 300])   # below and above the small-batch seed path
def test_array_rows_equal_block_tokens(n):
    ids = [(i * 0x9E3779B97F4A7C15) & M64 for i in range(n)]
    for form in (ids, tuple(ids), np.array(ids, dtype=np.uint64)):
        arr = blocks_token_array(form, 16, 32000)
        assert arr.shape == (n, 16)
        assert [tuple(r) for r in arr.tolist()] == [block_tokens(b, 16, 32000) for b in ids]


def test_salting_is_unchanged_and_prompt_apis_keep_their_shape():
    # values of the previous implementation: salted ids (hence salted prompts) keep their meaning
    assert [salt_mask(s) for s in (0, 1, 7, 2**40)] == [0, 0x910A2DEC89025CC1, 0x63CBE1E459320DD7,
                                                      0x1FDD7128F310C389]
    assert salted_block_id(12345, 7) == 0x63CBE1E459323DEE and salted_block_id(12345) == 12345
    blocks = [9, 8, 7]
    toks = prompt_tokens(blocks, 40, 16, 32000)
    assert isinstance(toks, list) and len(toks) == 40 and all(type(t) is int for t in toks)
    assert toks == [t for b in blocks for t in block_tokens(b, 16, 32000)][:40]
    assert prompt_text(blocks, 40, 16, 32000).split() == [f"t{t:x}" for t in toks]
    assert prompt_tokens(blocks, 0, 16, 32000) == []


def test_bad_sizes_name_the_field():
    with pytest.raises(ValueError, match="block_size"):
        blocks_token_array([1], 0, 32000)
    with pytest.raises(ValueError, match="vocab_size"):
        blocks_token_array([1], 16, 0)
    with pytest.raises(ValueError, match="prompt_len"):
        prompt_tokens([1], 17, 16, 32000)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(body, "_BLOCK_BYTES", {})
    return body


def _ids(raw: bytes) -> list[int]:
    return json.loads(b"[" + raw + b"]")


@pytest.mark.parametrize("salt", [0, 3])
def test_body_ids_are_prompt_tokens_with_cached_and_uncached_blocks(fresh_cache, salt):
    turn1 = tuple(range(100, 110))
    turn2 = turn1 + (7, 7, 900, 901)            # a repeated new block inside one prompt, too
    for blocks, n in [(turn1, 150), (turn1, 160), (turn2, 150), (turn2, 211), (turn2, 224),
                      ((M64, 5), 20), ((), 0)]:
        assert _ids(prompt_ids_json(blocks, n, 16, 32000, salt)) == prompt_tokens(blocks, n, 16, 32000, salt)
    cache = fresh_cache._BLOCK_BYTES[(16, 32000)]
    assert len(cache) == len(set(turn2)) + 2        # every block encoded once, partial ones included
    full = json.loads(completions_body("m", turn2, 211, 5, 16, 32000, salt))
    assert full["prompt"] == prompt_tokens(turn2, 211, 16, 32000, salt)


def test_block_and_vocab_sizes_do_not_share_cache_entries(fresh_cache):
    blocks = (1, 2, 3)
    for bs, vocab in [(16, 32000), (16, 5000), (8, 32000)]:
        assert _ids(prompt_ids_json(blocks, 20, bs, vocab)) == prompt_tokens(blocks, 20, bs, vocab)
    assert set(fresh_cache._BLOCK_BYTES) == {(16, 32000), (16, 5000), (8, 32000)}


def test_eviction_keeps_bodies_exact_and_the_cache_bounded(fresh_cache, monkeypatch):
    monkeypatch.setattr(fresh_cache, "MAX_CACHED_BLOCKS", 20)
    base = tuple(range(1000, 1012))
    for turn in range(8):                           # each turn adds blocks: evictions happen
        blocks = base + tuple(range(2000, 2000 + 5 * turn))
        n = len(blocks) * 16 - 3
        assert _ids(prompt_ids_json(blocks, n, 16, 32000)) == prompt_tokens(blocks, n, 16, 32000)
        assert len(fresh_cache._BLOCK_BYTES[(16, 32000)]) <= 20
    big = tuple(range(5000, 5050))                  # one prompt larger than the whole bound
    assert _ids(prompt_ids_json(big, 800, 16, 32000)) == prompt_tokens(big, 800, 16, 32000)
    cache = fresh_cache._BLOCK_BYTES[(16, 32000)]
    assert len(cache) <= 20
    # what stayed cached is still right: rebuild from the cache only
    assert _ids(prompt_ids_json(big, 800, 16, 32000)) == prompt_tokens(big, 800, 16, 32000)
    assert all(_ids(v) == list(block_tokens(k, 16, 32000)) for k, v in cache.items())
