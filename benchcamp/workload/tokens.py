"""Token synthesis: a prompt's block ids -> an exact list of token ids.

Each block id maps deterministically to ``block_size`` token ids (a PCG64 stream
seeded by the block id), so two prompts that share their first k block ids share
exactly ``k * block_size`` leading tokens, and a prompt of ``prompt_len`` tokens
is the concatenation of its blocks cut to that length. Ids avoid the lowest 1000
ids of the vocabulary (special tokens in most tokenizers).

``salt`` (0 = none) remaps every block id of a prompt by one bijection,
``salted_block_id``, before synthesis: prompts with the same salt share exactly
what they shared unsalted, while prompts under different salts share no block
(the load generator gives each sweep point its own salt, so one point cannot
hit the prefix cache another point left in the same engine). Salt 0 leaves
block ids, hence token ids, unchanged.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

RESERVED_LOW_IDS = 1000
_MASK64 = 0xFFFFFFFFFFFFFFFF


@lru_cache(maxsize=256)
def salt_mask(salt: int) -> int:
    """The 64-bit XOR mask of a salt (splitmix64's finaliser: nearby salts give unrelated
    masks); 0 for salt 0."""
    if not salt:
        return 0
    x = (int(salt) + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) or 1


def salted_block_id(block_id: int, salt: int = 0) -> int:
    """``block_id`` itself for salt 0; else XOR with the salt's mask: a bijection for a given
    salt (distinct blocks stay distinct), and workload block ids (far below 2^64) land on
    disjoint ids under two salts unless their masks agree in all the high bits."""
    mask = salt_mask(salt)
    return (int(block_id) ^ mask) & _MASK64 if mask else int(block_id)


@lru_cache(maxsize=65536)
def block_tokens(block_id: int, block_size: int, vocab_size: int) -> tuple[int, ...]:
    rng = np.random.Generator(np.random.PCG64([block_id & 0xFFFFFFFFFFFFFFFF, block_size, vocab_size]))
    low = min(RESERVED_LOW_IDS, vocab_size // 2)
    return tuple(int(x) for x in rng.integers(low, vocab_size, size=block_size))


def prompt_tokens(blocks: tuple[int, ...] | list[int], prompt_len: int, block_size: int,
                  vocab_size: int, salt: int = 0) -> list[int]:
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    out: list[int] = []
    for b in blocks:
        out.extend(block_tokens(salted_block_id(b, salt), block_size, vocab_size))
        if len(out) >= prompt_len:
            break
    return out[:prompt_len]


def prompt_text(blocks: tuple[int, ...] | list[int], prompt_len: int, block_size: int,
                vocab_size: int, salt: int = 0) -> str:
    """A text rendering for chat APIs: one short word per token id, same sharing.

    A real tokenizer will not map these words back to exactly ``prompt_len``
    tokens; lengths are approximate, prefixes are still shared exactly.
    """
    return " ".join(f"t{t:x}" for t in prompt_tokens(blocks, prompt_len, block_size, vocab_size, salt))
