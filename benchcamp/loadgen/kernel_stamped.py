"""Plain-TCP connections whose reads carry the kernel's receive time.

Why: a token's arrival time taken when the event loop gets round to the
socket includes the client's own queueing. With a thousand streams on one
core that queueing reaches milliseconds at p99, and it grows with the client's
load (AIPerf's TTFT nearly doubled when its CPU was throttled). Linux stamps
every received packet (``SO_TIMESTAMPNS``); reading with ``recvmsg`` returns
that stamp, so a chunk's time is when it reached this machine, however busy the
loop was. Lateness of the client still shows where it matters: sends late
against their schedule (scheduling lag) and CPU, both in the validity verdict.

The stamp is CLOCK_REALTIME; it becomes a monotonic time by its age against a
realtime reading taken next to the monotonic one (immune to clock steps
between reads). Where the stamp is missing (not Linux, option refused) the
read's own monotonic time is used. Linux reports one stamp per read, the last
segment's: chunks that queued up while the loop was busy share the time the
last of them arrived (never earlier than the truth, and still without the
loop's delay).

Used for ``http://`` endpoints; TLS goes through asyncio's transports (their
reads are timed when the loop runs them).

The class offers the part of asyncio's transport interface that
``http_stream.StreamProtocol`` uses; the protocol gets ``feed(data, t)``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: asm-generic/socket.h (SCM_ == SO_)
_ANC = socket.CMSG_SPACE(16)  # one struct timespec
_TS = struct.Struct("qq")
READ_SIZE = 256 * 1024
_now = time.monotonic
_real = time.time


def read_buffer() -> memoryview:
    """One per event loop, shared by its connections: each read is copied out at once."""
    return memoryview(bytearray(READ_SIZE))


async def open_stamped(
    loop: asyncio.AbstractEventLoop, host: str, port: int, protocol, buffer: memoryview
) -> StampedConnection:
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    err: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            err = exc
            continue
        except BaseException:
            sock.close()
            raise
        return StampedConnection(loop, sock, protocol, buffer)
    raise err or OSError(f"could not resolve {host}:{port}")


def _stamp_to_monotonic(stamp: float) -> float:
    """The monotonic time of a CLOCK_REALTIME stamp.

    The realtime reading comes first and the monotonic one after it: if this
    process is preempted between the two, the result is late by the pause,
    never early (the other order put chunks before the server wrote them on a
    loaded CI box). A pause over 50 us is read again, at most twice.
    """
    for _ in range(3):
        before = _now()
        age = _real() - stamp
        now = _now()
        if now - before < 5e-5:
            break
    if not 0.0 < age < 60.0:  # not a sane stamp: the read's own time
        return now
    return now - age


class StampedConnection:
    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol, buffer: memoryview) -> None:
        self.loop, self.sock, self.protocol = loop, sock, protocol
        self.fd = sock.fileno()
        self._view = buffer
        self._into = (buffer,)
        self._pending: memoryview | None = None  # unsent tail of the last write
        self._closing = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.stamped = True
        except OSError:
            self.stamped = False
        protocol.connection_made(self)
        loop.add_reader(self.fd, self._readable)

    # -- the transport interface StreamProtocol uses ----------------------------
    def get_extra_info(self, name: str, default=None):
        return self.sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        return len(self._pending) if self._pending is not None else 0

    def writelines(self, parts) -> None:
        self.write(b"".join(parts))

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if self._pending is not None:
            self._pending = memoryview(bytes(self._pending) + data)
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._lose(exc)
            return
        if n < len(data):  # a large prompt: the rest when the socket drains
            self._pending = memoryview(data)[n:]
            self.loop.add_writer(self.fd, self._writable)

    def close(self) -> None:
        self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    # -- events -------------------------------------------------------------------
    def _writable(self) -> None:
        pending = self._pending
        assert pending is not None  # the writer is registered only while a tail is pending
        try:
            n = self.sock.send(pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        self._pending = pending[n:] if n < len(pending) else None
        if self._pending is None:
            self.loop.remove_writer(self.fd)

    def _readable(self) -> None:
        try:
            n, anc, _, _ = self.sock.recvmsg_into(self._into, _ANC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not n:
            self._lose(None)  # EOF
            return
        if anc:
            sec, nsec = _TS.unpack_from(anc[0][2])
            t = _stamp_to_monotonic(sec + nsec * 1e-9)
        else:
            t = _now()
        self.protocol.feed(bytes(self._view[:n]), t)

    def _lose(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self.loop.remove_reader(self.fd)
        if self._pending is not None:
            self.loop.remove_writer(self.fd)
            self._pending = None
        self.sock.close()
        # as asyncio does: the protocol hears of it on the next loop turn, not inside the caller
        self.loop.call_soon(self.protocol.connection_lost, exc)
