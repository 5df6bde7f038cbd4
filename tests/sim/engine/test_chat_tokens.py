"""Chat requests the simulated engine did not get from benchcamp: counted as a chat template
counts them (benchcamp.workload.tokencount: the served Llama-3.1-8B's family, ``llama-3``) and, with ``tools``,
answered with ``tool_calls`` as vLLM answers them. Real loopback HTTP to a real simulated-engine subprocess.
The Llama 3 counts checked are in llama3_counts.json (its ``provenance`` says how they were made)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from benchcamp.workload import tokencount
from benchcamp.workload.agentperf import read_turns
from benchcamp.workload.tokens import prompt_text

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # as in conftest.py
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
LLAMA3 = json.loads((Path(__file__).parent / "llama3_counts.json").read_text())
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the failing test."}]


@pytest.fixture(scope="module")
def server():
    from tests.sim.engine.conftest import ServerProc, base_args

    p = ServerProc(base_args("--enable-prompt-tokens-details", "--time-scale", "0"))  # free steps: counts only
    p.wait_listening()
    yield p
    p.stop()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_every_aa_trajectory_within_5_percent_of_llama_3s_count(server, agentperf_replays):
    """All 168 recorded turns of agentperf-default-v1 sent as recorded (messages + tools); the
    engine's usage.prompt_tokens per trajectory (task) within ±5% of what Llama 3's tokenizer and
    chat template count (the served model's; the recording model counted ~10% more)."""
    turns = read_turns(agentperf_replays / "agentperf-default-v1")
    errors = {}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for task, ts in turns.items():
            got = []
            for t in ts:
                r = c.post("/v1/chat/completions", json={"model": MODEL, **t.body, "max_tokens": 1})
                assert r.status_code == 200, r.text
                got.append(r.json()["usage"]["prompt_tokens"])
            errors[task] = sum(got) / sum(LLAMA3["agentperf_chats"][task]) - 1
    assert max(map(abs, errors.values())) <= 0.05, errors
    # a repeat of the last turn is answered from the prefix cache (its ids are stable)
    r = httpx.post(server.url + "/v1/chat/completions", timeout=60,
                   json={"model": MODEL, **ts[-1].body, "max_tokens": 1}).json()
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= r["usage"]["prompt_tokens"] - 16


def test_the_agentx_harness_prompts_count_as_llama_3_counts_them(server):
    """The AgentX harness's chat text (its coding corpus decoded from Llama 3 token blocks, as it
    synthesises a trace's ``in`` tokens) is counted as Llama 3 counts it, template included: within 5%
    over the 12 prompts, 15% each (64-token blocks of code, prose and JSON vary)."""
    assert tokencount.counter_for(MODEL).family == "llama-3"
    got, want = [], []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for p in LLAMA3["harness_prompts"]:
            msgs = [{"role": "system", "content": "[rid:0123abcd] You are a coding agent."},
                    {"role": "user", "content": p["text"]}]
            r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 1})
            assert r.status_code == 200, r.text
            got.append(r.json()["usage"]["prompt_tokens"])
            want.append(p["llama3"] + 13 + 5 * 2 + 25)  # the system text is 13 Llama 3 tokens; the template's
    assert abs(sum(got) / sum(want) - 1) <= 0.05, (sum(got), sum(want))
    assert all(abs(g / w - 1) <= 0.15 for g, w in zip(got, want)), list(zip(got, want))


def test_tools_count_and_get_a_tool_call_streamed_and_not(server):
    client = _client(server.url)
    plain = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2)
    assert plain.usage.prompt_tokens == tokencount.counter_for(MODEL).chat_tokens(MSGS, None)
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "length"

    r = client.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, max_tokens=4,
                                       extra_body={"min_tokens": 4, "ignore_eos": True})
    assert r.usage.prompt_tokens == tokencount.counter_for(MODEL).chat_tokens(MSGS, TOOLS) > plain.usage.prompt_tokens
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content is None
    assert call.id.startswith("chatcmpl-tool-") and call.type == "function" and call.function.name == "bash"
    assert json.loads(call.function.arguments) == {"command": " t" * 4}

    chunks = list(client.chat.completions.create(
        model=MODEL, messages=MSGS, tools=TOOLS, max_tokens=5, stream=True, stream_options={"include_usage": True},
        extra_body={"min_tokens": 5, "ignore_eos": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(deltas) == 5  # one per generated token
    first = deltas[0].tool_calls[0]
    assert first.index == 0 and first.id.startswith("chatcmpl-tool-") and first.function.name == "bash"
    assert all(d.tool_calls[0].id is None and d.tool_calls[0].function.name is None for d in deltas[1:])
    args = "".join(d.tool_calls[0].function.arguments for d in deltas)
    assert json.loads(args) == {"command": " t" * 5}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens == 5

    none = client.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, tool_choice="none", max_tokens=2)
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content == " t t"


def test_chat_bodies_benchcamp_builds_are_still_counted_word_for_word(server):
    text = prompt_text([11, 12, 13], 40, 16, 128256)
    r = _client(server.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=1)
    assert r.usage.prompt_tokens == 40


def test_benchcamp_client_times_tool_call_streams(server):
    """Tool-call deltas are output: the load generator's stream reader stamps the first token and
    counts one chunk per token, as for content."""
    import asyncio

    from benchcamp.loadgen.http_stream import Pool

    body = json.dumps({"model": MODEL, "messages": MSGS, "tools": TOOLS, "max_tokens": 6, "min_tokens": 6,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()

    async def go():
        pool = Pool(server.url)
        try:
            return await pool.request("/v1/chat/completions", "r1", body, 30.0)
        finally:
            pool.close()

    out = asyncio.run(go())
    assert out.error is None and out.first is not None and out.chunks == 6
    assert out.usage["completion_tokens"] == 6
