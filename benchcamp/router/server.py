"""The router's HTTP server (aiohttp): see :mod:`benchcamp.router` for what it does.

The client's ``Authorization`` header is checked against ``VLLM_API_KEY`` (when set) and
forwarded unchanged: every engine of a deployment shares the deployment's key. A backend
that cannot be reached answers 502 in vLLM's JSON error shape, naming the backend.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from benchcamp.router import DEFAULT_SESSION_HEADER, ROUTER_POLICIES
from benchcamp.router.affinity import replica_index

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding"}
_LABELS = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?(\s.*)$")


def log(msg: str, level: str = "INFO") -> None:
    sys.stdout.write(f"{level} {time.strftime('%m-%d %H:%M:%S')} [router] {msg}\n")
    sys.stdout.flush()


@dataclass
class Pool:
    """One role's backends (base URLs) and how the next one is picked."""

    role: str  # unified | prefill | decode
    urls: list[str]
    rr: itertools.cycle = field(init=False)
    sent: list[int] = field(init=False)
    failed: list[int] = field(init=False)
    inflight: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.rr = itertools.cycle(range(len(self.urls)))
        self.sent = [0] * len(self.urls)
        self.failed = [0] * len(self.urls)
        self.inflight = [0] * len(self.urls)

    def pick(self, key: str | None, policy: str = "round_robin") -> int:
        """The backend for a request: by ``key`` (session affinity) when there is one, else by ``policy``."""
        n = len(self.urls)
        if key:
            i = replica_index(key, n)
        elif policy == "random":
            i = random.randrange(n)
        elif policy == "least_loaded":
            i = min(range(n), key=lambda b: (self.inflight[b], self.sent[b]))
        else:
            i = next(self.rr)
        self.sent[i] += 1
        return i


@dataclass
class RouterConfig:
    pools: list[Pool]
    policy: str = "round_robin"
    session_header: str = DEFAULT_SESSION_HEADER
    api_key: str | None = None

    @property
    def pd(self) -> bool:
        return any(p.role == "prefill" for p in self.pools)

    def pool(self, role: str) -> Pool:
        return next(p for p in self.pools if p.role == role)


def _error(status: int, message: str, kind: str = "BadGatewayError") -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json")


def _forward_headers(request: web.Request, request_id: str) -> dict[str, str]:
    out = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    out["X-Request-Id"] = request_id
    return out


def relabel(text: str, labels: str) -> list[tuple[str, list[str], list[str]]]:
    """An exposition as families (name, HELP/TYPE lines, samples) with ``labels`` added to every sample."""
    families: list[tuple[str, list[str], list[str]]] = []
    current: tuple[str, list[str], list[str]] | None = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                if current is None or current[0] != parts[2]:
                    current = (parts[2], [], [])
                    families.append(current)
                current[1].append(line)
            continue
        m = _LABELS.match(line)
        if not m:
            continue
        name, inner, rest = m.group(1), m.group(3), m.group(4)
        if current is None:
            current = (name, [], [])
            families.append(current)
        current[2].append(f"{name}{{{labels}{',' + inner if inner else ''}}}{rest}")
    return families


def merge_expositions(parts: Sequence[tuple[str, str]]) -> str:
    """Several (labels, exposition) as one exposition: each family once, its samples from every part."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for labels, text in parts:
        for name, head, samples in relabel(text, labels):
            h, s = merged.setdefault(name, (head, []))
            s.extend(samples)
    out: list[str] = []
    for head, samples in merged.values():
        out += head + samples
    return "\n".join(out) + "\n"


@dataclass
class RouterState:
    """What every route handler of one router reads: its settings, the HTTP client it forwards with (opened on
    the server's event loop at startup) and its request and error counts."""

    cfg: RouterConfig
    client: ClientSession | None = None
    requests: int = 0
    errors: int = 0

    def http(self) -> ClientSession:
        assert self.client is not None, "the client opens with the application"
        return self.client

    def unauthorized(self, request: web.Request) -> web.Response | None:
        if self.cfg.api_key and request.headers.get("Authorization", "") != f"Bearer {self.cfg.api_key}":
            return web.Response(status=401, body=b'{"error":"Unauthorized"}', content_type="application/json")
        return None

    def key_of(self, request: web.Request) -> str | None:
        """The session-affinity key of a request, where the policy routes by session."""
        if self.cfg.policy not in ("session", "session_affinity"):
            return None
        return request.headers.get(self.cfg.session_header) or None

    def backends(self) -> list[tuple[Pool, int, str]]:
        return [(p, i, u) for p in self.cfg.pools for i, u in enumerate(p.urls)]

    async def get_json(self, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        try:
            async with self.http().get(url, headers=headers, timeout=ClientTimeout(total=5)) as r:
                return r.status, await r.read()
        except (TimeoutError, ClientError, OSError) as exc:
            return 0, str(exc).encode()


ROUTER = web.AppKey("router", RouterState)


async def _open_client(app: web.Application) -> None:
    app[ROUTER].client = ClientSession(
        connector=TCPConnector(limit=0, ttl_dns_cache=None),
        timeout=ClientTimeout(total=None, sock_connect=10),
        auto_decompress=False,
    )


async def _close_client(app: web.Application) -> None:
    await app[ROUTER].http().close()


async def _stream_back(
    rt: RouterState, request: web.Request, url: str, body: bytes, headers: dict[str, str], pool: Pool, i: int
) -> web.StreamResponse:
    pool.inflight[i] += 1
    try:
        async with rt.http().post(url, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status)
            for k in ("Content-Type", "Cache-Control"):
                if k in up.headers:
                    resp.headers[k] = up.headers[k]
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
    except (ClientError, OSError) as exc:
        pool.failed[i] += 1
        rt.errors += 1
        return _error(502, f"{pool.role} backend {pool.urls[i]} failed: {type(exc).__name__}: {exc}")
    finally:
        pool.inflight[i] -= 1


def _prefill_body(body: dict) -> dict:
    """The prefill half of a disaggregated request: one token, not streamed, asking for the KV to be handed on."""
    prefill = dict(body)
    prefill["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    prefill["stream"] = False
    prefill["max_tokens"] = 1
    if "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    for k in ("stream_options", "min_tokens", "min_completion_tokens"):
        prefill.pop(k, None)
    return prefill


async def generate(request: web.Request) -> web.StreamResponse:
    rt = request.app[ROUTER]
    cfg = rt.cfg
    if (r := rt.unauthorized(request)) is not None:
        return r
    rt.requests += 1
    path = request.path
    raw = await request.read()
    request_id = request.headers.get("X-Request-Id") or str(uuid.uuid4())
    headers = _forward_headers(request, request_id)
    key = rt.key_of(request)
    if not cfg.pd:
        pool = cfg.pool("unified")
        i = pool.pick(key, cfg.policy)
        return await _stream_back(rt, request, pool.urls[i] + path, raw, headers, pool, i)
    try:
        body = json.loads(raw)
    except ValueError:
        return _error(400, "request body is not valid JSON", "BadRequestError")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object", "BadRequestError")
    pp = cfg.pool("prefill")
    i = pp.pick(key, cfg.policy)
    pp.inflight[i] += 1
    try:
        async with rt.http().post(
            pp.urls[i] + path, data=json.dumps(_prefill_body(body)).encode(), headers=headers
        ) as up:
            answer = await up.read()
            if up.status != 200:  # the prefill's own error, as it said it
                rt.errors += 1
                return web.Response(status=up.status, body=answer, content_type="application/json")
    except (ClientError, OSError) as exc:
        pp.failed[i] += 1
        rt.errors += 1
        return _error(502, f"prefill backend {pp.urls[i]} failed: {type(exc).__name__}: {exc}")
    finally:
        pp.inflight[i] -= 1
    try:
        params = json.loads(answer).get("kv_transfer_params")
    except (ValueError, AttributeError):
        params = None
    decode_body = raw
    if params:
        decode_body = json.dumps(dict(body, kv_transfer_params=params)).encode()
    dp = cfg.pool("decode")
    j = dp.pick(key, cfg.policy)
    return await _stream_back(rt, request, dp.urls[j] + path, decode_body, headers, dp, j)


async def health(request: web.Request) -> web.Response:
    rt = request.app[ROUTER]
    backends = rt.backends()
    answers = await asyncio.gather(*(rt.get_json(u + "/health") for _, _, u in backends))
    down = [
        f"{p.role}[{i}] {u}: {st or b.decode(errors='replace')}"
        for (p, i, u), (st, b) in zip(backends, answers)
        if st != 200
    ]
    if down:
        return web.Response(status=503, text="backends not ready: " + "; ".join(down))
    return web.Response(status=200)


async def models(request: web.Request) -> web.Response:
    rt = request.app[ROUTER]
    if (r := rt.unauthorized(request)) is not None:
        return r
    pool = rt.cfg.pool("decode") if rt.cfg.pd else rt.cfg.pool("unified")
    auth = {"Authorization": request.headers["Authorization"]} if "Authorization" in request.headers else {}
    status, body = await rt.get_json(pool.urls[0] + "/v1/models", auth)
    if status == 0:
        return _error(502, f"{pool.role} backend {pool.urls[0]} failed: {body.decode(errors='replace')}")
    return web.Response(status=status, body=body, content_type="application/json")


def _own_metrics(backends: list[tuple[Pool, int, str]], found: list[tuple[int, bytes]]) -> list[str]:
    """The router's own series: requests routed and backend errors per backend, and which backends answered."""
    own = [
        "# HELP benchcamp_router_requests_total Requests routed, by role and instance.",
        "# TYPE benchcamp_router_requests_total counter",
    ]
    own += [f'benchcamp_router_requests_total{{role="{p.role}",instance="{i}"}} {p.sent[i]}' for p, i, _ in backends]
    own += [
        "# HELP benchcamp_router_backend_errors_total Requests a backend could not serve (connection failed).",
        "# TYPE benchcamp_router_backend_errors_total counter",
    ]
    own += [
        f'benchcamp_router_backend_errors_total{{role="{p.role}",instance="{i}"}} {p.failed[i]}' for p, i, _ in backends
    ]
    own += [
        "# HELP benchcamp_router_backend_up Whether the backend's /metrics answered.",
        "# TYPE benchcamp_router_backend_up gauge",
    ]
    own += [
        f'benchcamp_router_backend_up{{role="{p.role}",instance="{i}"}} {int(st == 200)}'
        for (p, i, _), (st, _b) in zip(backends, found)
    ]
    return own


async def metrics(request: web.Request) -> web.Response:
    rt = request.app[ROUTER]
    backends = rt.backends()
    found = await asyncio.gather(*(rt.get_json(u + "/metrics") for _, _, u in backends))
    parts = [
        (f'role="{p.role}",instance="{i}"', body.decode("utf-8", "replace"))
        for (p, i, _), (st, body) in zip(backends, found)
        if st == 200
    ]
    text = merge_expositions(parts) + "\n".join(_own_metrics(backends, list(found))) + "\n"
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


def make_app(cfg: RouterConfig) -> web.Application:
    app = web.Application(client_max_size=1 << 30)
    app[ROUTER] = RouterState(cfg)
    app.on_startup.append(_open_client)
    app.on_cleanup.append(_close_client)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchcamp router", description="OpenAI-compatible router in front of engines")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", action="append", default=[], metavar="URL", help="a unified replica (repeatable)")
    p.add_argument("--prefill", action="append", default=[], metavar="URL", help="a prefill instance (repeatable)")
    p.add_argument("--decode", action="append", default=[], metavar="URL", help="a decode instance (repeatable)")
    p.add_argument("--policy", choices=ROUTER_POLICIES, default="round_robin")
    p.add_argument("--session-header", default=DEFAULT_SESSION_HEADER)
    return p


def config_from_args(argv: Sequence[str]) -> tuple[RouterConfig, str, int]:
    parser = build_parser()
    a = parser.parse_args(list(argv))
    if a.backend and (a.prefill or a.decode):
        parser.error("give --backend (unified replicas) or --prefill and --decode, not both")
    if bool(a.prefill) != bool(a.decode):
        parser.error("prefill/decode disaggregation needs at least one --prefill and one --decode")
    if not (a.backend or a.prefill):
        parser.error("no backends: give --backend URL, or --prefill URL and --decode URL")
    strip = [u.rstrip("/").removesuffix("/v1") for u in a.backend]
    pools = (
        [Pool("unified", strip)]
        if a.backend
        else [
            Pool("prefill", [u.rstrip("/").removesuffix("/v1") for u in a.prefill]),
            Pool("decode", [u.rstrip("/").removesuffix("/v1") for u in a.decode]),
        ]
    )
    cfg = RouterConfig(pools, a.policy, a.session_header, os.environ.get("VLLM_API_KEY") or None)
    return cfg, a.host, a.port


async def _serve(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    for sock in getattr(site._server, "sockets", None) or []:  # noqa: SLF001 - the real port when port=0
        port = sock.getsockname()[1]
        break
    log(f"router serving on http://{host}:{port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log("Shutting down")
    await runner.cleanup()


def run_router(argv: Sequence[str]) -> int:
    cfg, host, port = config_from_args(argv)
    for p in cfg.pools:
        log(f"{p.role}: {', '.join(p.urls)}")
    log(f"policy {cfg.policy} (session header {cfg.session_header}); api_key={'set' if cfg.api_key else 'none'}")
    app = make_app(cfg)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_serve(app, host, port))
    else:
        uvloop.run(_serve(app, host, port))
    return 0


def main() -> int:
    return run_router(sys.argv[1:])
