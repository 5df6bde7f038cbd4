"""A plain OpenAI-compatible server, neither benchcamp's nor vLLM's, for tests.

What a strict OpenAI-style server does, and vLLM does differently:
- no ``/health`` and no ``/metrics`` (404);
- ``/v1/completions`` takes text prompts only: a token-id prompt is HTTP 400;
- vLLM's extra sampling fields (``min_tokens``, ``ignore_eos``) are HTTP 400
  ("Unrecognized request argument supplied"), as OpenAI's API answers;
- usage (with ``stream_options.include_usage``) has no ``prompt_tokens_details``.

Variants: ``chat_only`` (``/v1/completions`` is 404), ``refuse_all`` (every
POST is HTTP 400 with ``refusal`` as the message), ``max_context`` (prompts
longer than this many words are HTTP 400, like a model's context limit).
Every POST is logged (path, the body's field names, prompt kind, status).
Runs aiohttp on 127.0.0.1 with a free port, in a background thread.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from threaded_server import ThreadedServer

VLLM_FIELDS = ("min_tokens", "ignore_eos")
REFUSAL = "This endpoint does not accept requests from benchmark clients (policy 7)."


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                        "code": None}}, status=status)


class PlainOpenAIServer(ThreadedServer):
    name = "plain OpenAI server"

    def __init__(self, model: str = "plain-model", chat_only: bool = False, refuse_all: bool = False,
                 max_context: int | None = None, tpot_s: float = 0.002) -> None:
        super().__init__()
        self.model, self.chat_only, self.refuse_all = model, chat_only, refuse_all
        self.max_context, self.tpot_s = max_context, tpot_s
        self.log: list[dict] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        if not self.chat_only:
            app.router.add_post("/v1/completions", self._completions)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                              "owned_by": "someone"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt")
        entry = self._entry(request, body, "text" if isinstance(prompt, str) else "ids")
        if not isinstance(prompt, str):
            return self._answer(entry, _error(400, "'prompt' must be a string; token arrays are not supported"))
        return await self._stream(request, body, entry, prompt.split(), chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        entry = self._entry(request, body, "chat")
        words = " ".join(str(m.get("content", "")) for m in body.get("messages") or []).split()
        return await self._stream(request, body, entry, words, chat=True)

    def _entry(self, request: web.Request, body: dict, kind: str) -> dict:
        entry = {"path": request.path, "fields": sorted(body), "prompt": kind, "status": None}
        self.log.append(entry)
        return entry

    @staticmethod
    def _answer(entry: dict, resp: web.Response) -> web.Response:
        entry["status"] = resp.status
        return resp

    async def _stream(self, request: web.Request, body: dict, entry: dict, words: list[str],
                      chat: bool) -> web.StreamResponse:
        if self.refuse_all:
            return self._answer(entry, _error(400, REFUSAL))
        for name in VLLM_FIELDS:
            if name in body:
                return self._answer(entry, _error(400, f"Unrecognized request argument supplied: {name}"))
        if body.get("model") != self.model:
            return self._answer(entry, _error(404, f"The model `{body.get('model')}` does not exist"))
        if self.max_context is not None and len(words) > self.max_context:
            return self._answer(entry, _error(400, f"This model's maximum context length is {self.max_context} "
                                                   f"tokens; your prompt has {len(words)} tokens"))
        n = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        entry["status"] = 200
        for k in range(n):
            await asyncio.sleep(self.tpot_s)
            choice = ({"index": 0, "delta": {"content": f"w{k} "}, "finish_reason": None} if chat else
                      {"index": 0, "text": f"w{k} ", "finish_reason": None})
            await resp.write(b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(words), "completion_tokens": n, "total_tokens": len(words) + n}
            await resp.write(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
