"""Chunk times come from the kernel's receive stamps, not from when a busy client
loop got round to reading: a loop blocked for 80 ms still times the first token
when it reached this machine. (Linux gives one stamp per read, the last
segment's: chunks that queue up together share it; here the first token is
alone in its read.)"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from benchcamp.loadgen.http_stream import Pool

pytestmark = pytest.mark.alone  # token times asserted within 5 ms

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
TOKEN = b'data: {"choices":[{"index":0,"text":" a"}],"usage":null}\n\n'
TAIL = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n'


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _serve_one(lsock: socket.socket, written: list[float]) -> None:
    conn, _ = lsock.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(HEAD)
        time.sleep(0.02)                     # the client's loop is blocked by now
        written.append(time.monotonic())
        conn.sendall(_chunk(TOKEN))
        time.sleep(0.12)                     # the client's loop is free again
        written.append(time.monotonic())
        conn.sendall(_chunk(TOKEN) + _chunk(TAIL) + b"0\r\n\r\n")
        conn.recv(1)                         # until the client closes


def test_token_times_are_kernel_receive_times_not_loop_times():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    written: list[float] = []

    async def go():
        loop = asyncio.get_running_loop()
        server = loop.run_in_executor(None, _serve_one, lsock, written)
        pool = Pool(f"http://127.0.0.1:{lsock.getsockname()[1]}")
        req = asyncio.ensure_future(pool.request("/v1/completions", "r", b"{}", 5.0))
        await asyncio.sleep(0.01)            # the request is out
        time.sleep(0.08)                     # a busy loop: nothing is read for 80 ms
        seen = time.monotonic()
        out = await req
        pool.close()
        await server
        return out, seen

    out, loop_free = asyncio.run(go())
    lsock.close()
    assert out.error is None and out.chunks == 2
    # The first token was read only once the loop was free (~70 ms after it was written),
    # yet it is timed within 5 ms of when it was written; so is the second.
    assert loop_free - written[0] > 0.04
    assert abs(out.first - written[0]) < 0.005, (out.first - written[0])
    assert abs(out.last - written[1]) < 0.005, (out.last - written[1])
    assert abs(out.itl[0] - (written[1] - written[0])) < 0.005



class _ScriptedClocks:
    """A monotonic and a realtime clock (realtime = monotonic + 1000) where this
    process is paused for `pauses[i]` seconds just before (or after) its i-th
    realtime read."""

    def __init__(self, pauses: list[float], where: str) -> None:
        self.t, self.pauses, self.where = 5.0, list(pauses), where

    def mono(self) -> float:
        self.t += 1e-7
        return self.t

    def real(self) -> float:
        pause = self.pauses.pop(0) if self.pauses else 0.0
        self.t += pause if self.where == "before" else 0.0
        r = self.t + 1000.0
        self.t += pause if self.where == "after" else 0.0
        return r


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_pause_between_the_two_clock_reads_never_makes_a_stamp_early(monkeypatch, where):
    from benchcamp.loadgen import kernel_stamped as ks

    def clocks(pauses):
        c = _ScriptedClocks(pauses, where)
        monkeypatch.setattr(ks, "_now", c.mono)
        monkeypatch.setattr(ks, "_real", c.real)
        return c

    stamp_mono = 4.9  # the packet reached this machine at monotonic 4.9
    # (a monotonic read before the realtime one, then a pause, put the chunk
    # 1 ms before it arrived: CI saw a token 136 us before the server wrote it)
    clocks([1e-3])  # paused on the first try only: read again, exact
    assert abs(ks._stamp_to_monotonic(stamp_mono + 1000.0) - stamp_mono) < 1e-6
    c = clocks([1e-3] * 3)  # paused on every try: never early, late by at most the pause
    got = ks._stamp_to_monotonic(stamp_mono + 1000.0)
    assert stamp_mono - 1e-6 <= got < stamp_mono + 1.1e-3
    # an insane stamp (in the future) falls back to the read's own time
    assert ks._stamp_to_monotonic(c.t + 1000.0 + 5.0) == pytest.approx(c.t, abs=1e-6)
