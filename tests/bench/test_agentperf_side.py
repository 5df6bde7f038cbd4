"""bench/agentperf_side_by_side.py's own rules and its peer setup: the o200k_base rebuild from js-tiktoken's format
(bench/common/peers.py),
agentperf-local's pooled output speed (tool-call and one-token turns excluded), the replay subset."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from bench import agentperf_side_by_side as side
from bench.common.peers import o200k_bytes


def test_o200k_rebuild_reads_offsets_and_writes_rank_order(tmp_path: Path) -> None:
    toks = [base64.b64encode(t).decode() for t in (b"a", b"b", b"ab", b"zz", b"q")]
    # js-tiktoken: "<prefix> <offset> tok tok ..." per line, rank = offset + position
    ranks = f'! 0 {toks[0]} {toks[1]}\n" 2 {toks[2]}\nz 5 {toks[3]} {toks[4]}\n'
    f = tmp_path / "enc.json"
    f.write_text(json.dumps({"pat_str": "", "special_tokens": {}, "bpe_ranks": ranks}))
    assert o200k_bytes(f).decode().splitlines() == [
        f"{toks[0]} 0",
        f"{toks[1]} 1",
        f"{toks[2]} 2",
        f"{toks[3]} 5",
        f"{toks[4]} 6",
    ]


def test_pooled_output_speed_skips_tool_call_and_one_token_turns() -> None:
    ttft = np.array([0.1, 0.2, 0.3, 0.4])
    last = ttft + np.array([1.0, 2.0, 5.0, 0.0])
    out = np.array([11.0, 21.0, 100.0, 1.0])
    r = side.stats(
        ttft, ttft, last, last + 0.01, out, np.full(4, 100.0), np.full(4, 50.0), np.array([False, False, True, False])
    )
    assert r["output_tok_s_pooled"] == pytest.approx((10 + 20) / (1.0 + 2.0))  # the tool-call turn is not pooled
    assert r["tool_call_turns"] == 1
    assert r["cache_hit_client"] == pytest.approx(0.5)
    assert r["agents_at_tier"] == 0.0  # 10 tok/s is below the 20 tok/s tier


def test_replay_subset_keeps_each_tasks_first_turns(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "traces").mkdir(parents=True)
    tasks = []
    for t, n in (("a", 5), ("b", 2)):
        (src / "traces" / f"{t}.jsonl").write_text(
            "".join(json.dumps({"turn_id": f"{t}:{i}", "recorded_tool_calls_after": [{}] * i}) + "\n" for i in range(n))
        )
        tasks.append({"task_id": t, "trace": f"traces/{t}.jsonl", "model_calls": n, "tool_calls": n * (n - 1) // 2})
    (src / "manifest.json").write_text(json.dumps({"version": 1, "tasks": tasks}))
    manifest, n = side.write_replay(src, tmp_path / "dst", 3)
    assert n == 5
    man = json.loads(manifest.read_text())
    assert [t["model_calls"] for t in man["tasks"]] == [3, 2]
    assert [t["tool_calls"] for t in man["tasks"]] == [0 + 1 + 2, 0 + 1]  # agentperf-local checks them too
    rows = (tmp_path / "dst" / "traces" / "a.jsonl").read_text().splitlines()
    assert [json.loads(r)["turn_id"] for r in rows] == ["a:0", "a:1", "a:2"]
