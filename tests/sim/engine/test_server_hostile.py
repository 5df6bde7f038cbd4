"""The simulated server against hostile input, and answering like the pinned vLLM (0.33).

Every check runs against a real server subprocess over loopback. Socket timeouts below
are liveness bounds (a hang fails the test instead of blocking it), not speed checks.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from benchcamp.config import PINNED_VLLM
from benchcamp.loadgen.scrape import parse_prometheus, scrape
from benchcamp.sim.engine.prom import parse_text

KEY = "sk-hostile-1"


@pytest.fixture(scope="module")
def servers(eh):
    base_args = eh.base_args
    procs = eh.start_many({
        "main": (base_args("--api-key", KEY, "--enable-prompt-tokens-details", "--max-model-len", "8192",
                           "--request-body-timeout-s", "1", "--max_num_seqs", "64"),
                 {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "1"}),
        "dp2": (base_args("--enable-prompt-tokens-details", "-dp", "2", "--num-gpus", "2"), None),
        "drop": (base_args("--fault", "drop-stream-after-tokens=2"), None),
    })
    yield procs
    for p in procs.values():
        p.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _raw(url: str, head: bytes, body: bytes = b"", timeout: float = 20) -> bytes:
    """Send ``head`` (+ ``body``), return everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", _port(url))) as s:
        s.settimeout(timeout)
        s.sendall(head + body)
        got = b""
        while True:
            try:
                part = s.recv(65536)
            except ConnectionResetError:
                return got
            if not part:
                return got
            got += part
            if b"\r\n\r\n" in got:
                hdr, _, rest = got.partition(b"\r\n\r\n")
                n = [int(x.split(b":")[1]) for x in hdr.split(b"\r\n") if x.lower().startswith(b"content-length:")]
                if n and len(rest) >= n[0]:
                    return got


def _post_head(length: int, path: bytes = b"/v1/completions") -> bytes:
    return (b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer %b\r\n"
            b"Content-Length: %d\r\n\r\n" % (path, KEY.encode(), length))


def _json_error(raw: bytes, status: int) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d" % status), head
    assert b"application/json" in head
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err


def _post(url: str, body: dict, key: str | None = KEY) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}"} if key else {})


def test_deeply_nested_json_is_a_json_400(servers):
    body = b"[" * 100_000
    err = _json_error(_raw(servers["main"].url, _post_head(len(body)), body), 400)
    assert "nested too deeply" in err["message"] and err["type"] == "BadRequestError"
    assert "Traceback" not in servers["main"].output


def test_a_body_over_the_limit_is_refused_from_content_length_before_it_is_read(servers):
    url = servers["main"].url
    # 70 MB announced, nothing sent: the answer cannot wait for the body
    err = _json_error(_raw(url, _post_head(70 * 1024 * 1024)), 413)
    assert "over the limit" in err["message"]
    assert httpx.get(url + "/health").status_code == 200


def test_a_chunked_body_over_the_limit_is_a_json_413(servers):
    url = servers["main"].url
    big = b'{"model": "m", "prompt": [' + b"1," * 2_000_000 + b"1]}"   # ~4 MB > 8192 x 32 bytes
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %b\r\nTransfer-Encoding: chunked\r\n\r\n" % KEY.encode())
    body = b"%x\r\n%b\r\n0\r\n\r\n" % (len(big), big)
    try:
        raw = _raw(url, head, body)
    except (BrokenPipeError, ConnectionResetError):
        pytest.skip("server closed before the body was sent")
    _json_error(raw, 413)


@pytest.mark.parametrize("ids, named", [([1001, 2 ** 70], str(2 ** 70)), ([1001, -5], "-5"),
                                        ([128256], "128256")])
def test_out_of_vocabulary_token_ids_are_400_like_vllm(servers, ids, named):
    r = _post(servers["main"].url, {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": ids, "max_tokens": 1})
    assert r.status_code == 400
    if int(named) < 0:  # vLLM's request schema refuses it (FastAPI validation), before the vocabulary check
        assert r.json()["error"]["param"] == "body.prompt.1" and r.json()["error"]["type"] == "Bad Request"
        return
    assert r.json()["error"]["message"] == f"Token id {named} is out of vocabulary"
    assert r.json()["error"]["type"] == "BadRequestError"


def test_the_largest_token_id_of_the_vocabulary_is_served(servers):
    r = _post(servers["main"].url, {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": [128255], "max_tokens": 1})
    assert r.status_code == 200


def test_idle_half_sent_headers_are_closed(servers):
    """Headers never finished: the connection is closed after the keep-alive timeout (1 s here)."""
    got = _raw(servers["main"].url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    assert got == b""     # closed by the server; a hang would raise socket.timeout


def test_a_half_sent_body_times_out_with_a_json_408(servers):
    err = _json_error(_raw(servers["main"].url, _post_head(1000), b'{"model": "m", '), 408)
    assert "not received within 1 s" in err["message"]


def test_a_client_disconnect_is_one_log_line(servers, eh):
    srv = servers["main"]
    body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": [1001] * 32, "max_tokens": 5000,
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", _port(srv.url))) as s:
        s.settimeout(20)
        s.sendall(_post_head(len(body)) + body)
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)
    wait_until = eh.wait_until
    assert wait_until(lambda: "client disconnected" in srv.output, timeout=20), srv.output
    line = [x for x in srv.output.splitlines() if "client disconnected" in x]
    assert len(line) == 1 and "Traceback" not in srv.output, srv.output


def test_a_stream_cut_by_the_server_is_one_log_line_not_a_traceback(servers, eh):
    srv = servers["drop"]
    with pytest.raises(httpx.RemoteProtocolError):     # cut mid-stream: no chunked terminator
        httpx.post(srv.url + "/v1/completions", timeout=30, json={
            "model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": [1001] * 8, "max_tokens": 50, "stream": True})
    wait_until = eh.wait_until
    assert wait_until(lambda: "drop-stream fault" in srv.output, timeout=20)
    assert "Traceback" not in srv.output and "Error handling request" not in srv.output


def test_unknown_route_and_method_answer_json(servers):
    url = servers["main"].url
    r = httpx.get(url + "/v1/completions")
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}   # FastAPI's, as vLLM's


def test_version_is_the_pinned_vllm(servers):
    assert httpx.get(servers["main"].url + "/version").json() == {"version": PINNED_VLLM}
    assert f"version {PINNED_VLLM}" in servers["main"].output


def test_underscore_flag_spellings_are_taken_like_vllm(servers):
    out = servers["main"].output
    assert "max_num_seqs" not in out.split("ignoring vLLM flags")[-1].splitlines()[0] if "ignoring" in out else True
    from benchcamp.sim.engine.cli_args import parse_serve_args

    a = parse_serve_args(["m", "--max_num_seqs", "64", "--max_num_batched_tokens=1024", "--kv_cache_dtype",
                          "fp8_ds_mla", "--swap_space", "4"])
    assert a.args.max_num_seqs == 64 and a.args.max_num_batched_tokens == 1024
    assert a.args.kv_cache_dtype == "fp8_ds_mla" and a.ignored == ["--swap-space", "4"]


def test_metrics_have_one_series_per_dp_engine_and_cached_tokens(servers):
    url = servers["dp2"].url
    model = "meta-llama/Llama-3.1-8B-Instruct"
    before = scrape(url)
    shared = list(range(2000, 3024))
    cached = 0
    for i in range(6):
        r = httpx.post(url + "/v1/completions", timeout=30, json={
            "model": model, "prompt": shared + [5000 + i] * 20, "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}})
        usage = [json.loads(x[6:]) for x in r.text.split("\n\n") if x.startswith("data: {")][-1]["usage"]
        cached += usage["prompt_tokens_details"]["cached_tokens"]
    text = httpx.get(url + "/metrics").text
    samples = parse_text(text)
    for engine in ("0", "1"):
        lab = f'engine="{engine}",model_name="{model}"'
        for name in ("vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total",
                     "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total",
                     "vllm:request_prompt_tokens_count", "vllm:time_to_first_token_seconds_count"):
            assert f"{name}{{{lab}}}" in samples, name
    assert text.count("# TYPE vllm:prompt_tokens_cached_total counter") == 1
    after = scrape(url)
    assert cached >= 4 * 1024
    assert after["vllm:prompt_tokens_cached"] - before.get("vllm:prompt_tokens_cached", 0) == cached
    assert after["vllm:generation_tokens"] - before.get("vllm:generation_tokens", 0) == 12


def test_the_scraper_sums_cached_tokens_over_engines():
    text = ('vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 100.0\n'
            'vllm:prompt_tokens_cached_total{engine="1",model_name="m"} 28.0\n')
    assert parse_prometheus(text)["vllm:prompt_tokens_cached"] == 128.0
