"""The client's SSE reader gives the same outcome however the bytes are split into reads.

Socket reads end anywhere (mid HTTP chunk, mid event, between [DONE] and the
terminating chunk) and coalesce many chunks at high rates; the reader has a
bulk hot path for runs of plain token chunks and a general path for the rest.
Every split of a response must count the same tokens, usage, errors and end.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from benchcamp.loadgen.http_stream import Outcome, Pool, StreamProtocol

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _ev(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()) + b"\n\n"


def _tok(text: str, chat: bool = False, usage: dict | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text, "logprobs": None}
    return _ev({"id": "x", "choices": [choice], "usage": usage})


USAGE = {"prompt_tokens": 7, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3}}

STREAMS = {
    # completions: a token whose text holds the byte markers themselves (escaped in JSON)
    "completions": ([_tok(" a"), _tok('say "text":"x"'), _tok(""), _tok(" b"), _tok(" c"), _tok(" d"),
                     _ev({"id": "x", "choices": [], "usage": USAGE}), _ev(b"[DONE]")], 5, None, True),
    # chat: the role-only first chunk is not content
    "chat": ([_ev({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
              *[_tok(w, chat=True) for w in ("x", "y", '"content":"z"')],
              _ev({"choices": [], "usage": USAGE}), _ev(b"[DONE]")], 3, None, True),
    # continuous usage stats: usage on every token chunk
    "continuous usage": ([_tok("a", usage={"completion_tokens": 1}), _tok("b", usage={"completion_tokens": 2}),
                          _ev({"choices": [], "usage": USAGE}), _ev(b"[DONE]")], 2, None, True),
    # an error event mid-stream
    "error event": ([_tok("a"), _tok("b"), _ev({"error": {"message": "engine overloaded"}}), _ev(b"[DONE]")],
                    2, "stream error event: engine overloaded", False),
    # spaced JSON: parsed, not byte-matched
    "spaced json": ([b'data: {"choices": [{"text": "a"}]}\n\n', b'data: {"choices": [{"text": "b"}]}\n\n',
                     b'data: {"choices": [], "usage": {"completion_tokens": 2}}\n\n', _ev(b"[DONE]")],
                    2, None, True),
}


def _chunked(events: list[bytes], rng: random.Random) -> bytes:
    """HTTP chunks of one event, several events, or an event cut in two."""
    payloads, i = [], 0
    while i < len(events):
        r = rng.random()
        if r < 0.2 and i + 1 < len(events):
            payloads.append(events[i] + events[i + 1])
            i += 2
        elif r < 0.35 and len(events[i]) > 4:
            cut = rng.randrange(1, len(events[i]))
            payloads += [events[i][:cut], events[i][cut:]]
            i += 1
        else:
            payloads.append(events[i])
            i += 1
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


class _Transport:
    def writelines(self, data) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name):
        return None


def _read(response: bytes, cuts: list[int]) -> tuple[Outcome, bool]:
    loop = asyncio.new_event_loop()
    try:
        proto = StreamProtocol(Pool("http://127.0.0.1:1"))
        proto.connection_made(_Transport())
        fut = loop.create_future()
        out = Outcome()
        proto.start([b""], out, fut)
        edges = [0, *cuts, len(response)]
        for a, b in zip(edges, edges[1:]):
            if b > a:
                proto.data_received(response[a:b])
        return out, fut.done()
    finally:
        loop.close()


@pytest.mark.parametrize("name", STREAMS)
def test_every_split_of_a_response_reads_the_same(name):
    events, chunks, error, usage = STREAMS[name]
    rng = random.Random(name)
    for trial in range(150):
        response = HEAD + _chunked(events, rng)
        n = len(response)
        kind = trial % 3
        if kind == 0:     # byte-sized reads
            cuts = list(range(1, n))
        elif kind == 1:   # a few random cuts
            cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(1, 6))))
        else:             # everything in one read
            cuts = []
        out, finished = _read(response, cuts)
        assert finished, (name, trial)
        assert out.chunks == chunks and out.error == error and out.done, (name, trial, out.chunks, out.error)
        assert len(out.itl) == chunks - 1 and out.first is not None and out.first <= out.last
        assert out.bytes_in == n
        if usage:
            assert out.usage and out.usage["completion_tokens"] in (USAGE["completion_tokens"], 2)


def test_truncated_after_tokens_read_by_the_hot_path_is_reported():
    events = [_tok("a"), _tok("b"), _tok("c")]
    body = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    out, finished = _read(body, [len(HEAD), len(HEAD) + 10])
    assert out.chunks == 3 and not finished   # still waiting: the stream did not end
