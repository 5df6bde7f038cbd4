"""Mooncake trace import: the shared conversation trace, and malformed lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchcamp.cli import main
from benchcamp.workload.model import read_workload
from benchcamp.workload.mooncake import TraceError, read_mooncake
from benchcamp.workload.stats import theoretical_hit_rate

TRACE = Path("/work/shared/traces/mooncake/conversation_trace.jsonl")
needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"shared Mooncake trace not present at {TRACE}")


def _independent_hit_rate(lines: list[dict]) -> float:
    """Prefix tuples of full 512-token blocks, file order (timestamps are sorted)."""
    seen: set[tuple[int, ...]] = set()
    hit = total = 0
    for d in lines:
        ids, n = d["hash_ids"], d["input_length"]
        prefixes = [tuple(ids[:i + 1]) for i in range(n // 512)]
        cached = 0
        for p in prefixes:
            if p not in seen:
                break
            cached += 512
        hit += min(cached, (n - 1) // 512 * 512)  # the last token is always computed
        total += n
        seen.update(prefixes)
    return hit / total


@needs_trace
@pytest.mark.slow
def test_conversation_trace_import(tmp_path):
    lines = [json.loads(x) for x in TRACE.read_text().splitlines() if x.strip()]
    w = read_mooncake(TRACE)
    assert len(w.sessions) == len(lines) == 12031 and w.block_size == 512
    for s, d in zip(w.sessions[::997], lines[::997]):
        (r,) = s.requests
        assert s.arrival_s == d["timestamp"] / 1000
        assert list(r.blocks) == d["hash_ids"] and r.prompt_len == d["input_length"]
        assert r.output_len == d["output_length"]
    expected = _independent_hit_rate(lines)
    assert 0.2 < expected < 0.6  # sanity: the conversation trace reuses a good share of its prompts
    assert theoretical_hit_rate(w) == pytest.approx(expected, abs=1e-12)
    out = tmp_path / "conv.parquet"
    assert main(["workload", "import-mooncake", str(TRACE), "--out", str(out)]) == 0
    back = read_workload(out)
    assert back.digest == w.digest
    assert json.loads(out.with_suffix(".json").read_text())["stats"]["requests"] == 12031


GOOD = {"timestamp": 1500, "input_length": 600, "output_length": 10, "hash_ids": [7, 8]}


def _trace(tmp_path: Path, bad_line: str) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([json.dumps(GOOD), json.dumps(GOOD), bad_line]) + "\n")
    return p


@pytest.mark.parametrize("line, expect", [
    ("{not json", "line 3: not valid JSON"),
    (json.dumps([1, 2]), "line 3: expected a JSON object"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "hash_ids"}), "line 3: missing field(s) hash_ids"),
    (json.dumps(dict(GOOD, input_length="600")), "line 3: input_length must be an integer"),
    (json.dumps(dict(GOOD, output_length=0)), "line 3: output_length must be an integer from 1 to"),
    (json.dumps(dict(GOOD, timestamp=-1)), "line 3: timestamp must be"),
    (json.dumps(dict(GOOD, hash_ids=[1, "x"])), "line 3: hash_ids must be a list"),
    (json.dumps(dict(GOOD, hash_ids=[1])), "line 3: input_length=600 needs 2 hash_ids"),
])
def test_malformed_line_names_line_and_problem_and_writes_nothing(tmp_path, line, expect, capsys):
    trace = _trace(tmp_path, line)
    with pytest.raises(TraceError) as err:
        read_mooncake(trace)
    assert expect in str(err.value) and "t.jsonl" in str(err.value)
    out = tmp_path / "out" / "w.parquet"
    assert main(["workload", "import-mooncake", str(trace), "--out", str(out)]) == 2
    assert expect in capsys.readouterr().err
    assert not out.exists() and not out.with_suffix(".json").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_small_trace_replays_by_timestamp_with_shared_prefix(tmp_path):
    trace = _trace(tmp_path, json.dumps(dict(GOOD, timestamp=2500, input_length=1100, hash_ids=[7, 8, 9])))
    w = read_mooncake(trace, name="small")
    assert [s.arrival_s for s in w.sessions] == [1.5, 1.5, 2.5]
    assert w.name == "small" and all(len(s.requests) == 1 for s in w.sessions)
    # line 2 repeats line 1 (1 full block + 88 tokens): 512 cached. Line 3 makes block 8 full, but
    # it was only partial before, so again only block 7 hits: 512.
    assert theoretical_hit_rate(w) == pytest.approx((0 + 512 + 512) / (600 + 600 + 1100))
