"""Request bodies as bytes, built fast.

Bodies are built on the load generator's event loop, so their cost is
client-added latency for every other stream. A 100K-token prompt is 100K ints
of JSON (``json.dumps`` of the list costs milliseconds); instead each block's
token ids are encoded once (``b"123,456,..."``) into a bounded cache keyed by
the salted block id, and a prompt is a join of cached byte strings. The blocks
a prompt misses (a new turn's new blocks, a new session) are synthesised in one
vectorised ``blocks_token_array`` call, not one call per block.
The token ids are exactly ``benchcamp.workload.tokens.prompt_tokens`` (same
``salt``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from itertools import islice

from benchcamp.workload.tokens import blocks_token_array, prompt_text, salt_mask

_MASK64 = 0xFFFFFFFFFFFFFFFF
# Encoded blocks kept per (block_size, vocab_size): 262K blocks of 16 tokens is ~4M
# tokens, ~50 MB with dict overhead; a sweep point's prefixes fit, and a miss is cheap.
MAX_CACHED_BLOCKS = 262_144
# (block_size, vocab_size) -> {salted block id: encoded ids}, insertion-ordered: the
# oldest entries go first (a miss costs a few microseconds, so no LRU bookkeeping on hits).
_BLOCK_BYTES: dict[tuple[int, int], dict[int, bytes]] = {}


@lru_cache(maxsize=4)
def _id_bytes(vocab_size: int) -> list[bytes]:
    """``str(i).encode()`` for every id of the vocabulary, built once per vocabulary (~6 ms and
    ~2 MB for 32K ids): indexing it is ~4x cheaper than formatting each id with ``str``."""
    return [str(i).encode() for i in range(vocab_size)]


def _encode(block_ids: list[int], block_size: int, vocab_size: int) -> dict[int, bytes]:
    """Synthesise the blocks in one vectorised call, then encode each block's ids once."""
    flat = list(map(_id_bytes(vocab_size).__getitem__,
                    blocks_token_array(block_ids, block_size, vocab_size).ravel().tolist()))
    return {k: b",".join(flat[i * block_size:(i + 1) * block_size]) for i, k in enumerate(block_ids)}


def _store(cache: dict[int, bytes], fresh: dict[int, bytes]) -> None:
    """Insert ``fresh``; past ``MAX_CACHED_BLOCKS`` evict the oldest ~10% at once (amortised)."""
    bound = max(1, int(MAX_CACHED_BLOCKS))
    overflow = len(cache) + len(fresh) - bound
    if overflow > 0:
        for k in list(islice(cache, min(len(cache), max(overflow, bound // 10)))):
            del cache[k]
    cache.update(islice(fresh.items(), bound))   # a prompt larger than the bound keeps its head


def prompt_ids_json(blocks: tuple[int, ...], prompt_len: int, block_size: int, vocab_size: int,
                    salt: int = 0) -> bytes:
    """The JSON array body (without brackets) of the prompt's token ids."""
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    full, rest = divmod(int(prompt_len), int(block_size))
    mask = salt_mask(salt)
    # salted ids taken mod 2^64: the cache key is exactly what token synthesis sees
    keys = [(int(b) ^ mask) & _MASK64 for b in blocks[:full + (1 if rest else 0)]]
    cache = _BLOCK_BYTES.setdefault((int(block_size), int(vocab_size)), {})
    parts = [cache.get(k) for k in keys]
    if None in parts:
        fresh = _encode(list(dict.fromkeys(k for k, p in zip(keys, parts) if p is None)),
                        int(block_size), int(vocab_size))
        parts = [p if p is not None else fresh[k] for k, p in zip(keys, parts)]
        _store(cache, fresh)
    if rest:    # the partial last block: its first ``rest`` ids
        parts[-1] = b",".join(parts[-1].split(b",", rest)[:rest])
    return b",".join(parts)


def _tail(output_len: int) -> bytes:
    # Fixed output length: the workload's, exactly (min = max, EOS ignored).
    n = int(output_len)
    return (f',"max_tokens":{n},"min_tokens":{n},"ignore_eos":true,"stream":true,'
            f'"stream_options":{{"include_usage":true}}}}').encode()


@lru_cache(maxsize=16)
def _model_json(model: str) -> bytes:
    return json.dumps(model).encode()


def completions_body(model: str, blocks: tuple[int, ...], prompt_len: int, output_len: int,
                     block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    return b"".join((b'{"model":', _model_json(model), b',"prompt":[',
                     prompt_ids_json(blocks, prompt_len, block_size, vocab_size, salt), b"]", _tail(output_len)))


def chat_body(model: str, blocks: tuple[int, ...], prompt_len: int, output_len: int,
              block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    text = prompt_text(blocks, prompt_len, block_size, vocab_size, salt)
    return b"".join((b'{"model":', _model_json(model), b',"messages":[{"role":"user","content":',
                     json.dumps(text).encode(), b"}]", _tail(output_len)))


API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
BUILDERS = {"completions": completions_body, "chat": chat_body}
