"""The simulated vLLM server over real loopback HTTP (a subprocess per server)."""

from __future__ import annotations

import json
import random
import socket

import httpx
import openai
import pytest

from benchcamp.sim.engine import openai_format as fmt
from benchcamp.sim.engine.cli_args import parse_serve_args, redacted_argv, settings_kwargs
from benchcamp.sim.engine.prom import Histogram, Metrics, parse_text
from benchcamp.workload.tokens import prompt_text, prompt_tokens

MODEL = "meta-llama/Llama-3.1-8B-Instruct"    # as in conftest.py
API_KEY = "sk-test-secret-123"


def _ids(n: int, seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(1000, 128000) for _ in range(n)]


def _client(url: str, key: str = API_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)


def _stream(client: openai.OpenAI, prompt, max_tokens: int):
    chunks = list(client.completions.create(
        model=MODEL, prompt=prompt, stream=True, stream_options={"include_usage": True},
        max_tokens=max_tokens, extra_body={"min_tokens": max_tokens, "ignore_eos": True}))
    content = [c for c in chunks if c.choices]
    usage = [c.usage for c in chunks if c.usage is not None]
    return content, usage[-1]


# --- the done-when checks -----------------------------------------------------------
def test_openai_client_streams_a_token_id_prompt(shared_server):
    client = _client(shared_server.url)
    prompt = _ids(300, 1)
    content, usage = _stream(client, prompt, 17)
    assert len(content) == 17                       # one chunk per token per step
    assert "".join(c.choices[0].text for c in content) == fmt.TOKEN_TEXT * 17
    assert [c.choices[0].finish_reason for c in content] == [None] * 16 + ["length"]
    assert usage.prompt_tokens == 300 and usage.completion_tokens == 17 and usage.total_tokens == 317
    assert usage.prompt_tokens_details.cached_tokens == 0   # nothing cached: still sent, as vLLM 0.33 does


def test_second_request_sharing_a_long_prefix_reports_cached_tokens(shared_server):
    client = _client(shared_server.url)
    shared = _ids(2000, 2)
    _stream(client, shared + _ids(50, 3), 4)
    _, usage = _stream(client, shared + _ids(80, 4), 4)
    cached = usage.prompt_tokens_details.cached_tokens
    assert 0 < cached <= 2000 and cached % 16 == 0 and cached >= 2000 - 16
    assert usage.prompt_tokens == 2080


def _metrics(eh, url: str) -> dict[str, float]:
    status, body = eh.http_get(url + "/metrics")
    assert status == 200
    return parse_text(body.decode())


def test_metrics_counters_agree_with_the_sum_of_usage(shared_server, eh):
    url = shared_server.url
    before = _metrics(eh, url)
    client = _client(url)
    shared = _ids(1024, 5)
    total_p = total_c = total_cached = 0
    for i in range(4):
        _, u = _stream(client, shared + _ids(40 + i, 10 + i), 5 + i)
        total_p += u.prompt_tokens
        total_c += u.completion_tokens
        total_cached += u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
    r = client.completions.create(model=MODEL, prompt=_ids(64, 20), max_tokens=3)   # non-streaming
    total_p += r.usage.prompt_tokens
    total_c += r.usage.completion_tokens
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello there"}],
                                       max_tokens=2)
    total_p += c.usage.prompt_tokens
    total_c += c.usage.completion_tokens
    after = _metrics(eh, url)
    lab = f'engine="0",model_name="{MODEL}"'

    def d(name: str) -> float:
        return after[name] - before.get(name, 0.0)
    assert d(f"vllm:prompt_tokens_total{{{lab}}}") == total_p
    assert d(f"vllm:generation_tokens_total{{{lab}}}") == total_c
    assert d(f'vllm:request_success_total{{{lab},finished_reason="length"}}') == 6
    assert d(f"vllm:time_to_first_token_seconds_count{{{lab}}}") == 6
    assert d(f"vllm:e2e_request_latency_seconds_count{{{lab}}}") == 6
    assert total_cached >= 3 * 1024
    assert d(f"vllm:prefix_cache_hits_total{{{lab}}}") == total_cached
    assert d(f"vllm:prefix_cache_queries_total{{{lab}}}") >= total_p - 16 * 6
    assert after[f"vllm:num_requests_running{{{lab}}}"] == 0
    for name in ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"):
        assert f"{name}{{{lab}}}" in after


def test_401_without_the_right_api_key(shared_server, eh):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.post(shared_server.url + "/v1/completions", headers=headers,
                       json={"model": MODEL, "prompt": [1001, 1002], "max_tokens": 1})
        assert r.status_code == 401
        assert r.json() == {"error": "Unauthorized"}      # vLLM's auth middleware, not an ErrorResponse
    with pytest.raises(openai.AuthenticationError):
        _client(shared_server.url, key="wrong").completions.create(model=MODEL, prompt=[1001], max_tokens=1)
    assert eh.http_get(shared_server.url + "/health")[0] == 200          # health needs no key, as in vLLM
    assert eh.http_get(shared_server.url + "/v1/models")[0] == 401


def test_400_when_the_prompt_exceeds_the_context_length(shared_server):
    client = _client(shared_server.url)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=_ids(8193, 6), max_tokens=1)
    assert "maximum context length is 8192" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:      # fills the context: no room for output
        client.completions.create(model=MODEL, prompt=_ids(8192, 6), max_tokens=1)
    assert "max_tokens must be at least 1, got 0" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=_ids(100, 6), max_tokens=8200)
    assert "max_tokens=8200 cannot be greater than max_model_len=8192" in str(e.value)
    r = client.completions.create(model=MODEL, prompt=_ids(8100, 6), max_tokens=1000)   # cut to what is left
    assert r.usage.completion_tokens == 92
    r = httpx.post(shared_server.url + "/v1/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                   json={"model": MODEL, "prompt": _ids(9000, 7)})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "BadRequestError" and r.json()["error"]["code"] == 400


def test_404_unknown_model_and_models_listing(shared_server):
    client = _client(shared_server.url)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt=[1001], max_tokens=1)
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert models[0].owned_by == "vllm" and models[0].max_model_len == 8192


def test_without_max_tokens_completions_get_16_tokens_and_chat_the_rest_of_the_context(shared_server):
    r = httpx.post(shared_server.url + "/v1/completions", json={"model": MODEL, "prompt": _ids(8160, 8)},
                   headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    assert r.status_code == 200
    assert r.json()["usage"] == {"prompt_tokens": 8160, "total_tokens": 8176, "completion_tokens": 16,
                                 "prompt_tokens_details": {"cached_tokens": 0, "created_cache_tokens": None,
                                                           "multimodal_tokens": None},
                                 "completion_tokens_details": None}
    text = prompt_text(list(range(900, 1500)), 8150, 16, 128256)
    r = httpx.post(shared_server.url + "/v1/chat/completions", timeout=30,
                   json={"model": MODEL, "messages": [{"role": "user", "content": text}]},
                   headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8192 - 8150


def test_chat_streaming_and_non_streaming(shared_server):
    client = _client(shared_server.url)
    text = prompt_text([11, 12, 13], 40, 16, 128256)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 5 and content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.prompt_tokens == 40 and chunks[-1].usage.completion_tokens == 5
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=3)
    assert r.choices[0].message.content == fmt.TOKEN_TEXT * 3 and r.usage.completion_tokens == 3


def test_text_prompts_made_by_benchcamp_tokenize_exactly():
    ids = prompt_tokens([7, 8], 20, 16, 128256)
    assert fmt.tokenize_text(prompt_text([7, 8], 20, 16, 128256)) == ids
    assert len(fmt.tokenize_text("any other words here")) == 4


def test_client_disconnect_aborts_the_request(shared_server, eh):
    srv = shared_server
    lab = f'engine="0",model_name="{MODEL}"'
    key = f'vllm:request_success_total{{{lab},finished_reason="abort"}}'
    aborts = _metrics(eh, srv.url)[key]
    with socket.create_connection(("127.0.0.1", int(srv.url.rsplit(":", 1)[1]))) as s:
        body = json.dumps({"model": MODEL, "prompt": _ids(32, 9), "max_tokens": 5000, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer %b\r\nContent-Length: %d\r\n\r\n%b"
                  % (API_KEY.encode(), len(body), body))
        s.settimeout(10)
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)

    def aborted():
        m = _metrics(eh, srv.url)
        return m[key] == aborts + 1 and m[f"vllm:num_requests_running{{{lab}}}"] == 0
    assert eh.wait_until(aborted, timeout=10)


def test_startup_log_warns_unknown_flags_and_never_logs_the_key(shared_server):
    out = shared_server.output
    assert "--swap-space 4" in out and "WARNING" in out
    assert "Starting vLLM API server" in out
    assert API_KEY not in out


def test_api_key_from_env_and_positional_model(shared_servers, eh):
    srv = shared_servers["env"]
    assert eh.http_get(srv.url + "/v1/models")[0] == 401
    assert eh.http_get(srv.url + "/v1/models", {"Authorization": "Bearer envkey"})[0] == 200
    assert "envkey" not in srv.output


def test_bad_flag_values_are_clear_errors(capsys):
    from benchcamp.sim.engine.server import run_server

    assert run_server(["--model", MODEL, "--port", "0", "--fault", "error-rate=2"]) == 2
    assert "error-rate=2: must be between 0 and 1" in capsys.readouterr().err
    assert run_server(["--model", MODEL, "--port", "0", "-tp", "3", "--num-gpus", "8"]) == 2
    assert "--tensor-parallel-size" in capsys.readouterr().err


# --- pure parts ------------------------------------------------------------------------
def test_cli_args_accept_vllm_flags():
    a = parse_serve_args(["serve", "m/x", "-tp", "2", "-dp", "4", "--no-enable-prefix-caching", "--max-num-seqs",
                          "64", "--enforce-eager", "--swap-space", "4", "--foo=bar", "--api-key", "s3cret"])
    assert a.args.model == "m/x" and a.args.tensor_parallel_size == 2 and a.args.data_parallel_size == 4
    assert a.args.enable_prefix_caching is False and a.args.max_num_seqs == 64
    assert a.ignored == ["--enforce-eager", "--swap-space", "4", "--foo=bar"]
    kw = settings_kwargs(a.args)
    assert kw["enable_prefix_caching"] is False and "max_model_len" not in kw
    assert "s3cret" not in " ".join(redacted_argv(["--api-key", "s3cret", "--api-key=s3cret"]))
    with pytest.raises(SystemExit):
        parse_serve_args(["--port", "1"])        # no model


def test_context_check_and_request_parsing():
    assert fmt.check_context(10, None, 100) == 90
    with pytest.raises(fmt.OpenAIError) as e:
        fmt.check_context(100, 1, 100)
    assert e.value.status == 400
    p = fmt.parse_request({"model": "m", "prompt": [[5, 6, 7]], "max_tokens": 4, "min_tokens": 4,
                           "stream": True, "stream_options": {"include_usage": True}}, chat=False)
    assert p.prompt_ids == [5, 6, 7] and p.include_usage and p.max_tokens == 4
    for bad in ({"model": "m", "prompt": [1], "max_tokens": 0}, {"model": "m", "prompt": ["a", "b"]},
                {"model": "m", "prompt": [1], "max_tokens": 2, "min_tokens": 3}, {"prompt": [1]}):
        with pytest.raises(fmt.OpenAIError) as e:
            fmt.parse_request(bad, chat=False)
        assert json.loads(e.value.body())["error"]["code"] == 400


def test_stream_chunks_are_valid_json_like_vllm():
    f = fmt.StreamFormatter("cmpl-1", 'we"ird', chat=False, created=5)
    c = json.loads(f.chunk(2, last=True)[len(b"data: "):])
    assert c == {"id": "cmpl-1", "object": "text_completion", "created": 5, "model": 'we"ird',
                 "choices": [{"index": 0, "text": " t t", "logprobs": None, "finish_reason": "length",
                              "stop_reason": None, "prompt_token_ids": None, "token_ids": None}]}
    assert "usage" not in json.loads(f.chunk(1, last=False)[len(b"data: "):])   # no "usage": null, as vLLM
    u = json.loads(f.usage_chunk(10, 3, 0, details=True)[len(b"data: "):])
    assert u["choices"] == [] and u["usage"] == {"prompt_tokens": 10, "total_tokens": 13, "completion_tokens": 3,
                                                 "prompt_tokens_details": {"cached_tokens": 0}}
    u = json.loads(f.usage_chunk(10, 3, 0, details=False)[len(b"data: "):])
    assert "prompt_tokens_details" not in u["usage"]      # without --enable-prompt-tokens-details
    u = json.loads(f.usage_chunk(10, 3, 16, details=True)[len(b"data: "):])
    assert u["usage"]["prompt_tokens_details"] == {"cached_tokens": 16}


def test_histogram_buckets_are_cumulative_le():
    h = Histogram((0.1, 1.0))
    for v in (0.1, 0.5, 2.0):
        h.observe(v)
    m = Metrics("x")
    m.engines[0].ttft = h
    s = parse_text(m.render({}))
    lab = 'engine="0",model_name="x"'
    assert s[f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.1"}}'] == 1
    assert s[f'vllm:time_to_first_token_seconds_bucket{{{lab},le="1.0"}}'] == 2
    assert s[f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}}'] == 3
    assert s[f"vllm:time_to_first_token_seconds_sum{{{lab}}}"] == pytest.approx(2.6)
