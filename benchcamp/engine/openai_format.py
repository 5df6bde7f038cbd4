"""Requests and responses of vLLM's OpenAI-compatible API, byte for byte where it counts.

Parsing turns a JSON body into :class:`ParsedRequest` or raises :class:`OpenAIError`
(vLLM's shape: ``{"error": {"message", "type", "param", "code"}}`` with ``code`` the
HTTP status). Responses are built from per-request byte templates so that a
streamed chunk costs one ``bytes`` concatenation, not a ``json.dumps``.

What vLLM 0.33 sends and we reproduce (vllm/entrypoints/openai/completion/protocol.py and
engine/protocol.py, read 2026-11-30):
- completions stream chunk (``exclude_unset=False``):
  ``{"id","object":"text_completion","created","model","choices":[{"index","text",
  "logprobs":null,"finish_reason","stop_reason":null,"prompt_token_ids":null,"token_ids":null}],
  "usage":null}``;
- chat stream chunks (``exclude_unset=True``): first a role delta, then
  ``{"delta":{"content":..},"logprobs":null,"finish_reason":..}``;
- the usage chunk (``exclude_none=True``) has ``"choices":[]`` and ``usage``
  ``{prompt_tokens,total_tokens,completion_tokens}`` plus
  ``prompt_tokens_details.cached_tokens`` with ``--enable-prompt-tokens-details``
  (also when it is 0); then ``data: [DONE]``;
- errors: ``{"error": {"message", "type", "param", "code"}}`` (ErrorResponse), e.g. a
  token id past the vocabulary: 400 "Token id N is out of vocabulary".

Text prompts have no tokenizer here: a prompt is split on whitespace, one token
per word. A word ``t<hex>`` (what ``benchcamp.workload.tokens.prompt_text`` writes)
maps back to that token id exactly; any other word to a stable CRC32-based id. So
text prompts made by benchcamp are exact, and others have an approximate length
but still share prefixes exactly. Chat messages are the concatenation of their
contents' words (no chat-template tokens). Token-id prompts are the exact path.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass

TOKEN_TEXT = " t"  # the simulated engine's text for every generated token
DONE = b"data: [DONE]\n\n"
_HEXWORD = re.compile(r"t([0-9a-f]{1,16})")


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, type_: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.type, self.param)


def error_body(status: int, message: str, type_: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": param, "code": status}}).encode()


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "BadRequestError", param)


def tokenize_text(text: str) -> list[int]:
    out = []
    for w in text.split():
        m = _HEXWORD.fullmatch(w)
        out.append(int(m.group(1), 16) if m else 1000 + zlib.crc32(w.encode()) % 100_000)
    return out


@dataclass
class ParsedRequest:
    chat: bool
    model: str
    prompt_ids: list[int]
    max_tokens: int | None  # None: until the context is full
    min_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _int_field(body: dict, name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"{name} must be an integer, got {v!r}", name)
    if v < minimum:
        raise bad_request(f"{name} must be at least {minimum}, got {v}.", name)
    return v


def _prompt_ids(prompt: object) -> list[int]:
    if isinstance(prompt, str):
        return tokenize_text(prompt)
    if isinstance(prompt, list):
        if not prompt:
            return []  # refused as "prompt is empty", as a workload request of no tokens is
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)  # the vocabulary check names any id out of range
        if len(prompt) == 1:
            return _prompt_ids(prompt[0])
        if len(prompt) > 1:
            raise bad_request(
                "the simulated engine serves one prompt per request; "
                "send a string, a list of token ids, or a list holding one of those",
                "prompt",
            )
    raise bad_request("prompt must be a string, a list of token ids, or a list with one of those", "prompt")


def _chat_ids(messages: object) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list of {role, content} objects", "messages")
    ids: list[int] = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise bad_request("each message needs a role and content", "messages")
        content = m.get("content") or ""
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise bad_request("message content must be a string or a list of text parts", "messages")
        ids.extend(tokenize_text(content))
    return ids


def parse_request(body: object, chat: bool) -> ParsedRequest:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model is required (one of the names listed by /v1/models)", "model")
    if body.get("n", 1) != 1:
        raise bad_request("the simulated engine supports n=1 only", "n")
    ids = _chat_ids(body.get("messages")) if chat else _prompt_ids(body.get("prompt"))
    _check_prompt(len(ids))
    max_tokens = _int_field(body, "max_completion_tokens", 1) if chat else None
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", 1)
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    _check_min_max(max_tokens, min_tokens)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    stream = bool(body.get("stream", False))
    if opts and not stream:
        raise bad_request("Stream options can only be defined when `stream=True`.", "stream_options")
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_ids=ids,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        continuous_usage=bool(opts.get("continuous_usage_stats", False)),
    )


def _check_prompt(prompt_len: int) -> None:
    if prompt_len < 1:
        raise bad_request("prompt is empty", "prompt")


def _check_min_max(max_tokens: int | None, min_tokens: int) -> None:
    if max_tokens is not None and max_tokens < 1:
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    if min_tokens < 0:
        raise bad_request(f"min_tokens must be at least 0, got {min_tokens}.", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.", "min_tokens"
        )


def validate_lengths(prompt_len: int, max_tokens: int | None, min_tokens: int, max_model_len: int) -> int:
    """-> output length; raises vLLM's 400 for a request whose lengths it would refuse.

    The one check of a request's lengths: the HTTP server runs it on every parsed
    request, the engine core on every request it admits, and the virtual-time
    simulator on every workload request, so both clocks fail the same requests
    with the same status and message.
    """
    _check_prompt(prompt_len)
    _check_min_max(max_tokens, min_tokens)
    return check_context(prompt_len, max_tokens, max_model_len)


def check_context(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """-> output length; raises vLLM's 400 when the request does not fit the context."""
    if prompt_len >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your request "
            f"has {prompt_len} input tokens. Please reduce the length of the input messages."
        )
    if max_tokens is None:
        return max_model_len - prompt_len
    if prompt_len + max_tokens > max_model_len:
        raise bad_request(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has {prompt_len} "
            f"input tokens ({max_tokens} > {max_model_len} - {prompt_len}).",
            "max_tokens",
        )
    return max_tokens


def check_vocab(ids: list[int], vocab_size: int) -> None:
    """vLLM's input check: an id outside [0, vocab) is a 400 naming it."""
    if not ids:
        return
    top, low = max(ids), min(ids)
    if top >= vocab_size:
        raise bad_request(f"Token id {top} is out of vocabulary", "prompt")
    if low < 0:
        raise bad_request(f"Token id {low} is out of vocabulary", "prompt")


CPU_CACHED_FIELD = "benchcamp_cpu_cached_tokens"


def usage_dict(prompt: int, completion: int, cached: int, details: bool, cpu_cached: int | None = None) -> dict:
    """``cached`` counts both KV tiers, as vLLM's ``cached_tokens`` counts connector (offload)
    hits; ``cpu_cached`` (None: no CPU tier) is the part of it that came from host memory,
    a benchcamp extension field next to it."""
    u: dict = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    if details:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
        if cpu_cached is not None:
            u["prompt_tokens_details"][CPU_CACHED_FIELD] = cpu_cached
    return u


class StreamFormatter:
    """Byte templates of one request's SSE chunks."""

    __slots__ = ("chat", "head", "tail", "last_tail", "rid", "created", "model_json", "obj", "_texts", "role")

    def __init__(self, rid: str, model: str, chat: bool, created: int | None = None) -> None:
        self.chat = chat
        self.rid = rid
        self.created = int(time.time()) if created is None else created
        self.model_json = json.dumps(model)
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        pre = f'data: {{"id":"{rid}","object":"{self.obj}","created":{self.created},"model":{self.model_json},"choices":[{{"index":0,'
        if chat:
            self.head = (pre + '"delta":{"content":"').encode()
            self.tail = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self.last_tail = b'"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
            self.role = (
                pre + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            ).encode()
        else:
            self.head = (pre + '"text":"').encode()
            self.tail = (
                b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
                b'"token_ids":null}],"usage":null}\n\n'
            )
            self.last_tail = (
                b'","logprobs":null,"finish_reason":"length","stop_reason":null,'
                b'"prompt_token_ids":null,"token_ids":null}],"usage":null}\n\n'
            )
            self.role = b""
        self._texts = [b"", TOKEN_TEXT.encode()]

    def _text(self, n: int) -> bytes:
        while len(self._texts) <= n:
            self._texts.append(TOKEN_TEXT.encode() * len(self._texts))
        return self._texts[n]

    def chunk(self, n_tokens: int, last: bool) -> bytes:
        return self.head + self._text(n_tokens) + (self.last_tail if last else self.tail)

    def usage_chunk(
        self, prompt: int, completion: int, cached: int, details: bool, cpu_cached: int | None = None
    ) -> bytes:
        body = {
            "id": self.rid,
            "object": self.obj,
            "created": self.created,
            "model": json.loads(self.model_json),
            "choices": [],
            "usage": usage_dict(prompt, completion, cached, details, cpu_cached),
        }
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def full_response(
    rid: str,
    model: str,
    chat: bool,
    completion: int,
    prompt: int,
    cached: int,
    details: bool,
    created: int | None = None,
    cpu_cached: int | None = None,
) -> bytes:
    """A non-streaming response (vLLM ``model_dump()``: unset fields as null)."""
    text = TOKEN_TEXT * completion
    usage = usage_dict(prompt, completion, cached, details, cpu_cached)
    usage.setdefault("prompt_tokens_details", None)
    if chat:
        choice = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj = "text_completion"
    return json.dumps(
        {
            "id": rid,
            "object": obj,
            "created": int(time.time()) if created is None else created,
            "model": model,
            "choices": [choice],
            "usage": usage,
            "kv_transfer_params": None,
        }
    ).encode()


def models_response(names: list[str], root: str, max_model_len: int, created: int) -> bytes:
    data = [
        {
            "id": n,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": root,
            "parent": None,
            "max_model_len": max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{i}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for i, n in enumerate(names)
    ]
    return json.dumps({"object": "list", "data": data}).encode()
