"""Token synthesis: a prompt's block ids -> an exact list of token ids.

Each block id maps deterministically to ``block_size`` token ids by a
counter-based hash (splitmix64's finaliser over numpy uint64 arrays):

    seed    = mix(block_id ^ param_key(block_size, vocab_size))
    token_j = low + mix(seed + (j + 1) * GOLDEN) % (vocab_size - low)

Pure integer arithmetic, so it is identical across processes, runs and
platforms, and many blocks are synthesised in one vectorised call
(``blocks_token_array``): a few microseconds per block instead of a numpy
Generator per block (~100 us), which matters because request bodies are built
on the load generator's event loop. Ids avoid the lowest ``RESERVED_LOW_IDS``
ids of the vocabulary (special tokens in most tokenizers): they lie in
``[low, vocab_size)`` with ``low = min(RESERVED_LOW_IDS, vocab_size // 2)``.

Two prompts that share their first k block ids share exactly ``k * block_size``
leading tokens, and a prompt of ``prompt_len`` tokens is the concatenation of
its blocks cut to that length. ``mix`` is a bijection of 64-bit words, so
distinct block ids get distinct seeds; two distinct blocks then agree on all
their tokens with probability ~ (vocab_size - low) ** -block_size. Block ids are
taken modulo 2^64 (salted ids use all 64 bits).

``salt`` (0 = none) remaps every block id of a prompt by one bijection,
``salted_block_id``, before synthesis: prompts with the same salt share exactly
what they shared unsalted, while prompts under different salts share no block
(the load generator gives each sweep point its own salt, so one point cannot
hit the prefix cache another point left in the same engine). Salt 0 leaves
block ids, hence token ids, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

RESERVED_LOW_IDS = 1000
_MASK64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: splitmix64's increment
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(x: int) -> int:
    """splitmix64's finaliser on a Python int (a bijection of 64-bit words)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix64_inplace(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array, in place. Array (not scalar) arithmetic
    wraps modulo 2^64 silently, which is the intended behaviour."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


@lru_cache(maxsize=256)
def salt_mask(salt: int) -> int:
    """The 64-bit XOR mask of a salt (splitmix64's finaliser: nearby salts give unrelated
    masks); 0 for salt 0."""
    if not salt:
        return 0
    return _mix64(int(salt) + _GOLDEN) or 1


def salted_block_id(block_id: int, salt: int = 0) -> int:
    """``block_id`` itself for salt 0; else XOR with the salt's mask: a bijection for a given
    salt (distinct blocks stay distinct), and workload block ids (far below 2^64) land on
    disjoint ids under two salts unless their masks agree in all the high bits."""
    mask = salt_mask(salt)
    return (int(block_id) ^ mask) & _MASK64 if mask else int(block_id)


@lru_cache(maxsize=64)
def _layout(block_size: int, vocab_size: int) -> tuple[int, np.ndarray, np.uint64, int]:
    """Per-(block_size, vocab_size) constants: the seed key, the per-position counter
    offsets (j + 1) * GOLDEN, the id range and its lower end."""
    if int(block_size) < 1:
        raise ValueError(f"block_size={block_size}: must be a positive number of tokens per block")
    if int(vocab_size) < 1:
        raise ValueError(f"vocab_size={vocab_size}: must be a positive vocabulary size (the model's)")
    low = min(RESERVED_LOW_IDS, vocab_size // 2)
    key = _mix64((int(block_size) << 32) ^ int(vocab_size) ^ 0x626C6F636B746F6B)  # "blocktok"
    offsets = np.arange(1, block_size + 1, dtype=np.uint64) * np.uint64(_GOLDEN)  # wraps: intended
    offsets.setflags(write=False)
    return key, offsets, np.uint64(vocab_size - low), low


_SMALL = 8  # below this many blocks, seeds are cheaper in Python ints than as numpy ops


def _seeds(block_ids: Sequence[int] | np.ndarray, key: int) -> np.ndarray:
    """mix(block_id ^ key) per block as a 1-D uint64 array; ids are taken modulo 2^64
    (negative ids wrap, as two's complement)."""
    if isinstance(block_ids, np.ndarray):
        flat = block_ids.reshape(-1)
        if flat.dtype.kind in "iu":
            return _mix64_inplace(flat.astype(np.uint64) ^ np.uint64(key))
        block_ids = flat.tolist()
    ids = block_ids if isinstance(block_ids, (list, tuple)) else list(block_ids)
    if len(ids) < _SMALL:
        return np.array([_mix64(int(b) ^ key) for b in ids], dtype=np.uint64)
    arr = np.fromiter((int(b) & _MASK64 for b in ids), dtype=np.uint64, count=len(ids))
    arr ^= np.uint64(key)
    return _mix64_inplace(arr)


def blocks_token_array(block_ids: Sequence[int] | np.ndarray, block_size: int, vocab_size: int) -> np.ndarray:
    """The token ids of many blocks in one vectorised call: an int64 array of shape
    ``(len(block_ids), block_size)``, row i = the tokens of ``block_ids[i]``."""
    key, offsets, span, low = _layout(int(block_size), int(vocab_size))
    x = _mix64_inplace(_seeds(block_ids, key)[:, None] + offsets[None, :])
    x %= span
    x += np.uint64(low)
    return x.view(np.int64)  # ids < vocab_size < 2^63: the same values


@lru_cache(maxsize=65536)
def block_tokens(block_id: int, block_size: int, vocab_size: int) -> tuple[int, ...]:
    """The ``block_size`` token ids of one block (cached); row 0 of ``blocks_token_array``."""
    return tuple(blocks_token_array((block_id,), block_size, vocab_size)[0].tolist())


def prompt_tokens(blocks: Sequence[int], prompt_len: int, block_size: int, vocab_size: int, salt: int = 0) -> list[int]:
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    need = -(-int(prompt_len) // int(block_size))  # blocks covering prompt_len tokens
    if need == 0:
        return []
    mask = salt_mask(salt)
    ids = [int(b) ^ mask for b in blocks[:need]] if mask else blocks[:need]
    return blocks_token_array(ids, block_size, vocab_size).reshape(-1)[:prompt_len].tolist()


def prompt_text(blocks: Sequence[int], prompt_len: int, block_size: int, vocab_size: int, salt: int = 0) -> str:
    """A text rendering for chat APIs: one short word per token id, same sharing.

    A real tokenizer will not map these words back to exactly ``prompt_len``
    tokens; lengths are approximate, prefixes are still shared exactly.
    """
    return " ".join(f"t{t:x}" for t in prompt_tokens(blocks, prompt_len, block_size, vocab_size, salt))
