"""AA-AgentPerf replays through the load generator against the real simulated engine (loopback
HTTP): as text (the recorded messages and tools to /v1/chat/completions, counted by the server)
and as token ids (the recorded counts and shared prefixes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchcamp.loadgen import PointSpec, run_point
from benchcamp.metrics import in_window
from benchcamp.results.records import read_records
from benchcamp.workload.agentperf import read_agentperf
from tests.sim.engine.conftest import MODEL, ServerProc, base_args

# Llama 3's own count of each recorded turn (the engine's model is a Llama 3: it counts text as Llama 3 does)
LLAMA3 = json.loads((Path(__file__).parents[1] / "sim" / "engine" / "llama3_counts.json").read_text())["agentperf_chats"]


@pytest.fixture(scope="module")
def engine():
    p = ServerProc(base_args("--enable-prompt-tokens-details", "--time-scale", "0"))
    p.wait_listening()
    yield p
    p.stop()


@pytest.mark.slow  # ~4 s each: a worker process and a sweep point per replay form
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_replay_as_text_and_as_token_ids(engine, agentperf_replays, tmp_path, api):
    w = read_agentperf("agentperf-default-v1", agentperf_replays)
    spec = PointSpec("c8", "closed", 8, warmup_s=0.0, duration_s=30.0, drain_s=10.0, request_timeout_s=30.0,
                     workers=1, api=api, max_requests=16)
    res = run_point(engine.url, None, MODEL, w, spec, tmp_path)
    df = read_records(res.records_path)
    df = df[in_window(df, res.window)]
    assert len(df) == 16 and (df["status"] == 200).all()
    assert df["first_token_s"].notna().all()  # tool-call answers (chat: the turns have tools) are timed too
    later = df[df["turn"] > 0]
    assert len(later) > 0 and (later["cached_tokens"] > 0).all()  # turns extend the previous turn's prefix
    if api == "completions":  # token ids: the recorded counts exactly
        assert (df["prompt_tokens"] == df["expected_prompt_tokens"]).all()
    else:  # text: the server's own count of the recorded body (messages + tools), near Llama 3's count of it
        # (AA's recording model has another vocabulary: ~0.91x of its counts, tests/sim/engine/test_chat_tokens.py)
        llama3 = [LLAMA3[sid.split("~")[0]][int(t)] for sid, t in zip(df["session_id"], df["turn"])]
        ratio = df["prompt_tokens"].sum() / sum(llama3)
        assert 0.95 <= ratio <= 1.05 and (df["prompt_tokens"] != df["expected_prompt_tokens"]).any()
