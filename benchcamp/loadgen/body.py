"""Request bodies as bytes, built fast.

Bodies are built on the load generator's event loop, so their cost is
client-added latency for every other stream. A 100K-token prompt is 100K ints
of JSON (``json.dumps`` of the list costs milliseconds); instead each block's
token ids are encoded once (``b"123,456,..."``) into a bounded cache keyed by
the salted block id, and a prompt is a join of cached byte strings. The blocks
a prompt misses (a new turn's new blocks, a new session) are synthesised in one
vectorised ``blocks_token_array`` call, not one call per block.
The token ids are exactly ``benchcamp.workload.tokens.prompt_tokens`` (same
``salt``). Servers that refuse token-id prompts get the same blocks as text
(``prompt_text``'s words, cached the same way), so shared prefixes stay shared.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache, partial
from itertools import islice
from typing import cast

from benchcamp.workload.tokens import blocks_token_array, salt_mask

_MASK64 = 0xFFFFFFFFFFFFFFFF
# Encoded blocks kept per (block_size, vocab_size) and form: 262K blocks of 16 tokens is ~4M
# tokens, ~50 MB with dict overhead; a sweep point's prefixes fit, and a miss is cheap.
MAX_CACHED_BLOCKS = 262_144
# (block_size, vocab_size) -> {salted block id: encoded block}, insertion-ordered: the oldest
# entries go first (a miss costs a few microseconds, so no LRU bookkeeping on hits).
_BLOCK_BYTES: dict[tuple[int, int], dict[int, bytes]] = {}  # token ids (JSON array items)
_BLOCK_TEXT: dict[tuple[int, int], dict[int, bytes]] = {}  # text (words t<hex>)
# form -> (the word of each token id, the separator between words)
_SEPARATOR = {"ids": b",", "text": b" "}


@lru_cache(maxsize=8)
def _words(vocab_size: int, form: str) -> list[bytes]:
    """The encoding of every id of the vocabulary, built once per vocabulary (~6 ms and ~2 MB
    for 32K ids): indexing it is ~4x cheaper than formatting each id. ``ids``: the decimal id
    (JSON array items); ``text``: the word ``t<hex id>``, exactly what
    ``benchcamp.workload.tokens.prompt_text`` writes (the simulated engine reads it back as the id)."""
    if form == "ids":
        return [str(i).encode() for i in range(vocab_size)]
    return [b"t%x" % i for i in range(vocab_size)]


def _encode(block_ids: list[int], block_size: int, vocab_size: int, form: str) -> dict[int, bytes]:
    """Synthesise the blocks in one vectorised call, then encode each block once."""
    flat = list(
        map(
            _words(vocab_size, form).__getitem__, blocks_token_array(block_ids, block_size, vocab_size).ravel().tolist()
        )
    )
    sep = _SEPARATOR[form]
    return {k: sep.join(flat[i * block_size : (i + 1) * block_size]) for i, k in enumerate(block_ids)}


# A client process builds small bodies on its event loop and large ones on its builder thread
# (loadgen.worker.Worker.prepare): evictions and inserts take this lock, so one thread never evicts what
# the other is iterating; lookups need none (a missing block is rebuilt).
_STORE_LOCK = threading.Lock()


def _store(cache: dict[int, bytes], fresh: dict[int, bytes]) -> None:
    """Insert ``fresh``; past ``MAX_CACHED_BLOCKS`` evict the oldest ~10% at once (amortised)."""
    bound = max(1, int(MAX_CACHED_BLOCKS))
    with _STORE_LOCK:
        overflow = len(cache) + len(fresh) - bound
        if overflow > 0:
            for k in list(islice(cache, min(len(cache), max(overflow, bound // 10)))):
                del cache[k]
        cache.update(islice(fresh.items(), bound))  # a prompt larger than the bound keeps its head


def _prompt_bytes(
    form: str, blocks: tuple[int, ...], prompt_len: int, block_size: int, vocab_size: int, salt: int
) -> bytes:
    """The prompt's tokens encoded as ``form``, block by block from the cache: a block's
    encoding never depends on its position, so prompts that share leading blocks share
    a prefix of the same bytes (token ids, or text)."""
    if prompt_len > len(blocks) * block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {block_size} tokens")
    full, rest = divmod(int(prompt_len), int(block_size))
    mask = salt_mask(salt)
    # salted ids taken mod 2^64: the cache key is exactly what token synthesis sees
    keys = [(int(b) ^ mask) & _MASK64 for b in blocks[: full + (1 if rest else 0)]]
    cache = (_BLOCK_BYTES if form == "ids" else _BLOCK_TEXT).setdefault((int(block_size), int(vocab_size)), {})
    cached = [cache.get(k) for k in keys]
    if None in cached:
        fresh = _encode(
            list(dict.fromkeys(k for k, p in zip(keys, cached) if p is None)), int(block_size), int(vocab_size), form
        )
        parts = [p if p is not None else fresh[k] for k, p in zip(keys, cached)]
        _store(cache, fresh)
    else:
        parts = cast(list[bytes], cached)  # every block was cached: no None left
    sep = _SEPARATOR[form]
    if rest:  # the partial last block: its first ``rest`` tokens
        parts[-1] = sep.join(parts[-1].split(sep, rest)[:rest])
    return sep.join(parts)


def prompt_ids_json(blocks: tuple[int, ...], prompt_len: int, block_size: int, vocab_size: int, salt: int = 0) -> bytes:
    """The JSON array body (without brackets) of the prompt's token ids."""
    return _prompt_bytes("ids", blocks, prompt_len, block_size, vocab_size, salt)


def _tail(output_len: int, vllm_sampling: bool = True) -> bytes:
    n = int(output_len)
    # vLLM's sampling fields force the workload's output length exactly (min = max, EOS ignored);
    # servers that refuse them get max_tokens only, and outputs may end early.
    forced = f',"min_tokens":{n},"ignore_eos":true' if vllm_sampling else ""
    return (f',"max_tokens":{n}{forced},"stream":true,"stream_options":{{"include_usage":true}}}}').encode()


@lru_cache(maxsize=16)
def _model_json(model: str) -> bytes:
    return json.dumps(model).encode()


# (api, prompt form) -> the JSON around the encoded prompt; chat sends text only
_PROMPT_FIELD = {
    ("completions", "ids"): (b',"prompt":[', b"]"),
    ("completions", "text"): (b',"prompt":"', b'"'),  # words t<hex>: nothing to escape
    ("chat", "text"): (b',"messages":[{"role":"user","content":"', b'"}]'),
}


def request_body(
    api: str,
    model: str,
    blocks: tuple[int, ...],
    prompt_len: int,
    output_len: int,
    block_size: int,
    vocab_size: int,
    salt: int = 0,
    prompt: str = "ids",
    vllm_sampling: bool = True,
) -> bytes:
    """A streamed request body for ``api``: ``completions`` (``prompt``: ``ids``, a token-id
    prompt, or ``text``) or ``chat`` (one user message holding the prompt as text)."""
    form = "text" if api == "chat" or prompt == "text" else "ids"
    opening, closing = _PROMPT_FIELD[api, form]
    encoded = _prompt_bytes(form, blocks, prompt_len, block_size, vocab_size, salt)
    return b"".join((b'{"model":', _model_json(model), opening, encoded, closing, _tail(output_len, vllm_sampling)))


def recorded_chat_body(model: str, chat: str, output_len: int, vllm_sampling: bool = True) -> bytes:
    """A streamed chat request holding a workload's recorded chat body (the ``chat`` column:
    canonical JSON ``{"messages", "tools"}``) as is: text replay, the server tokenizes it."""
    inner = chat.encode()[1:-1]  # the object's members, without its braces
    return b"".join((b'{"model":', _model_json(model), b",", inner, _tail(output_len, vllm_sampling)))


completions_body = partial(request_body, "completions")
chat_body = partial(request_body, "chat")


API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
BUILDERS = {"completions": completions_body, "chat": chat_body}
