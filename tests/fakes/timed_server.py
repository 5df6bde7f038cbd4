"""A streaming OpenAI-compatible server with known, deterministic timings, for tests.

Each request: the first token is written ``ttft_s`` after arrival, token k at
``ttft_s + k * tpot_s`` (absolute schedule, no drift), then a usage chunk
(with ``prompt_tokens_details.cached_tokens`` from 16-token prefix blocks seen
before) and ``data: [DONE]``. The server logs when every chunk was actually
written (time.monotonic just before and just after the write, shared with the client
processes on Linux), the
arrival of every request, and the peak number of requests in flight.

Faults, per request, from ``fault(request_id) -> str | None``: "500",
"truncate" (2 chunks, then the stream ends without [DONE]), "reset" (2
chunks, then the TCP connection is aborted), "hang" (never answers).
``api_key`` set: requests without ``Authorization: Bearer <key>`` get 401.

Runs aiohttp on 127.0.0.1 with a free port, in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from aiohttp import web
from threaded_server import ThreadedServer

BLOCK = 16


class TimedServer(ThreadedServer):
    name = "timed server"
    runner_options = {"handler_cancellation": True}

    def __init__(self, ttft_s: float = 0.05, tpot_s: float = 0.01, api_key: str | None = None,
                 model: str = "test-model", fault: Callable[[str], str | None] | None = None,
                 metrics: bool = True) -> None:
        super().__init__()
        self.ttft_s, self.tpot_s = ttft_s, tpot_s
        self.api_key, self.model, self.fault = api_key, model, fault
        self.metrics_enabled = metrics
        self.log: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        self.seen_blocks: set[int] = set()
        self.counters = {"prefix_cache_hits": 0, "prefix_cache_queries": 0, "request_success": 0,
                         "prompt_tokens": 0, "generation_tokens": 0}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        if self.metrics_enabled:
            app.router.add_get("/metrics", self._metrics)
        return app

    # -- handlers -----------------------------------------------------------------
    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = [f'vllm:{k}_total{{model_name="{self.model}"}} {float(v)}' for k, v in self.counters.items()]
        return web.Response(text="\n".join(lines) + "\n")

    def _cached(self, prompt: list[int]) -> int:
        cached, h, hit = 0, 0, True
        for i in range(len(prompt) // BLOCK):
            h = hash((h, tuple(prompt[i * BLOCK:(i + 1) * BLOCK])))
            if hit and h in self.seen_blocks:
                cached += BLOCK
            else:
                hit = False
            self.seen_blocks.add(h)
        return cached

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        rid = request.headers.get("X-Request-Id", "")
        entry = {"rid": rid, "arrival": arrival, "chunks": [], "written": [], "done": None, "path": request.path}
        self.log.append(entry)
        if not self._authorized(request):
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][0]["content"].split() if chat else body["prompt"]
        n = int(body["max_tokens"])
        entry.update(prompt_len=len(prompt), max_tokens=n, min_tokens=body.get("min_tokens"),
                     ignore_eos=body.get("ignore_eos"), stream_options=body.get("stream_options"),
                     prompt_head=list(prompt[:4]) if not chat else None)
        fault = self.fault(rid) if self.fault else None
        entry["fault"] = fault
        if fault == "500":
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if fault == "hang":
                await asyncio.sleep(3600)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            cached = self._cached(prompt) if not chat else 0
            for k in range(n):
                await _sleep_until(arrival + self.ttft_s + k * self.tpot_s)
                if fault in ("truncate", "reset") and k == 2:
                    if fault == "reset":
                        request.transport.abort()  # type: ignore[union-attr]
                        entry["done"] = time.monotonic()
                        return resp
                    await resp.write_eof()
                    entry["done"] = time.monotonic()
                    return resp
                if chat:
                    chunk = {"id": "c", "object": "chat.completion.chunk", "model": self.model,
                             "choices": [{"index": 0, "delta": {"content": f"w{k} "}, "finish_reason": None}],
                             "usage": None}
                else:
                    chunk = {"id": "c", "object": "text_completion", "model": self.model,
                             "choices": [{"index": 0, "text": f"w{k} ", "logprobs": None, "finish_reason": None}],
                             "usage": None}
                data = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
                entry["chunks"].append(time.monotonic())
                await resp.write(data)
                # on loopback the client's kernel stamps the chunk inside this write: between the two
                # stamps, whatever held this thread (the GIL, 2 shared cores) before or after the send
                entry["written"].append(time.monotonic())
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n,
                     "prompt_tokens_details": {"cached_tokens": cached}}
            await resp.write(b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage},
                                                    separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            entry["done"] = time.monotonic()
            c = self.counters
            c["request_success"] += 1
            c["prompt_tokens"] += len(prompt)
            c["generation_tokens"] += n
            c["prefix_cache_queries"] += len(prompt)
            c["prefix_cache_hits"] += cached
            return resp
        finally:
            self.inflight -= 1


async def _sleep_until(t: float) -> None:
    d = t - time.monotonic()
    if d > 0:
        await asyncio.sleep(d)


def by_rid(log: list[dict]) -> dict[str, dict]:
    return {e["rid"]: e for e in log}
