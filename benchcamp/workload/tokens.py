"""Token synthesis: a prompt's block ids -> an exact list of token ids.

Each block id maps deterministically to ``block_size`` token ids (a PCG64 stream
seeded by the block id), so two prompts that share their first k block ids share
exactly ``k * block_size`` leading tokens, and a prompt of ``prompt_len`` tokens
is the concatenation of its blocks cut to that length. Ids avoid the lowest 1000
ids of the vocabulary (special tokens in most tokenizers).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

RESERVED_LOW_IDS = 1000


@lru_cache(maxsize=65536)
def block_tokens(block_id: int, block_size: int, vocab_size: int) -> tuple[int, ...]:
    rng = np.random.Generator(np.random.PCG64([block_id & 0xFFFFFFFFFFFFFFFF, block_size, vocab_size]))
    low = min(RESERVED_LOW_IDS, vocab_size // 2)
    return tuple(int(x) for x in rng.integers(low, vocab_size, size=block_size))


def prompt_tokens(blocks: tuple[int, ...] | list[int], prompt_len: int, block_size: int,
                  vocab_size: int) -> list[int]:
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    out: list[int] = []
    for b in blocks:
        out.extend(block_tokens(int(b), block_size, vocab_size))
        if len(out) >= prompt_len:
            break
    return out[:prompt_len]


def prompt_text(blocks: tuple[int, ...] | list[int], prompt_len: int, block_size: int,
                vocab_size: int) -> str:
    """A text rendering for chat APIs: one short word per token id, same sharing.

    A real tokenizer will not map these words back to exactly ``prompt_len``
    tokens; lengths are approximate, prefixes are still shared exactly.
    """
    return " ".join(f"t{t:x}" for t in prompt_tokens(blocks, prompt_len, block_size, vocab_size))
