"""Request bodies as bytes, built fast.

A 100K-token prompt is 100K ints of JSON; ``json.dumps`` of the list costs
milliseconds per request and would show up as client-added latency. Each
block's token ids are encoded once (``b"123,456,..."``, cached per block id),
so a prompt is a join of cached byte strings plus one partial block.
The token ids are exactly ``benchcamp.workload.tokens.prompt_tokens`` (same
``salt``).
"""

from __future__ import annotations

import json
from functools import lru_cache

from benchcamp.workload.tokens import block_tokens, prompt_text, salted_block_id


@lru_cache(maxsize=131072)
def _block_bytes(block_id: int, block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    # keyed by the workload's block id and the salt: no per-request salting pass over the blocks
    return ",".join(map(str, block_tokens(salted_block_id(block_id, salt), block_size, vocab_size))).encode()


def prompt_ids_json(blocks: tuple[int, ...], prompt_len: int, block_size: int, vocab_size: int,
                    salt: int = 0) -> bytes:
    """The JSON array body (without brackets) of the prompt's token ids."""
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    full, rest = divmod(prompt_len, block_size)
    parts = [_block_bytes(int(b), block_size, vocab_size, salt) for b in blocks[:full]]
    if rest:
        toks = block_tokens(salted_block_id(blocks[full], salt), block_size, vocab_size)[:rest]
        parts.append(",".join(map(str, toks)).encode())
    return b",".join(parts)


def _tail(output_len: int) -> bytes:
    # Fixed output length: the workload's, exactly (min = max, EOS ignored).
    n = int(output_len)
    return (f',"max_tokens":{n},"min_tokens":{n},"ignore_eos":true,"stream":true,'
            f'"stream_options":{{"include_usage":true}}}}').encode()


def completions_body(model: str, blocks: tuple[int, ...], prompt_len: int, output_len: int,
                     block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    return b"".join((b'{"model":', json.dumps(model).encode(), b',"prompt":[',
                     prompt_ids_json(blocks, prompt_len, block_size, vocab_size, salt), b"]", _tail(output_len)))


def chat_body(model: str, blocks: tuple[int, ...], prompt_len: int, output_len: int,
              block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    text = prompt_text(blocks, prompt_len, block_size, vocab_size, salt)
    return b"".join((b'{"model":', json.dumps(model).encode(), b',"messages":[{"role":"user","content":',
                     json.dumps(text).encode(), b"}]", _tail(output_len)))


API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
BUILDERS = {"completions": completions_body, "chat": chat_body}
