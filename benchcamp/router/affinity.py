"""Session affinity: a request's routing key -> the replica that serves it.

A multi-turn agent runs fastest when every turn lands on the replica that served
the turn before it (that replica's KV cache still holds the session's prefix).
The client (``benchcamp.loadgen``) sends a per-session routing key in a header
(``load.session_header``, default the generic ``X-Session-ID``; SGLang's model
gateway reads ``x-smg-routing-key``); a router in front of the replicas keeps a
key on one replica. The simulated engine's DP router pins a key where its first
request went (placed by load and cached prefix, ``benchcamp.sim.engine.core.Router``);
a stateless router (e.g. a topology router in front of several instances, or
several router processes that must agree) maps the key with the stable hashes
below, the same in every process and run (no Python ``hash()`` and its salt). A
hash ignores load: with many one-request sessions it unbalances the replicas.

The key of a subagent is its root session's (the session tree's top-level id,
with the ``~n`` suffix of a recycled replay): a subagent shares its tree's system
prompt and tools, so the tree's requests go to one replica, as SGLang's gateway
pins a conversation's lineage (``conv_t1``, ``conv_t2`` -> ``conv``).

Two functions, for the two kinds of replica set:

- :func:`replica_index` for replicas numbered ``0..n-1`` (DP ranks): Lamping &
  Veach's jump consistent hash; growing ``n`` to ``n + 1`` moves only ~1/(n+1)
  of the keys.
- :func:`pick` for named replicas (instances of a topology, by address or
  name): rendezvous (highest random weight) hashing; removing one replica moves
  only the keys it held.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

DEFAULT_SESSION_HEADER = "X-Session-ID"
# Header names other stacks read the same key from (for docs and for routers that accept several).
KNOWN_SESSION_HEADERS = (DEFAULT_SESSION_HEADER, "X-SMG-Routing-Key")
# The key travels in an HTTP header: printable ASCII, no separators that would end the line.
MAX_KEY_LEN = 256


# Per-replica accounting: counters of a point's /metrics delta are also kept per DP engine
# (vLLM's `engine` label) as ``engine_key(name, rank)``; the per-replica cache hit rates
# (benchcamp.metrics.engine_hit_rates) come from them.
PER_ENGINE_COUNTERS = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
ENGINE_KEY_SEP = "@engine="


def engine_key(counter: str, engine: object) -> str:
    """The delta key of ``counter`` on one DP engine (``server_hit_rate``'s sum skips it)."""
    return f"{counter}{ENGINE_KEY_SEP}{engine}"


def _h64(data: str) -> int:
    return int.from_bytes(hashlib.blake2b(data.encode("utf-8"), digest_size=8).digest(), "little")


def key_hash(key: str) -> int:
    """A 64-bit hash of ``key``, the same in every process (blake2b, not the salted ``hash()``)."""
    return _h64(key)


def jump_hash(h: int, n: int) -> int:
    """Lamping & Veach (2014), "A Fast, Minimal Memory, Consistent Hash Algorithm": bucket in [0, n)."""
    if n <= 0:
        raise ValueError(f"jump_hash: n={n} replicas, need at least 1")
    b, j = -1, 0
    h &= 0xFFFFFFFFFFFFFFFF
    while j < n:
        b = j
        h = (h * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        j = int((b + 1) * (float(1 << 31) / float((h >> 33) + 1)))
    return b


def replica_index(key: str, n: int) -> int:
    """The replica in ``0..n-1`` (e.g. a DP rank) that serves routing key ``key``."""
    return jump_hash(key_hash(key), n)


def pick(key: str, replicas: Sequence[str]) -> str:
    """The named replica that serves ``key``: rendezvous hashing over ``replicas`` (order-free)."""
    if not replicas:
        raise ValueError("pick: no replicas to route to")
    return max(replicas, key=lambda r: (_h64(f"{r}\x00{key}"), r))


def session_key(session_id: str, root: str | None = None) -> str:
    """The routing key of a replayed session: its root's id (a subagent's tree), else its own."""
    return root or session_id


def check_header_name(name: str) -> str | None:
    """None when ``name`` can be an HTTP header name (RFC 9110 token), else why not."""
    if not name:
        return None
    allowed = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    bad = sorted(set(name) - allowed)
    return f"characters {''.join(bad)!r} are not allowed in a header name" if bad else None


def header_value(key: str) -> str:
    """``key`` as a header value: non-printable or non-ASCII characters replaced, cut to MAX_KEY_LEN."""
    out = "".join(c if " " <= c <= "~" else "_" for c in key)
    return out[:MAX_KEY_LEN]
