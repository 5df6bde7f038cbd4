"""The streaming client against real loopback servers: timings, usage, failures."""

from __future__ import annotations

import asyncio
import time

import pytest
from loadgen_support import MODEL
from timed_server import TimedServer, by_rid

from benchcamp.loadgen.body import completions_body
from benchcamp.loadgen.http_stream import Pool


def _body(out: int = 6) -> bytes:
    return completions_body(MODEL, tuple(range(8)), 100, out, 16, 32000)


async def _many(pool: Pool, rids: list[str], timeout: float = 5.0, out: int = 6):
    return await asyncio.gather(*(pool.request("/v1/completions", rid, _body(out), timeout) for rid in rids))


def test_streams_are_read_completely_with_usage_on_kept_alive_connections():
    with TimedServer(ttft_s=0.03, tpot_s=0.008, model=MODEL) as srv:
        async def go():
            pool = Pool(srv.url)
            res = await _many(pool, [f"r{i}" for i in range(8)], out=10)
            res += await _many(pool, [f"q{i}" for i in range(8)], out=10)  # reuses kept-alive connections
            pool.close()
            return res, pool.opened
        res, opened = asyncio.run(go())
        log = by_rid(srv.log)
    assert opened == 8
    for rid, out in zip([f"r{i}" for i in range(8)] + [f"q{i}" for i in range(8)], res):
        assert out.error is None and out.status == 200 and out.done
        assert out.chunks == 10 and len(out.itl) == 9
        # never before the server wrote it (the 1 ms accuracy check runs in worker
        # processes, test_run_point.py: here client and server share one GIL)
        assert out.first >= log[rid]["chunks"][0] and out.last >= log[rid]["chunks"][-1]
        assert out.usage["completion_tokens"] == 10 and out.usage["prompt_tokens"] == 100


FAULTS = {"bad": "500", "trunc": "truncate", "reset": "reset", "hang": "hang"}


def test_failures_are_outcomes_not_exceptions_and_the_pool_recovers():
    with TimedServer(ttft_s=0.01, tpot_s=0.002, model=MODEL, fault=lambda rid: FAULTS.get(rid.split("-")[0])) as srv:
        async def go():
            pool = Pool(srv.url)
            res = await _many(pool, ["bad-1", "trunc-1", "reset-1", "hang-1", "ok-1"], timeout=1.0)
            after = await _many(pool, ["ok-2", "ok-3"], timeout=2.0)
            pool.close()
            return res, after
        t = time.monotonic()
        (bad, trunc, reset, hang, ok), after = asyncio.run(go())
        took = time.monotonic() - t
    assert bad.status == 500 and bad.error.startswith("HTTP 500") and "injected failure" in bad.error
    assert trunc.status == 200 and trunc.error == "truncated stream: no [DONE]" and trunc.chunks == 2
    assert reset.status == 200 and reset.error.startswith("truncated stream: connection") and reset.chunks == 2
    assert hang.error == "timeout after 1s" and hang.chunks == 0
    assert ok.error is None and ok.chunks == 6
    assert all(o.error is None and o.chunks == 6 for o in after)
    assert took < 10


def test_unreachable_and_wrong_key_are_recorded_errors():
    with TimedServer(model=MODEL, api_key="sekrit-key-123") as srv:
        async def go():
            bad_key = await Pool(srv.url, "wrong").request("/v1/completions", "x", _body(), 2.0)
            good = await Pool(srv.url, "sekrit-key-123").request("/v1/completions", "y", _body(), 2.0)
            return bad_key, good
        bad_key, good = asyncio.run(go())
        port = srv.port
    assert bad_key.status == 401 and bad_key.error.startswith("HTTP 401")
    assert good.error is None
    gone = asyncio.run(Pool(f"http://127.0.0.1:{port}").request("/v1/completions", "z", _body(), 2.0))
    assert gone.status == 0 and gone.error.startswith("connect error")


async def _raw_server(payload: bytes):
    """A server that answers every request with ``payload`` verbatim, then closes."""
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(payload)
        await writer.drain()
        writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("payload,chunks,error", [
    # CRLF line endings, Content-Length framing, spaced JSON (parsed, not byte-matched)
    (b'data: {"choices": [{"text": "a"}]}\r\n\r\ndata: {"choices": [{"text": "b"}]}\r\n\r\n'
     b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\r\n\r\ndata: [DONE]\r\n\r\n',
     2, None),
    # chat deltas: the role-only first chunk is not content
    (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
     b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"choices":[],"usage":{"completion_tokens":1}}\n\n'
     b'data: [DONE]\n\n', 1, None),
    # an error event inside a 200 stream
    (b'data: {"choices":[{"text":"a"}]}\n\ndata: {"error":{"message":"engine overloaded"}}\n\ndata: [DONE]\n\n',
     1, "stream error event: engine overloaded"),
])
def test_protocol_variants(payload, chunks, error):
    async def go():
        srv = await _raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                + b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        port = srv.sockets[0].getsockname()[1]
        out = await Pool(f"http://127.0.0.1:{port}/v1").request("/v1/completions", "r", b"{}", 2.0)
        srv.close()
        return out
    out = asyncio.run(go())
    assert out.chunks == chunks and out.error == error
    if error is None:
        assert out.usage is not None and out.done


def test_response_without_length_read_until_close():
    async def go():
        srv = await _raw_server(b"HTTP/1.0 200 OK\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n")
        port = srv.sockets[0].getsockname()[1]
        out = await Pool(f"http://127.0.0.1:{port}").request("/v1/completions", "r", b"{}", 2.0)
        srv.close()
        return out
    out = asyncio.run(go())
    assert out.chunks == 1 and out.error == "truncated stream: no [DONE]"
