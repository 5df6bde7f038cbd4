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
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from benchcamp.engine import openai_format as fmt
from benchcamp.engine.cli_args import parse_serve_args, redacted_argv, served_names, settings_kwargs
from benchcamp.engine.faults import FaultState, parse_faults
from benchcamp.engine.prom import Metrics

VERSION = "0.11.0"
RESYNC_S = 0.05          # lag beyond which the engine timeline jumps to the wall clock
IDLE_POLL_S = 0.005      # wait when the core has work but nothing schedulable
ADMIT_WAIT_S = 0.05      # longest a step waits for requests that arrived before it but are still parsed
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


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
    usage: tuple[int, int, int, int | None] | None = None   # prompt, cached, completion, of which from CPU
    dropped: bool = False


@dataclass
class ServerConfig:
    names: list[str]
    root: str
    api_key: str | None
    max_model_len: int
    block_size: int
    prompt_tokens_details: bool
    log_requests: bool = False
    time_scale: float = 1.0    # benchmark-only: scales modelled step times (0 = free steps)


class EngineLoop:
    def __init__(self, core: Any, cfg: ServerConfig, faults: FaultState, metrics: Metrics,
                 clock: Callable[[], float]) -> None:
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
    def add(self, live: Live, block_hashes: list[int], max_tokens: int) -> None:
        self.last_arrival = max(self.last_arrival, live.t_arrival)
        self.live[live.rid] = live
        self.core.add_request(live.rid, block_hashes, live.prompt_len, max_tokens, live.t_arrival)
        self.wake.set()

    def abort(self, rid: str) -> None:
        if self.live.pop(rid, None) is not None:
            self.core.abort(rid)
            self.metrics.success["abort"] += 1

    # --- the loop ----------------------------------------------------------
    async def run(self) -> None:
        t_engine: float | None = None   # end of the previous step on the engine timeline
        floor = 0.0                     # the engine timeline never runs backwards
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
                    except asyncio.TimeoutError:
                        break
            res = self.core.step(now)
            end = now + res.duration_s * scale
            floor = end
            delay = end - self.clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            if not (res.emitted or res.first or res.finished) and res.duration_s <= 0:
                t_engine = None
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), IDLE_POLL_S)
                except asyncio.TimeoutError:
                    pass
                continue
            t_engine = end
            self.deliver(res, end)

    def deliver(self, res: Any, t: float) -> None:
        live, m = self.live, self.metrics
        fin = {f[0]: f for f in res.finished}
        for rid, cached in res.first:
            s = live.get(rid)
            if s is not None:
                s.cached = cached
                m.counters["vllm:prompt_tokens"] += s.prompt_len
        gen = 0
        drop_after = self.faults.faults.drop_stream_after_tokens
        for rid, n in res.emitted:
            s = live.get(rid)
            if s is None or n <= 0:
                continue
            gen += n
            if s.t_first < 0:
                s.t_first = t
                m.ttft.observe(t - s.t_arrival)
            else:
                m.itl.observe(t - s.t_last)
            s.t_last = t
            s.sent += n
            if s.stream:
                tr = s.transport
                if tr is None or tr.is_closing():      # client went away
                    self._close(s, aborted=True)
                    continue
                f = s.formatter
                if f.role and s.sent == n:
                    _write_chunk(tr, f.role)
                _write_chunk(tr, f.chunk(n, rid in fin))
                if drop_after is not None and s.sent >= drop_after and rid not in fin:
                    s.dropped = True
                    tr.close()    # flushes what was written, then FIN: no [DONE], no final chunk
                    self._close(s, aborted=True)
        m.counters["vllm:generation_tokens"] += gen
        for rid, (_, prompt, cached, completion, cpu_cached) in fin.items():
            s = live.pop(rid, None)
            if s is None:
                continue
            s.usage = (prompt, cached, completion, cpu_cached)
            m.success["length"] += 1
            m.e2e.observe(t - s.t_arrival)
            if s.stream and s.transport is not None and not s.transport.is_closing():
                if s.include_usage:
                    _write_chunk(s.transport, s.formatter.usage_chunk(prompt, completion, cached,
                                                                      self.cfg.prompt_tokens_details, cpu_cached))
                _write_chunk(s.transport, fmt.DONE)
            if not s.done.done():
                s.done.set_result(None)
            if self.cfg.log_requests:
                log(f"finished {rid}: prompt={prompt} cached={cached} completion={completion} "
                    f"ttft={s.t_first - s.t_arrival:.4f}s e2e={t - s.t_arrival:.4f}s")

    def _close(self, s: Live, aborted: bool) -> None:
        if self.live.pop(s.rid, None) is not None and aborted:
            self.core.abort(s.rid)
            self.metrics.success["abort"] += 1
        if not s.done.done():
            s.done.set_result(None)


def _write_chunk(transport: Any, data: bytes) -> None:
    # HTTP/1.1 chunked framing of one SSE event, in one write.
    transport.write(b"%x\r\n%b\r\n" % (len(data), data))


# --- core adapter ------------------------------------------------------------------
def build_core(kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """-> (core, settings). The core's module is imported here, lazily."""
    from benchcamp.engine import core as core_mod
    from benchcamp.engine.settings import EngineSettings

    settings = EngineSettings(**kwargs).validate()
    import benchcamp.engine.hashing  # noqa: F401 - imported now, not on the first request
    maker = getattr(core_mod, "Router", None) or core_mod.EngineCore
    return maker(settings), settings


def core_stats(core: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Gauges and the cache/preemption counters from the core's ``counters()`` (summed over DP ranks)."""
    c = core.counters()
    gauges = {k: float(c.get(k[5:], 0.0)) for k in Metrics.GAUGES}
    counters = {f"vllm:{k}": float(c[f"{k}_total"])
                for k in ("prefix_cache_queries", "prefix_cache_hits", "external_prefix_cache_queries",
                          "external_prefix_cache_hits", "num_preemptions") if f"{k}_total" in c}
    return gauges, counters


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


def make_app(core: Any, cfg: ServerConfig, faults: FaultState, clock: Callable[[], float]) -> web.Application:
    metrics = Metrics(cfg.names[0])
    app = web.Application(client_max_size=64 * 1024 * 1024)
    state: dict[str, Any] = {"n": 0, "created": int(time.time())}
    prefix = f"{os.getpid():x}{int(time.time()) & 0xffffff:06x}"
    hashing: dict[str, Any] = {}

    def block_hashes(ids: list[int]) -> list[int]:
        if "fn" not in hashing:
            from benchcamp.engine.hashing import block_hashes_from_tokens
            hashing["fn"] = block_hashes_from_tokens
        return hashing["fn"](ids, cfg.block_size)

    async def on_startup(app: web.Application) -> None:
        loop = EngineLoop(core, cfg, faults, metrics, clock)
        app["engine"] = loop
        loop.task = asyncio.create_task(loop.run())

    async def on_cleanup(app: web.Application) -> None:
        t = app["engine"].task
        if t is not None:
            t.cancel()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)

    def unauthorized(request: web.Request) -> web.Response | None:
        if cfg.api_key is None:
            return None
        if request.headers.get("Authorization", "") != f"Bearer {cfg.api_key}":
            return _json(401, fmt.error_body(401, "Unauthorized", "Unauthorized"))
        return None

    def starting() -> bool:
        return faults.starting(clock())

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=503 if starting() else 200)

    async def models(request: web.Request) -> web.Response:
        if (r := unauthorized(request)) is not None:
            return r
        return _json(200, fmt.models_response(cfg.names, cfg.root, cfg.max_model_len, state["created"]))

    async def prometheus(request: web.Request) -> web.Response:
        eng: EngineLoop = app["engine"]
        gauges, counters = core_stats(eng.core)
        return web.Response(text=metrics.render(gauges, counters), content_type="text/plain",
                            charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
        t_arrival = clock()
        if (r := unauthorized(request)) is not None:
            return r
        if starting():
            return _json(503, fmt.error_body(503, "The server is starting (fault slow-start-seconds)",
                                             "ServiceUnavailableError"))
        eng: EngineLoop = app["engine"]
        token = object()
        eng.arriving[token] = t_arrival
        try:
            return await admit(request, chat, t_arrival, eng, token)
        finally:
            eng.arrived(token)

    async def admit(request: web.Request, chat: bool, t_arrival: float, eng: EngineLoop,
                    token: object) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return _err(fmt.bad_request(f"request body is not valid JSON: {exc}"))
        try:
            p = fmt.parse_request(body, chat)
            if p.model not in cfg.names:
                raise fmt.OpenAIError(404, f"The model `{p.model}` does not exist.", "NotFoundError", "model")
            out_len = fmt.validate_lengths(len(p.prompt_ids), p.max_tokens, p.min_tokens, cfg.max_model_len)
        except fmt.OpenAIError as e:
            return _err(e)
        crash, fail = faults.accept()
        if crash:
            log(f"fault crash-after-requests={faults.faults.crash_after_requests}: exiting now", "ERROR")
            os._exit(3)
        if fail:
            return _json(500, fmt.error_body(500, "simulated fault: error-rate", "InternalServerError"))
        state["n"] += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{prefix}{state['n']:010x}"
        loop = asyncio.get_running_loop()
        live = Live(rid=rid, prompt_len=len(p.prompt_ids), stream=p.stream, formatter=None, transport=None,
                    include_usage=p.include_usage, t_arrival=t_arrival, done=loop.create_future())
        resp: web.StreamResponse | None = None
        if p.stream:
            live.formatter = fmt.StreamFormatter(rid, p.model, chat)
            resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            writer = resp._payload_writer  # noqa: SLF001 - flush the headers now, as uvicorn does
            send_headers = getattr(writer, "send_headers", None)
            if send_headers is not None:
                send_headers()
            live.transport = request.transport
        hashes = block_hashes(p.prompt_ids)
        eng.add(live, hashes, out_len)
        eng.arrived(token)
        try:
            await live.done
        finally:
            if not live.done.done() or live.rid in eng.live:   # cancelled: the client disconnected
                eng.abort(rid)
        if not p.stream:
            prompt, cached, completion, cpu_cached = live.usage or (live.prompt_len, 0, 0, None)
            return _json(200, fmt.full_response(rid, p.model, chat, completion, prompt, cached,
                                                cfg.prompt_tokens_details, cpu_cached=cpu_cached))
        assert resp is not None
        tr = request.transport
        if live.dropped or tr is None or tr.is_closing():
            # cut by the drop-stream fault or by the client: aiohttp closes the connection quietly
            raise ConnectionResetError("stream closed before the end")
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=True)

    async def version(request: web.Request) -> web.Response:
        return _json(200, json.dumps({"version": VERSION}).encode())

    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", prometheus)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def _serve(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
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
    parsed = parse_serve_args(argv)
    args = parsed.args
    log(f"vLLM API server version {VERSION} (benchcamp simulated engine)")
    log(f"args: {' '.join(redacted_argv(list(argv)))}")
    if parsed.ignored:
        log(f"ignoring vLLM flags the simulated engine does not model: {' '.join(redacted_argv(parsed.ignored))}",
            "WARNING")
    try:
        faults = FaultState(parse_faults(args.fault))
        core, settings = build_core(settings_kwargs(args))
    except ValueError as exc:   # FaultError, settings/profile errors: name the flag and the fix
        log(f"cannot start: {exc}", "ERROR")
        print(f"benchcamp engine serve: {exc}", file=sys.stderr)
        return 2
    if faults.faults.active():
        log(f"fault injection active: {faults.faults.active()}", "WARNING")
    block_size = int(getattr(settings, "block_size", None) or 16)
    cfg = ServerConfig(names=served_names(args), root=args.model, api_key=args.api_key,
                       max_model_len=_max_model_len(settings, core), block_size=block_size,
                       prompt_tokens_details=args.enable_prompt_tokens_details, log_requests=args.log_requests,
                       time_scale=args.time_scale)
    if args.time_scale != 1.0:
        log(f"--time-scale {args.time_scale}: step times are scaled; a benchmark setting, not a GPU model",
            "WARNING")
    log(f"serving {cfg.names} max_model_len={cfg.max_model_len} block_size={block_size} "
        f"api_key={'set' if cfg.api_key else 'none'}")
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
