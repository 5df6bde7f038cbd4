"""benchcamp.router.affinity: a routing key always lands on the same replica, spread evenly, stable across processes."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from benchcamp.router.affinity import check_header_name, header_value, jump_hash, pick, replica_index, session_key


def test_same_key_same_replica_and_keys_spread_evenly():
    keys = [f"session-{i}" for i in range(4000)]
    first = [replica_index(k, 4) for k in keys]
    assert first == [replica_index(k, 4) for k in keys]
    counts = Counter(first)
    assert set(counts) == {0, 1, 2, 3}
    assert all(800 <= c <= 1200 for c in counts.values()), counts


def test_the_hash_is_the_same_in_another_process():
    """Not Python's salted hash(): a router in another process (or run) agrees with this one."""
    code = "from benchcamp.router.affinity import replica_index; print([replica_index(f'k{i}', 7) for i in range(50)])"
    env_out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": "12345", "PATH": ""}).stdout.strip()
    assert env_out == str([replica_index(f"k{i}", 7) for i in range(50)])


def test_growing_the_replica_set_moves_few_keys():
    keys = [f"s{i}" for i in range(3000)]
    moved = sum(replica_index(k, 8) != replica_index(k, 9) for k in keys)
    assert moved < 3000 * 0.2            # jump hash moves ~1/9 of them; a modulo would move ~8/9
    assert all(replica_index(k, 9) == 8 for k in keys if replica_index(k, 8) != replica_index(k, 9))


def test_named_replicas_rendezvous_moves_only_the_removed_replicas_keys():
    names = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
    keys = [f"s{i}" for i in range(600)]
    before = {k: pick(k, names) for k in keys}
    assert set(before.values()) == set(names)
    assert before == {k: pick(k, list(reversed(names))) for k in keys}   # order-free
    after = {k: pick(k, names[:2]) for k in keys}
    assert all(after[k] == v for k, v in before.items() if v != names[2])
    with pytest.raises(ValueError, match="no replicas"):
        pick("x", [])


def test_jump_hash_rejects_no_replicas_and_session_keys_are_the_roots():
    with pytest.raises(ValueError, match="at least 1"):
        jump_hash(1, 0)
    assert session_key("s1-sub0", "s1") == "s1" and session_key("s1") == "s1"
    assert header_value("a\r\nX-Evil: 1") == "a__X-Evil: 1"
    assert check_header_name("X-Session-ID") is None and check_header_name("") is None
    assert "not allowed" in (check_header_name("X Session") or "")
