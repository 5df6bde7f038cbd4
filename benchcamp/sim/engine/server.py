"""The simulated vLLM OpenAI-compatible HTTP server (``benchcamp engine serve``).

One asyncio task (:class:`EngineLoop`) drives the engine core on the wall clock:
it calls ``core.step(now)``, sleeps until ``now + duration_s`` (the time the modelled
GPU would need for that step), then delivers the step's tokens. Steps are
back-to-back on the engine's own timeline (the next step starts at the previous
step's end time, not at the moment the event loop woke up) so timer jitter does
not accumulate; if the process falls behind by more than ``RESYNC_S`` the timeline
jumps to the wall clock and the lag shows up as latency, as it would on a real
overloaded server.

Delivery writes SSE chunks straight to each response's transport from the engine
loop (one ``transport.write`` of a pre-built chunk per request per step, HTTP/1.1
chunked framing done here), so streaming costs no task switch per token; the
request handler only wakes at the end to close the body. This is what lets one
core stream tens of thousands of chunks per second.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from benchcamp.config import PINNED_VLLM
from benchcamp.sim.engine import openai_format as fmt
from benchcamp.sim.engine.cli_args import parse_serve_args, redacted_argv, served_names, settings_kwargs
from benchcamp.sim.engine.faults import FaultState, parse_faults
from benchcamp.sim.engine.prom import EngineStats, Metrics

VERSION = PINNED_VLLM  # the simulated engine answers as the vLLM benchcamp tracks
RESYNC_S = 0.05  # lag beyond which the engine timeline jumps to the wall clock
IDLE_POLL_S = 0.005  # wait when the core has work but nothing schedulable
ADMIT_WAIT_S = 0.05  # longest a step waits for requests that arrived before it but are still parsed
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
INLINE_PARSE_BYTES = 256 * 1024  # larger bodies are parsed and hashed off the event loop
BYTES_PER_TOKEN_MAX = 32  # a body over max_model_len x this cannot hold a prompt that fits
BODY_TIMEOUT_S = 30.0  # a request body not complete after this is answered 408
# Idle connections, and requests whose headers never complete, are closed after this
# (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5 s like uvicorn's).
KEEP_ALIVE_S = float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5"))


def log(msg: str, level: str = "INFO") -> None:
    # vLLM's format: "INFO 11-29 17:05:00 [api_server.py:1] message"
    sys.stdout.write(f"{level} {time.strftime('%m-%d %H:%M:%S')} [server.py] {msg}\n")
    sys.stdout.flush()


@dataclass(eq=False)
class Live:
    """One in-flight request."""

    rid: str
    prompt_len: int
    stream: bool
    formatter: fmt.StreamFormatter | None
    transport: Any
    include_usage: bool
    t_arrival: float
    done: asyncio.Future
    sent: int = 0
    cached: int = 0
    t_first: float = -1.0
    t_last: float = -1.0
    usage: tuple[int, int, int, int | None] | None = None  # prompt, cached, completion, of which from CPU
    dropped: bool = False
    engine: int = 0  # the DP engine serving it (vLLM's `engine` label)
    client_rid: str = ""  # the client's X-Request-Id (--log-requests names it: bench/ joins on it)
    hashes: list[int] | None = None  # its prompt's block hashes, kept when a KV connector stores them


@dataclass
class ServerConfig:
    names: list[str]
    root: str
    api_key: str | None
    max_model_len: int
    block_size: int
    prompt_tokens_details: bool
    log_requests: bool = False
    time_scale: float = 1.0  # benchmark-only: scales modelled step times (0 = free steps)
    vocab_size: int = 1 << 62  # token ids at or above it are out of vocabulary (400, as vLLM)
    body_timeout_s: float = BODY_TIMEOUT_S
    fingerprint: str = ""  # system_fingerprint of every response
    # the header whose value routes a request to a DP rank (session affinity, benchcamp.router.affinity); "" = off
    routing_key_header: str = "X-Session-ID"
    kv_storage: Any = None  # benchcamp.sim.engine.kv_connector.SharedStorage of a disaggregated instance
    counter: Any = (
        None  # counts chat prompts benchcamp did not build (benchcamp.workload.tokencount; None: the estimate)
    )

    @property
    def max_body_bytes(self) -> int:
        return max(1 << 20, self.max_model_len * BYTES_PER_TOKEN_MAX)


class EngineLoop:
    def __init__(
        self, core: Any, cfg: ServerConfig, faults: FaultState, metrics: Metrics, clock: Callable[[], float]
    ) -> None:
        self.core, self.cfg, self.faults, self.metrics, self.clock = core, cfg, faults, metrics, clock
        self.live: dict[str, Live] = {}
        self.wake = asyncio.Event()
        self.last_arrival = 0.0
        self.task: asyncio.Task | None = None
        # Requests being read/parsed/hashed, by arrival time: a step starting after their
        # arrival waits for them (up to ADMIT_WAIT_S), as the simulator admits every request
        # sent before a step starts. Otherwise the server's own CPU time would push requests
        # into later steps than on the virtual clock.
        self.arriving: dict[object, float] = {}
        self.admitted = asyncio.Event()

    def arrived(self, token: object) -> None:
        if self.arriving.pop(token, None) is not None:
            self.admitted.set()

    # --- requests ---------------------------------------------------------
    def add(self, live: Live, block_hashes: list[int], max_tokens: int, key: str | None = None) -> None:
        self.last_arrival = max(self.last_arrival, live.t_arrival)
        self.live[live.rid] = live
        storage = self.cfg.kv_storage
        external = 0
        if storage is not None:
            external = storage.lookup(block_hashes, live.prompt_len)
            if storage.cfg.produces:
                live.hashes = block_hashes
        if key:  # session affinity: the router puts every request of this key on one DP rank
            self.core.add_request(
                live.rid, block_hashes, live.prompt_len, max_tokens, live.t_arrival, external, key=key
            )
        else:
            self.core.add_request(live.rid, block_hashes, live.prompt_len, max_tokens, live.t_arrival, external)
        rank = getattr(getattr(self.core, "where", {}).get(live.rid), "rank", 0)
        live.engine = rank if 0 <= rank < len(self.metrics.engines) else 0
        self.wake.set()

    def stats(self, s: Live) -> EngineStats:
        return self.metrics.engines[s.engine]

    def abort(self, rid: str) -> None:
        s = self.live.pop(rid, None)
        if s is not None:
            self.core.abort(rid)
            self.stats(s).success["abort"] += 1

    # --- the loop ----------------------------------------------------------
    async def run(self) -> None:
        t_engine: float | None = None  # end of the previous step on the engine timeline
        floor = 0.0  # the engine timeline never runs backwards
        never = asyncio.Event()
        scale = self.cfg.time_scale
        while True:
            if self.faults.stalled(self.clock()):
                log("fault stall-after-seconds: engine stopped emitting tokens", "WARNING")
                await never.wait()
            if not self.core.has_work():
                self.wake.clear()
                await self.wake.wait()
                t_engine = None
                continue
            now = self.clock()
            if t_engine is None:
                # Woken by a request: the step starts when it arrived (handler entry), so
                # parsing and hashing its prompt do not delay the modelled GPU.
                if now - self.last_arrival < RESYNC_S:
                    now = max(floor, self.last_arrival)
            elif now - t_engine < RESYNC_S:
                # Back to back: the next step starts where the previous one ended, or when a
                # request that arrived after that end came in.
                now = max(t_engine, min(self.last_arrival, now))
            if self.arriving and min(self.arriving.values()) <= now:
                deadline = self.clock() + ADMIT_WAIT_S
                while self.arriving and min(self.arriving.values()) <= now and self.clock() < deadline:
                    self.admitted.clear()
                    try:
                        await asyncio.wait_for(self.admitted.wait(), max(deadline - self.clock(), 0.001))
                    except TimeoutError:
                        break
            res = self.core.step(now)
            for rid in res.admitted:  # vLLM's queue time: arrival to the start of the step that schedules it
                s = self.live.get(rid)
                if s is not None:
                    self.stats(s).queue.observe(max(now - s.t_arrival, 0.0))
            end = now + res.duration_s * scale
            floor = end
            delay = end - self.clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            if not (res.emitted or res.first or res.finished) and res.duration_s <= 0:
                t_engine = None
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), IDLE_POLL_S)
                except TimeoutError:
                    pass
                continue
            t_engine = end
            self.deliver(res, end)

    def deliver(self, res: Any, t: float) -> None:
        live = self.live
        fin = {f[0]: f for f in res.finished}
        storage = self.cfg.kv_storage
        for rid, cached in res.first:
            s = live.get(rid)
            if s is not None:
                s.cached = cached
                if storage is not None and s.hashes is not None:  # the prefill's KV, saved as it is computed
                    storage.store(s.hashes, s.prompt_len)
                c = self.stats(s).counters
                c["vllm:prompt_tokens"] += s.prompt_len
                c["vllm:prompt_tokens_cached"] += cached
        drop_after = self.faults.faults.drop_stream_after_tokens
        # vllm:iteration_tokens_total, per engine with outputs: tokens generated + prompt tokens computed for the
        # requests this step gave their first token
        step_tokens: dict[int, list] = {}
        for rid, n in res.emitted:
            s = live.get(rid)
            if s is not None and n > 0:
                m = self.stats(s)
                step_tokens.setdefault(id(m), [m, 0])[1] += n
        for rid, cached in res.first:
            s = live.get(rid)
            if s is not None and id(self.stats(s)) in step_tokens:
                step_tokens[id(self.stats(s))][1] += s.prompt_len - cached
        for m, tokens in step_tokens.values():
            m.iteration_tokens.observe(tokens)
        for rid, n in res.emitted:
            s = live.get(rid)
            if s is None or n <= 0:
                continue
            m = self.stats(s)
            m.counters["vllm:generation_tokens"] += n
            if s.t_first < 0:
                s.t_first = t
                m.ttft.observe(t - s.t_arrival)
            else:
                m.itl.observe(t - s.t_last)
            s.t_last = t
            s.sent += n
            if s.stream:
                tr = s.transport
                if tr is None or tr.is_closing():  # client went away
                    _disconnected(rid, "client disconnected", s.sent - n)
                    self._close(s, aborted=True)
                    continue
                f = s.formatter
                assert f is not None  # streaming requests get one on arrival
                if f.role and s.sent == n:
                    _write_chunk(tr, f.role)
                _write_chunk(tr, f.chunk(n, rid in fin))
                if drop_after is not None and s.sent >= drop_after and rid not in fin:
                    s.dropped = True
                    _disconnected(rid, "drop-stream fault", s.sent)
                    tr.close()  # flushes what was written, then FIN: no [DONE], no final chunk
                    self._close(s, aborted=True)
        for rid, (_, prompt, cached, completion, cpu_cached) in fin.items():
            s = live.pop(rid, None)
            if s is None:
                continue
            s.usage = (prompt, cached, completion, cpu_cached)
            m = self.stats(s)
            m.success["length"] += 1
            m.e2e.observe(t - s.t_arrival)
            m.prompt_len.observe(prompt)
            m.output_len.observe(completion)
            if s.stream and s.transport is not None and not s.transport.is_closing():
                if s.include_usage:
                    assert s.formatter is not None  # streaming requests get one on arrival
                    _write_chunk(
                        s.transport,
                        s.formatter.usage_chunk(prompt, completion, cached, self.cfg.prompt_tokens_details, cpu_cached),
                    )
                _write_chunk(s.transport, fmt.DONE)
            if not s.done.done():
                s.done.set_result(None)
            if self.cfg.log_requests:
                log(
                    f"finished {rid}: prompt={prompt} cached={cached} completion={completion} "
                    f"ttft={s.t_first - s.t_arrival:.6f}s e2e={t - s.t_arrival:.6f}s engine={s.engine}"
                    + (f" request_id={s.client_rid}" if s.client_rid else "")
                )

    def _close(self, s: Live, aborted: bool) -> None:
        if self.live.pop(s.rid, None) is not None and aborted:
            self.core.abort(s.rid)
            self.stats(s).success["abort"] += 1
        if not s.done.done():
            s.done.set_result(None)


def _write_chunk(transport: Any, data: bytes) -> None:
    # HTTP/1.1 chunked framing of one SSE event, in one write.
    transport.write(b"%x\r\n%b\r\n" % (len(data), data))


def _safe_rid(rid: str) -> str:
    """A client's request id as one log token: printable, no spaces, at most 128 characters."""
    return "".join(c if "!" <= c <= "~" else "_" for c in rid[:128])


def _disconnected(rid: str, why: str, sent: int) -> None:
    log(f"{rid}: stream closed before the end ({why}) after {sent} tokens; request aborted", "WARNING")


# --- core adapter ------------------------------------------------------------------
def build_core(kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """-> (core, settings). The core's module is imported here, lazily."""
    from benchcamp.sim.engine import core as core_mod
    from benchcamp.sim.engine.settings import EngineSettings

    settings = EngineSettings(**kwargs).validate()
    import benchcamp.sim.engine.hashing  # noqa: F401 - imported now, not on the first request

    maker = getattr(core_mod, "Router", None) or core_mod.EngineCore
    return maker(settings), settings


def engines_of(core: Any) -> list[Any]:
    """The DP engines (ranks) behind ``core``: a Router's replicas, or the core itself."""
    return list(getattr(core, "replicas", None) or [core])


def core_stats(core: Any) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per DP engine: gauges and the cache/preemption counters from its ``counters()``."""
    gauges, counters = [], []
    for rank in engines_of(core):
        c = rank.counters()
        gauges.append({k: float(c.get(k[5:], 0.0)) for k in Metrics.GAUGES})
        counters.append(
            {
                f"vllm:{k}": float(c[f"{k}_total"])
                for k in (
                    "prefix_cache_queries",
                    "prefix_cache_hits",
                    "external_prefix_cache_queries",
                    "external_prefix_cache_hits",
                    "num_preemptions",
                    "external_kv_transfer_tokens",
                )
                if f"{k}_total" in c
            }
        )
    return gauges, counters


def cache_info(core: Any) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` the simulated engine knows, spelled as vLLM's."""
    rank = engines_of(core)[0]
    st = getattr(rank, "settings", None)
    if st is None:
        return {}
    override = st.num_gpu_blocks_override
    return {
        "block_size": str(st.block_size),
        "cache_dtype": st.kv_cache_dtype,
        "enable_prefix_caching": str(bool(st.enable_prefix_caching)),
        "gpu_memory_utilization": str(st.gpu_memory_utilization),
        "num_gpu_blocks": str(getattr(rank, "num_blocks", "None")),
        "num_gpu_blocks_override": "None" if override is None else str(override),
    }


def _max_model_len(settings: Any, core: Any) -> int:
    """--max-model-len if given, else the model profile's context length (as vLLM reads config.json)."""
    for obj in (core, settings):
        v = getattr(obj, "max_model_len", None)
        if isinstance(v, int) and v > 0:
            return v
    return int(settings.model_spec().max_model_len)


# --- HTTP -----------------------------------------------------------------------
def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


def _err(e: fmt.OpenAIError) -> web.Response:
    return _json(e.status, e.body())


@web.middleware
async def _json_errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Whatever goes wrong answers vLLM's JSON error shape, and logs one line."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status in (404, 405):  # no such route or method: FastAPI's own answer, as vLLM's
            return _json(exc.status, json.dumps({"detail": exc.reason}).encode())
        return _json(exc.status, fmt.error_body(exc.status, exc.reason, _ERROR_TYPES.get(exc.status, "Error")))
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 - a bug: the client gets JSON, the log one line
        log(f"{request.method} {request.path}: {type(exc).__name__}: {str(exc)[:200]}", "ERROR")
        return _json(500, fmt.error_body(500, f"internal error ({type(exc).__name__})", "InternalServerError"))


_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
}


def parse_body(raw: bytes, chat: bool, cfg: ServerConfig) -> tuple[fmt.ParsedRequest, int, list[int]]:
    """Body -> (request, output length, block hashes); raises OpenAIError (CPU-bound: large
    bodies run it off the event loop)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise fmt.bad_request("request body is nested too deeply") from None
    except json.JSONDecodeError as exc:  # FastAPI's answer, located at the character it stopped at
        raise fmt.validation_error(
            "json_invalid", f"body.{exc.pos}", "JSON decode error", "<dict of 0 items>", {"error": exc.msg}
        ) from None
    except ValueError as exc:  # not UTF-8
        raise fmt.bad_request(f"request body is not valid JSON: {exc}") from None
    p = fmt.parse_request(body, chat, cfg.vocab_size, cfg.names[0], cfg.counter)
    if p.model not in cfg.names:
        raise fmt.OpenAIError(
            404,
            f"The model `{p.model}` does not exist. Valid aliases: {', '.join(cfg.names)}.",
            "NotFoundError",
            "model",
        )
    fmt.check_vocab(p.prompt_ids, cfg.vocab_size)
    out_len = fmt.validate_lengths(len(p.prompt_ids), p.max_tokens, p.min_tokens, cfg.max_model_len, chat)
    from benchcamp.sim.engine.hashing import block_hashes_from_tokens

    return p, out_len, block_hashes_from_tokens(p.prompt_ids, cfg.block_size)


@dataclass
class Server:
    """What every route handler of one engine server reads: the core, its settings and faults, the clock, the
    metric registry, and the engine loop that ``on_startup`` starts on the server's event loop."""

    core: Any
    cfg: ServerConfig
    faults: FaultState
    clock: Callable[[], float]
    metrics: Metrics
    created: int
    rid_prefix: str
    requests: int = 0
    engine: EngineLoop | None = None

    def unauthorized(self, request: web.Request) -> web.Response | None:
        if self.cfg.api_key is None:
            return None
        if request.headers.get("Authorization", "") != f"Bearer {self.cfg.api_key}":
            return _json(401, b'{"error":"Unauthorized"}')  # vLLM's auth middleware, not an ErrorResponse
        return None

    def starting(self) -> bool:
        return self.faults.starting(self.clock())

    def loop(self) -> EngineLoop:
        assert self.engine is not None, "the engine loop starts with the application"
        return self.engine

    def next_rid(self, chat: bool) -> str:
        self.requests += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-{self.rid_prefix}{self.requests:010x}"


SERVER = web.AppKey("server", Server)


async def _start_engine(app: web.Application) -> None:
    srv = app[SERVER]
    srv.engine = EngineLoop(srv.core, srv.cfg, srv.faults, srv.metrics, srv.clock)
    srv.engine.task = asyncio.create_task(srv.engine.run())


async def _stop_engine(app: web.Application) -> None:
    eng = app[SERVER].engine
    if eng is not None and eng.task is not None:
        eng.task.cancel()


async def health(request: web.Request) -> web.Response:
    return web.Response(status=503 if request.app[SERVER].starting() else 200)


async def models(request: web.Request) -> web.Response:
    srv = request.app[SERVER]
    if (r := srv.unauthorized(request)) is not None:
        return r
    return _json(200, fmt.models_response(srv.cfg.names, srv.cfg.root, srv.cfg.max_model_len, srv.created))


async def prometheus(request: web.Request) -> web.Response:
    srv = request.app[SERVER]
    gauges, counters = core_stats(srv.loop().core)
    return web.Response(
        text=srv.metrics.render(gauges, counters),
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


async def version(request: web.Request) -> web.Response:
    return _json(200, json.dumps({"version": VERSION}).encode())


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    srv = request.app[SERVER]
    t_arrival = srv.clock()
    if (r := srv.unauthorized(request)) is not None:
        return r
    if srv.starting():
        return _json(
            503, fmt.error_body(503, "The server is starting (fault slow-start-seconds)", "ServiceUnavailableError")
        )
    eng = srv.loop()
    token = object()
    eng.arriving[token] = t_arrival
    try:
        return await _admit(srv, request, chat, t_arrival, token)
    finally:
        eng.arrived(token)


async def _read_body(cfg: ServerConfig, request: web.Request) -> bytes:
    """The body, refused early (413 from Content-Length, before reading) when it cannot
    hold a prompt that fits, and timed out (408) when the client stops sending it."""
    limit = cfg.max_body_bytes
    if (request.content_length or 0) > limit:
        raise fmt.OpenAIError(
            413,
            f"request body of {request.content_length} bytes is over the limit of "
            f"{limit} bytes ({BYTES_PER_TOKEN_MAX} bytes x max_model_len "
            f"{cfg.max_model_len})",
            "RequestEntityTooLargeError",
        )
    try:
        return await asyncio.wait_for(request.read(), cfg.body_timeout_s)
    except TimeoutError:
        raise fmt.OpenAIError(
            408, f"request body not received within {cfg.body_timeout_s:g} s", "RequestTimeoutError"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise fmt.OpenAIError(
            413, f"request body is over the limit of {limit} bytes", "RequestEntityTooLargeError"
        ) from None


async def _parse(cfg: ServerConfig, request: web.Request, chat: bool) -> tuple[fmt.ParsedRequest, int, list[int]]:
    raw = await _read_body(cfg, request)
    if len(raw) <= INLINE_PARSE_BYTES:
        return parse_body(raw, chat, cfg)
    # keep /health and the token streams answering while a large prompt is parsed
    return await asyncio.get_running_loop().run_in_executor(None, parse_body, raw, chat, cfg)


async def _admit(srv: Server, request: web.Request, chat: bool, t_arrival: float, token: object) -> web.StreamResponse:
    cfg, eng = srv.cfg, srv.loop()
    try:
        p, out_len, hashes = await _parse(cfg, request, chat)
    except fmt.OpenAIError as e:
        r = _err(e)
        if e.status in (408, 413):  # the body is left unread: close the connection after answering
            r.force_close()
        return r
    crash, fail = srv.faults.accept()
    if crash:
        log(f"fault crash-after-requests={srv.faults.faults.crash_after_requests}: exiting now", "ERROR")
        os._exit(3)
    if fail:
        return _json(500, fmt.error_body(500, "simulated fault: error-rate", "InternalServerError"))
    rid = srv.next_rid(chat)
    live = Live(
        rid=rid,
        prompt_len=len(p.prompt_ids),
        stream=p.stream,
        formatter=None,
        transport=None,
        include_usage=p.include_usage,
        t_arrival=t_arrival,
        done=asyncio.get_running_loop().create_future(),
        client_rid=_safe_rid(request.headers.get("X-Request-Id", "")) if cfg.log_requests else "",
    )
    resp: web.StreamResponse | None = None
    if p.stream:
        live.formatter = fmt.StreamFormatter(
            rid, p.model, chat, include_usage=p.include_usage, fingerprint=cfg.fingerprint, tool=p.tool
        )
        resp = await _open_stream(request)
        live.transport = request.transport
    eng.add(live, hashes, out_len, request.headers.get(cfg.routing_key_header) if cfg.routing_key_header else None)
    eng.arrived(token)
    try:
        await live.done
    finally:
        if not live.done.done() or live.rid in eng.live:  # cancelled: the client disconnected
            eng.abort(rid)
            _disconnected(rid, "client disconnected", live.sent)
    if not p.stream:
        return _full_response(cfg, live, p, chat)
    assert resp is not None
    return await _close_stream(request, live, resp)


async def _open_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    writer = resp._payload_writer  # noqa: SLF001 - flush the headers now, as uvicorn does
    send_headers = getattr(writer, "send_headers", None)
    if send_headers is not None:
        send_headers()
    return resp


def _full_response(cfg: ServerConfig, live: Live, p: fmt.ParsedRequest, chat: bool) -> web.Response:
    prompt, cached, completion, cpu_cached = live.usage or (live.prompt_len, 0, 0, None)
    return _json(
        200,
        fmt.full_response(
            live.rid,
            p.model,
            chat,
            completion,
            prompt,
            cached,
            cfg.prompt_tokens_details,
            cpu_cached=cpu_cached,
            fingerprint=cfg.fingerprint,
            tool=p.tool,
        ),
    )


async def _close_stream(request: web.Request, live: Live, resp: web.StreamResponse) -> web.StreamResponse:
    tr = request.transport
    if live.dropped or tr is None or tr.is_closing():
        # Cut by the drop-stream fault or by the client (logged where it was seen). Returning,
        # not raising, lets aiohttp treat it as a premature disconnection: no traceback.
        if tr is not None:
            tr.close()
        return resp
    await resp.write_eof()
    return resp


def make_app(core: Any, cfg: ServerConfig, faults: FaultState, clock: Callable[[], float]) -> web.Application:
    metrics = Metrics(
        cfg.names[0], engines=len(engines_of(core)), max_model_len=cfg.max_model_len, cache_info=cache_info(core)
    )
    # aiohttp's own limit backs up the early Content-Length check for chunked bodies
    app = web.Application(client_max_size=cfg.max_body_bytes, middlewares=[_json_errors])
    app[SERVER] = Server(
        core=core,
        cfg=cfg,
        faults=faults,
        clock=clock,
        metrics=metrics,
        created=int(time.time()),
        rid_prefix=f"{os.getpid():x}{int(time.time()) & 0xFFFFFF:06x}",
    )
    app.on_startup.append(_start_engine)
    app.on_cleanup.append(_stop_engine)
    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", prometheus)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def _serve(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, keepalive_timeout=KEEP_ALIVE_S, lingering_time=0
    )  # an unread (refused) body is not drained: close
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    bound = port
    for s in getattr(site._server, "sockets", None) or []:  # noqa: SLF001 - the real port when port=0
        bound = s.getsockname()[1]
        break
    shown = host if host not in ("", "0.0.0.0", "::") else "0.0.0.0"
    log(f"Starting vLLM API server 0 on http://{shown}:{bound}")
    print(f"INFO:     Uvicorn running on http://{shown}:{bound} (Press CTRL+C to quit)", flush=True)
    print("INFO:     Application startup complete.", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    await stop.wait()
    log("Shutting down")
    await runner.cleanup()


def run_server(argv: list[str]) -> int:
    """Parse ``vllm serve`` flags, build the core, serve until SIGINT/SIGTERM."""
    from benchcamp.workload.tokencount import counter_for

    parsed = parse_serve_args(argv)
    args = parsed.args
    log(f"vLLM API server version {VERSION} (benchcamp simulated engine)")
    log(f"args: {' '.join(redacted_argv(list(argv)))}")
    if parsed.ignored:
        log(
            f"ignoring vLLM flags the simulated engine does not model: {' '.join(redacted_argv(parsed.ignored))}",
            "WARNING",
        )
    try:
        faults = FaultState(parse_faults(args.fault))
        core, settings = build_core(settings_kwargs(args))
    except ValueError as exc:  # FaultError, settings/profile errors: name the flag and the fix
        log(f"cannot start: {exc}", "ERROR")
        print(f"benchcamp engine serve: {exc}", file=sys.stderr)
        return 2
    if faults.faults.active():
        log(f"fault injection active: {faults.faults.active()}", "WARNING")
    block_size = int(getattr(settings, "block_size", None) or 16)
    blocks = int(getattr(engines_of(core)[0], "num_blocks", 0) or 0)
    if blocks:  # as vLLM logs it (kv_cache_utils), per engine: compare with a real engine's log
        log(f"KV cache size: {blocks * block_size:,} tokens ({blocks:,} blocks of {block_size}) per engine")
    cfg = ServerConfig(
        names=served_names(args),
        root=args.model,
        api_key=args.api_key,
        max_model_len=_max_model_len(settings, core),
        block_size=block_size,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        log_requests=args.log_requests,
        time_scale=args.time_scale,
        vocab_size=int(settings.model_spec().vocab_size),
        body_timeout_s=args.request_body_timeout_s,
        fingerprint=fmt.system_fingerprint(VERSION, " ".join(redacted_argv(list(argv)))),
        routing_key_header=args.routing_key_header,
        counter=counter_for(args.model, getattr(args, "tokenizer", None)),
    )
    if args.kv_transfer is not None:
        from benchcamp.sim.engine.kv_connector import SharedStorage

        cfg.kv_storage = SharedStorage(args.kv_transfer, block_size)
        log(
            f"KV connector {args.kv_transfer.connector} ({args.kv_transfer.role}): shared folder "
            f"{args.kv_transfer.storage}, link {settings.kv_link_gbps:g} GB/s + {settings.kv_link_latency_us:g} us"
        )
    log(f"chat prompts not built by benchcamp are counted by {cfg.counter.family} (benchcamp.workload.tokencount)")
    if args.time_scale != 1.0:
        log(f"--time-scale {args.time_scale}: step times are scaled; a benchmark setting, not a GPU model", "WARNING")
    log(
        f"serving {cfg.names} max_model_len={cfg.max_model_len} block_size={block_size} "
        f"api_key={'set' if cfg.api_key else 'none'} hf_token={'set' if args.hf_token else 'none'}"
    )
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    app = make_app(core, cfg, faults, clock)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_serve(app, args.host, args.port))
    else:
        uvloop.run(_serve(app, args.host, args.port))
    return 0


def main() -> int:
    return run_server(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
