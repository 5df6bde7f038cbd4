"""AA-AgentPerf replays (agentperf-local 0.3.4's package data, Apache-2.0, Artificial Analysis):
import, both replay forms, and the token-count estimate against the recorded counts.
The replay files come from `make agentperf-data` (the `agentperf_replays` fixture)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchcamp.cli import main
from benchcamp.workload import tokencount
from benchcamp.workload.agentperf import read_agentperf, read_turns
from benchcamp.workload.model import SCHEMA, Request, Session, Workload, read_workload, write_workload


@pytest.fixture(scope="module")
def default_v1(agentperf_replays):
    return read_agentperf("agentperf-default-v1", agentperf_replays)


def test_import_keeps_every_turn_its_recorded_counts_delays_and_chat(agentperf_replays, default_v1, tmp_path):
    w = default_v1
    turns = read_turns(agentperf_replays / "agentperf-default-v1")
    assert len(w.sessions) == 8 and sum(len(s.requests) for s in w.sessions) == 168
    for s in w.sessions:
        rec = turns[s.id]
        assert [r.prompt_len for r in s.requests] == [t.recorded_prompt_tokens for t in rec]
        assert [r.output_len for r in s.requests] == [t.target_output_tokens for t in rec]
        assert [r.think_s for r in s.requests] == [0.0] + [t.delay_after_s for t in rec[:-1]]
        for r, t in zip(s.requests, rec):
            assert json.loads(r.chat or "") == t.body  # text replay: the recorded body as is
            assert len(r.blocks) == -(-r.prompt_len // w.block_size)
    # token-id replay: each turn extends the previous one's prefix
    for s in w.sessions:
        for a, b in zip(s.requests, s.requests[1:]):
            shared = next((i for i, (x, y) in enumerate(zip(a.blocks, b.blocks)) if x != y), len(a.blocks))
            assert shared >= 0.8 * (a.prompt_len // w.block_size), (s.id, b.turn)
    p = tmp_path / "aa.parquet"
    digest = write_workload(w, p)
    back = read_workload(p)
    assert back.digest == digest and back.sessions[0].requests[3].chat == w.sessions[0].requests[3].chat
    assert pq.read_schema(p).names == [*SCHEMA.names, "chat"]


def test_workloads_without_text_keep_their_schema_bytes_and_digest(tmp_path):
    import hashlib

    w = Workload("t", 16, 32000, [Session("a", [Request(0, (1, 2), 20, 4, 0.0)])], {"seed": 1})
    digest = write_workload(w, tmp_path / "a.parquet")
    assert pq.read_schema(tmp_path / "a.parquet").names == SCHEMA.names  # no optional column written
    # digest and bytes as the model before the optional column wrote them (b1bac55)
    assert digest == "ba377e9e58a2596754ca17f433d46e9d784a1ca81de7f3f9d5e138002e901036"
    assert hashlib.sha256((tmp_path / "a.parquet").read_bytes()).hexdigest() == (
        "f5d1f90f50ab15f061c36b0c54a1c31fbda181bf58c781b207e8896e342a973e"
    )
    w2 = Workload("t", 16, 32000, [Session("a", [Request(0, (1, 2), 20, 4, 0.0, '{"messages":[]}')])], {"seed": 1})
    assert w2.digest != w.digest  # text is part of the content of a workload that has it


def test_cli_import_agentperf_then_stats(agentperf_replays, tmp_path, capsys):
    out = tmp_path / "aa.parquet"
    assert main(["workload", "import-agentperf", "--from", str(agentperf_replays), "--out", str(out)]) == 0
    assert "8 sessions, 168 requests, prompt tokens recorded" in capsys.readouterr().out
    assert main(["workload", "stats", str(out), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["requests"] == 168 and st["context_max"] == 56000 and st["context_p50"] == pytest.approx(11884.5)
    assert json.loads(out.with_suffix(".json").read_text())["source"] == "agentperf-local"
    # a replay without recorded counts (aa-mini-v1) is counted by the estimate
    assert main(["workload", "import-agentperf", "aa-mini-v1", "--from", str(agentperf_replays), "--out",
                 str(tmp_path / "mini.parquet")]) == 0
    assert "prompt tokens estimated" in capsys.readouterr().out
    assert main(["workload", "import-agentperf", "nope", "--from", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not found" in capsys.readouterr().err


def _per_task(turns, counts):
    return {k: sum(counts[k]) / sum(t.recorded_prompt_tokens for t in v) - 1 for k, v in turns.items()}


def test_estimate_within_5_percent_on_every_trajectory_and_held_out(agentperf_replays):
    """The shipped estimate on every AA trajectory (the goal), and the same holds for coefficients
    fitted without the task they predict (leave-one-task-out: the accuracy docs quote)."""
    from scipy.optimize import nnls

    turns = read_turns(agentperf_replays / "agentperf-default-v1")
    est = tokencount.Estimate()
    shipped = _per_task(turns, {k: [est.chat_tokens(t.body["messages"], t.body.get("tools")) for t in v]
                                for k, v in turns.items()})
    assert max(map(abs, shipped.values())) <= 0.05, shipped

    def rows(v):
        out = []
        for t in v:
            pieces = tokencount.chat_pieces(t.body["messages"], t.body.get("tools"))
            out.append(np.r_[sum(p[1] for p in pieces), sum(p[2] for p in pieces), 1.0])
        return np.array(out)

    x = {k: rows(v) for k, v in turns.items()}
    y = {k: np.array([t.recorded_prompt_tokens for t in v], float) for k, v in turns.items()}
    held = {}
    for k in turns:
        xs = np.vstack([x[o] for o in turns if o != k])
        ys = np.concatenate([y[o] for o in turns if o != k])
        w = nnls(xs / ys[:, None], np.ones(len(ys)))[0]
        held[k] = (x[k] @ w).sum() / y[k].sum() - 1
    assert max(map(abs, held.values())) <= 0.05, held


def test_token_ids_share_the_prefix_of_shared_messages():
    est = tokencount.Estimate()
    msgs = [{"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": "List files."}]
    more = [*msgs, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls -la"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt\n"}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}}}}}]
    a, b = est.chat_ids(msgs, tools, 32000), est.chat_ids(more, tools, 32000)
    assert b[: len(a)] == a and len(b) > len(a)
    assert est.chat_tokens(msgs, tools) > est.chat_tokens(msgs, None)  # tool definitions count
    assert len(est.chat_ids(more, tools, 32000)) == est.chat_tokens(more, tools)
