"""A small, fast streaming HTTP/1.1 client for OpenAI-compatible SSE responses.

Why hand-written: a generic client reads line by line and parses every chunk
as JSON; at 50K-token contexts and 100K+ chunks/s that makes the client the
bottleneck (vLLM's `bench serve` collapses there). Here one asyncio Protocol
per connection gets whole socket reads. The hot path handles a read whose
HTTP chunks are all plain token events (the bulk of any stream) with a few
C-level scans of the read, whatever the number of events in it: no per-event
Python work, no copies beyond a partial chunk carried to the next read.
Anything else (headers, usage, errors, [DONE], unusual framing) goes to the
general path, which decodes chunked encoding and splits SSE events with
``bytes.find`` and parses the rare usage/error events as JSON. Every event in
one socket read is stamped with the read's time: on plain TCP the kernel's
receive time (``kernel_stamped.py``), so a busy client loop does not delay
what it measures; over TLS, when the loop ran the read.

Connections are kept alive in a per-worker pool. A request that keeps its answer's text
(``collect_text``: load.agentx.context live) takes the general path and parses every event."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl as _ssl
import time
from itertools import repeat
from urllib.parse import urlsplit

from benchcamp.errors import http_error_text
from benchcamp.loadgen.kernel_stamped import open_stamped, read_buffer
from benchcamp.router.affinity import header_value

_now = time.monotonic
MAX_HEAD = 64 * 1024
ERROR_BODY_MAX = 2048
MAX_PEND = 1 << 20  # a partial HTTP chunk longer than this goes to the general path

_HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE, _DONE = range(5)


class Outcome:
    """What one request produced; times are raw time.monotonic values."""

    __slots__ = (
        "status", "first", "last", "chunks", "itl", "usage", "error", "done", "t_end", "bytes_in", "_body", "text"
    )  # fmt: skip

    def __init__(self, collect_text: bool = False) -> None:
        self.status = 0
        self.first: float | None = None
        self.last: float | None = None
        self.chunks = 0
        self.itl: list[float] = []
        self.usage: dict | None = None
        self.error: str | None = None
        self.done = False  # saw data: [DONE]
        self.t_end: float | None = None  # stamped by every path out of Pool.request
        self.bytes_in = 0
        self._body = b""
        # the answer's text, piece by piece (load.agentx.context: live); None: not collected, and the hot path,
        # which reads no event, applies
        self.text: list[str] | None = [] if collect_text else None

    def saw(self, t: float, tokens: int) -> None:
        """``tokens`` content chunks read together at time ``t`` (gaps 0 between them)."""
        if self.last is None:
            self.first = t
        else:
            self.itl.append(t - self.last)
        if tokens > 1:
            self.itl.extend(repeat(0.0, tokens - 1))
        self.last = t
        self.chunks += tokens


class StreamProtocol(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.out: Outcome | None = None
        self.fut: asyncio.Future | None = None
        self.keep_alive = True
        self.state = _DONE
        self.stream_error: str | None = None
        self.fast = False
        self.pend = b""

    # -- connection ---------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.fut is None or self.fut.done():
            return
        out = self.out
        assert out is not None  # start() sets it with fut
        if self.state == _UNTIL_CLOSE and exc is None:
            if out.status != 200:
                self._finish(self._http_error())
            else:
                self._finish(None if out.done else "truncated stream: no [DONE]")
        elif out.status == 200 and out.done:
            self._finish(self.stream_error)  # everything arrived; only the chunked terminator is missing
        elif out.status == 0 and out.bytes_in == 0:
            self._finish(f"connection closed before a response ({exc or 'EOF'})")
        elif out.status == 200:
            self._finish(f"truncated stream: connection {'reset' if exc else 'closed'} before [DONE]")
        else:
            self._finish(self._http_error())

    # -- one request --------------------------------------------------------
    def start(self, data: list[bytes], out: Outcome, fut: asyncio.Future) -> None:
        self.out, self.fut = out, fut
        self.state = _HEAD
        self.raw = bytearray()
        self.sse = bytearray()
        self.sep = b"\n\n"
        self.remaining = 0
        self.chunk_left = 0
        self.need_crlf = False
        self.keep_alive = True
        self.stream_error = None
        self.fast = False
        self.pend = b""
        assert self.transport is not None  # the pool hands out connected protocols only
        self.transport.writelines(data)

    def abort(self, reason: str) -> None:
        """Fail the request in flight now (timeout, drain deadline, shutdown)."""
        if self.fut is not None and not self.fut.done():
            self._finish(reason)
        if self.transport is not None:
            self.transport.abort()
        self.lost = True

    def _finish(self, error: str | None) -> None:
        out, fut = self.out, self.fut
        assert out is not None and fut is not None  # only called with a request in flight
        out.t_end = _now()
        out.error = error
        self.state = _DONE
        self.fast = False
        self.fut = None
        if error is not None or not self.keep_alive:
            self.keep_alive = False
        if not fut.done():
            fut.set_result(None)
        self.pool.finished(self)

    def _http_error(self) -> str:
        out = self.out
        assert out is not None
        body = out._body[:ERROR_BODY_MAX].decode("utf-8", "replace").strip()
        return http_error_text(out.status, body)

    # -- parsing ------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """asyncio's read callback (TLS connections): timed when the loop runs it."""
        self.feed(data, _now())

    def feed(self, data: bytes, t: float) -> None:
        """Bytes read from the socket at (monotonic) time ``t``."""
        self.pool.reads += 1
        out = self.out
        if out is not None:
            out.bytes_in += len(data)
        if self.fast and out is not None:  # fast is only set with a request in flight
            # Hot path (one call per socket read, a few C-level scans, no per-event work):
            # a 200 chunked stream whose events are all compact token chunks. ``pend`` holds
            # a partial HTTP chunk left by the previous read (reads end anywhere).
            if self.pend:
                data = self.pend + data
                self.pend = b""
            e = data.rfind(b"\n\n\r\n") + 4  # end of the last whole HTTP chunk
            tokens = _token_events(data, e) if e > 3 else 0
            ending = tokens < 0
            if ending:
                # The stream's end (usage, [DONE]) in this read: its token chunks before it in
                # bulk, the rest to the general path.
                e = data.rfind(b"\n\n\r\n", 0, _first_special(data, e)) + 4
                tokens = _token_events(data, e) if e > 3 else -1
            if tokens >= 0:
                if tokens:
                    out.saw(t, tokens)
                    self.pool.chunks += tokens
                rest = data[e:] if e > 3 else data
                # keep a partial token chunk; the terminating "0" chunk goes to the general path
                if not ending and (not rest or (len(rest) <= MAX_PEND and rest[:1] != b"0")):
                    self.pend = rest
                    return
                data = rest
            self.fast = False  # anything else: the general path, from this chunk boundary on
            if not data:
                return
        self._general(data, t)

    def _general(self, data: bytes, t: float) -> None:
        if self.fut is None:  # nothing in flight: the server misbehaves; drop the connection
            self.keep_alive = False
            if self.transport is not None:  # always, once bytes arrive
                self.transport.close()
            return
        if self.state == _HEAD:
            self.raw += data
            i = self.raw.find(b"\r\n\r\n")
            if i < 0:
                if len(self.raw) > MAX_HEAD:
                    self.abort("response headers too large")
                return
            head = bytes(self.raw[:i])
            data = bytes(self.raw[i + 4 :])
            self.raw = bytearray()
            if not self._parse_head(head):
                return
            if not data:
                if self.state == _LENGTH and self.remaining == 0:
                    self._end_of_body()
                self._update_fast()
                return
        st = self.state
        if st == _CHUNKED:
            self._dechunk(data, t)
        elif st == _LENGTH:
            take = data[: self.remaining]
            self.remaining -= len(take)
            self._payload(take, t)
            if self.remaining <= 0 and self.fut is not None:
                self._end_of_body()
        elif st == _UNTIL_CLOSE:
            self._payload(data, t)
        self._update_fast()

    def _update_fast(self) -> None:
        """The hot path applies at an HTTP chunk boundary of a 200 chunked stream before [DONE]."""
        out = self.out
        self.fast = (
            self.state == _CHUNKED
            and self.fut is not None
            and out is not None
            and out.status == 200
            and not out.done
            and not self.raw
            and not self.chunk_left
            and not self.need_crlf
            and not self.sse
            and out.text is None
        )

    def _parse_head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        out = self.out
        assert out is not None
        try:
            out.status = int(parts[1])
        except (IndexError, ValueError):
            self.abort(f"malformed status line {lines[0][:80]!r}")
            return False
        length = None
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                if b"close" in value.lower():
                    self.keep_alive = False
        if chunked:
            self.state = _CHUNKED
        elif length is not None:
            self.state = _LENGTH
            self.remaining = length
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        return True

    def _dechunk(self, data: bytes, t: float) -> None:
        raw = self.raw
        raw += data
        pos = 0
        n = len(raw)
        while True:
            if self.chunk_left:
                take = min(self.chunk_left, n - pos)
                self._payload(bytes(raw[pos : pos + take]), t)
                pos += take
                self.chunk_left -= take
                if self.chunk_left:
                    break
                self.need_crlf = True
            if self.need_crlf:
                if n - pos < 2:
                    break
                pos += 2
                self.need_crlf = False
            i = raw.find(b"\r\n", pos)
            if i < 0:
                break
            try:
                size = int(bytes(raw[pos:i]).split(b";", 1)[0], 16)
            except ValueError:
                self.abort("malformed chunked encoding")
                return
            pos = i + 2
            if size == 0:
                self._end_of_body()
                return
            self.chunk_left = size
        del raw[:pos]

    def _end_of_body(self) -> None:
        out = self.out
        assert out is not None
        if out.status != 200:
            self._finish(self._http_error())
        elif not out.done:
            self._finish("truncated stream: no [DONE]")
        else:
            self._finish(self.stream_error)

    def _payload(self, data: bytes, t: float) -> None:
        out = self.out
        assert out is not None
        if out.status != 200:
            if len(out._body) < ERROR_BODY_MAX:
                out._body += data
            return
        buf = self.sse
        buf += data
        sep = self.sep
        start = 0
        while True:
            j = buf.find(sep, start)
            if j < 0:
                if start == 0 and sep == b"\n\n" and b"\r\n\r\n" in buf:
                    self.sep = sep = b"\r\n\r\n"  # a server that ends lines with CRLF
                    continue
                break
            self._event(bytes(buf[start:j]), t)
            start = j + len(sep)
        if start:
            del buf[:start]

    def _event(self, ev: bytes, t: float) -> None:
        out = self.out
        assert out is not None
        if ev.startswith(b"data: "):
            d = ev[6:]
        elif ev.startswith(b"data:"):
            d = ev[5:]
        else:  # comments, event:/id: lines, multi-line data
            d = b"\n".join(line[5:].lstrip(b" ") for line in ev.splitlines() if line.startswith(b"data:"))
            if not d:
                return
        if d[:1] != b"{":
            if d.strip() == b"[DONE]":
                out.done = True
            return
        obj = None
        content = _has_content(d)
        if content is None:  # not compact JSON: parse it (once)
            obj = _json_object(d)
            content = _content_of(obj)
        if content:
            out.saw(t, 1)
            self.pool.chunks += 1
            if out.text is not None:
                out.text.append(_text_of(obj if obj is not None else _json_object(d)))
        if (b'"usage":{' in d or b'"usage": {' in d) or (b'"error"' in d and not content):
            if obj is None:
                obj = _json_object(d)
            if isinstance(obj.get("usage"), dict):
                out.usage = obj["usage"]
            if obj.get("error") and not content:
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                # A mid-stream error event: kept as the request's error even if the stream ends well.
                self.stream_error = f"stream error event: {str(msg)[:200]}"


def _token_events(data: bytes, end: int) -> int:
    """Content chunks in ``data[:end]`` (whole HTTP chunks, from a chunk boundary) when
    each HTTP chunk holds exactly one compact completions/chat token event without usage;
    -1 when anything else is there (usage, [DONE], errors, events split or grouped across
    HTTP chunks, CRLF or spaced events: the general path parses those).

    Compact JSON holds no raw CR/LF and escapes every quote inside a string, so neither
    the framing markers nor the key markers below can occur inside generated text."""
    n = data.count(b"\r\ndata: {", 0, end)  # events that start an HTTP chunk
    if (
        not n
        or data.count(b"\n\n\r\n", 0, end) != n
        or data.count(b"\n\n", 0, end) != n
        or data.count(b"\r\n", 0, end) != 2 * n
        or data.find(b'"usage":{', 0, end) >= 0
    ):
        return -1
    if data.count(b'"text":"', 0, end) == n:
        return n - data.count(b'"text":""', 0, end)
    if data.count(b'"content":"', 0, end) == n:
        return n - data.count(b'"content":""', 0, end)
    if data.count(b'"tool_calls":[{', 0, end) == n:  # tool-call deltas are output tokens too
        return n
    return -1


def _first_special(data: bytes, end: int) -> int:
    """Where the first usage or [DONE] event starts in ``data[:end]`` (``end`` if neither)."""
    u = data.find(b'"usage":{', 0, end)
    d = data.find(b"data: [DONE]", 0, end)
    return min(x for x in (u, d, end) if x >= 0)


def _has_content(d: bytes) -> bool | None:
    """True/False from byte markers on compact JSON; None when undecidable."""
    if b'"choices":[]' in d:
        return False
    if b'"tool_calls":[{' in d:  # a tool-call delta (name or argument fragment): output
        return True
    if b'"text":"' in d:
        return b'"text":""' not in d
    if b'"content":"' in d:
        return b'"content":""' not in d
    if b'"content":null' in d or b'"delta":{}' in d or b'"text":null' in d:
        return False
    return None


def _json_object(d: bytes) -> dict:
    try:
        obj = json.loads(d)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _content_of(obj: dict) -> bool:
    for ch in obj.get("choices") or ():
        delta = ch.get("delta") if isinstance(ch, dict) else None
        if isinstance(ch, dict) and (ch.get("text") or (delta or {}).get("content") or (delta or {}).get("tool_calls")):
            return True
    return False


def _text_of(obj: dict) -> str:
    """The generated text an event carries (chat ``delta.content``, completions ``text``)."""
    out = []
    for ch in obj.get("choices") or ():
        if isinstance(ch, dict):
            delta = ch.get("delta")
            piece = (delta.get("content") if isinstance(delta, dict) else None) or ch.get("text")
            if isinstance(piece, str):
                out.append(piece)
    return "".join(out)


class Pool:
    """Keep-alive connections to one endpoint, for one event loop."""

    def __init__(self, base_url: str, api_key: str | None = None, session_header: str = "") -> None:
        """``session_header``: the header that carries each request's routing key (session
        affinity, ``benchcamp.router.affinity``); "" = none sent."""
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"endpoint {base_url!r}: expected http(s)://host[:port]")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = _ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):  # accept base URLs given with /v1
            self.prefix = self.prefix[:-3]
        hostport = self.host if u.port is None else f"{self.host}:{self.port}"
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head_tpl = (
            f"POST {{path}} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nUser-Agent: benchcamp\r\n{auth}"
            "X-Request-Id: {rid}\r\nContent-Length: {n}\r\n\r\n"
        )
        self.session_header = session_header
        self._key_tpl = self._head_tpl.replace("X-Request-Id:", f"{session_header}: {{key}}\r\nX-Request-Id:", 1)
        self._buffer: memoryview | None = None  # the stamped connections' shared read buffer
        self.reads = 0  # socket reads (chunks/reads says how much the kernel coalesced)
        self.idle: list[StreamProtocol] = []
        self.active: set[StreamProtocol] = set()
        self.opened = 0
        self.chunks = 0  # content chunks read, all requests (live progress)

    def head(self, path: str, rid: str, n: int, key: str | None = None) -> bytes:
        if key and self.session_header:
            return self._key_tpl.format(path=self.prefix + path, rid=rid, n=n, key=header_value(key)).encode()
        return self._head_tpl.format(path=self.prefix + path, rid=rid, n=n).encode()

    async def _connect(self) -> StreamProtocol:
        loop = asyncio.get_running_loop()
        if self.ssl is None:  # plain TCP: reads stamped by the kernel (kernel_stamped.py)
            proto = StreamProtocol(self)
            if self._buffer is None:
                self._buffer = read_buffer()
            await open_stamped(loop, self.host, self.port, proto, self._buffer)
        else:
            _, proto = await loop.create_connection(
                lambda: StreamProtocol(self), self.host, self.port, ssl=self.ssl, server_hostname=self.host
            )
        self.opened += 1
        return proto

    def finished(self, proto: StreamProtocol) -> None:
        self.active.discard(proto)
        if proto.keep_alive and not proto.lost:
            self.idle.append(proto)
        elif proto.transport is not None and not proto.lost:
            proto.transport.close()

    def abort_all(self, reason: str) -> int:
        n = 0
        for p in list(self.active):
            p.abort(reason)
            n += 1
        return n

    def close(self) -> None:
        for p in self.idle:
            if p.transport is not None:
                p.transport.close()
        self.idle.clear()

    async def request(
        self, path: str, rid: str, body: bytes, timeout: float, key: str | None = None, collect_text: bool = False
    ) -> Outcome:
        """POST ``body`` and read the SSE stream; never raises for HTTP/network failures.
        ``key``: the request's routing key, sent in ``session_header`` when the pool has one.
        ``collect_text``: keep the answer's text (``Outcome.text``; every event is parsed, off the hot path)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        data = [self.head(path, rid, len(body), key), body]
        for attempt in (0, 1):
            out = Outcome(collect_text)
            reused = False
            try:
                proto = None
                while self.idle:
                    p = self.idle.pop()
                    if not p.lost:
                        proto, reused = p, True
                        break
                if proto is None:
                    proto = await asyncio.wait_for(self._connect(), max(0.001, deadline - loop.time()))
            except TimeoutError:
                out.error, out.t_end = f"timeout after {timeout:g}s (connecting)", _now()
                return out
            except OSError as exc:
                out.error, out.t_end = f"connect error: {exc.strerror or exc}", _now()
                return out
            fut = loop.create_future()
            self.active.add(proto)
            timer = loop.call_at(deadline, proto.abort, f"timeout after {timeout:g}s")
            proto.start(data, out, fut)
            try:
                await fut
            finally:
                timer.cancel()
            # A kept-alive connection the server closed meanwhile: retry once on a fresh one.
            if (
                reused
                and out.bytes_in == 0
                and out.error
                and attempt == 0
                and loop.time() < deadline
                and not out.error.startswith(("timeout", "drain", "interrupted", "aborted"))
            ):
                continue
            return out
        return out
