"""Requests and responses of vLLM's OpenAI-compatible API, byte for byte where it counts.

Parsing turns a JSON body into :class:`ParsedRequest` or raises :class:`OpenAIError`
(vLLM's shape: ``{"error": {"message", "type", "param", "code"}}`` with ``code`` the
HTTP status). Responses are built from per-request byte templates so that a
streamed chunk costs one ``bytes`` concatenation, not a ``json.dumps``.

What the real engine sends and we reproduce: field sets checked on every CI run against a
real vLLM (the CPU build, 0.32.0) by tests/realengine/test_differential.py, which lists
every field it compares and every difference left (docs/simulator-fidelity.md):
- completions stream chunk: ``{"id","object":"text_completion","created","model","choices":
  [{"index","text","logprobs":null,"finish_reason","stop_reason":null,"prompt_token_ids":null,
  "token_ids":null}]}`` (no ``usage`` key); the last one carries ``system_fingerprint`` when no
  usage chunk follows;
- chat stream chunks: first a role delta (with top-level ``prompt_token_ids`` and
  ``prompt_text`` null), then ``{"delta":{"content":..},"logprobs":null,"finish_reason":..,
  "token_ids":null}`` (the last also ``"stop_reason":null``);
- the usage chunk has ``"choices":[]``, ``usage`` ``{prompt_tokens,total_tokens,completion_tokens}``
  plus ``prompt_tokens_details.cached_tokens`` with ``--enable-prompt-tokens-details`` (also when
  it is 0; chat adds ``created_cache_tokens``) and ``system_fingerprint``; then ``data: [DONE]``;
- errors: ``{"error": {"message", "type", "param", "code"}}`` (ErrorResponse), e.g. a
  token id past the vocabulary: 400 "Token id N is out of vocabulary"; what FastAPI's request
  validation refuses (malformed JSON, a negative token id) has type "Bad Request" and the
  pydantic location as ``param``; a missing or wrong key: 401 ``{"error": "Unauthorized"}``.

Text prompts have no tokenizer here: a prompt is split on whitespace, one token
per word. A word ``t<hex>`` (what ``benchcamp.workload.tokens.prompt_text`` writes)
maps back to that token id exactly; any other word to a stable CRC32-based id inside
the model's vocabulary. So text prompts made by benchcamp are exact in the simulator's
own terms, and others have an approximate length but still share prefixes exactly (a
real tokenizer gives other counts: see the differential test). Chat messages are the
concatenation of their contents' words (no chat-template tokens) when every content is
such ``t<hex>`` words (or the word ``t`` of the engine's own answers) and there are no ``tools``
(benchcamp's own chat bodies, AgentX's messages with live answers included: exact). Any
other chat request (recorded conversations, ``tools``) is counted as the model's chat
template counts it: with the served model's tokenizer where it is local, else with the
calibrated estimate of ``benchcamp.workload.tokencount`` (content, tool-call names and arguments,
tool definitions, per-message and per-request template tokens), with prefix-stable ids.
Token-id prompts are the exact path.

A chat request with ``tools`` (and ``tool_choice`` not ``"none"``) is answered with one tool
call, as vLLM's tool parsers return it: streamed as a ``tool_calls`` delta (``index``, ``id``
``chatcmpl-tool-...``, ``type``, ``function.name``, empty ``arguments``) and then argument
fragments, one per token, ``finish_reason`` ``"tool_calls"``; non-streaming as
``message.tool_calls`` with ``content`` null (vLLM's DeltaToolCall / ToolCall,
vllm/entrypoints/openai protocol). The arguments are a JSON object whose string value has one
word per generated token, under the tool's first parameter.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass

TOKEN_TEXT = " t"  # the simulated engine's text for every generated token
NO_VOCAB = 1 << 62  # vocab_size when the model's is not known
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


def validation_error(kind: str, loc: str, msg: str, input_: str, ctx: dict | None = None) -> OpenAIError:
    """What vLLM's FastAPI request validation answers (one pydantic error; vLLM lists one per
    branch of a union, so its count can be higher): 400, type "Bad Request", param = location."""
    err: dict = {"type": kind, "loc": loc, "msg": msg, "input": input_}
    if ctx is not None:
        err["ctx"] = ctx
    return OpenAIError(400, f"1 validation error:\n  {err!r}", "Bad Request", loc)


def _described(v: object) -> str:
    """pydantic's rendering of an input in an error: containers by their size."""
    if isinstance(v, list):
        return f"<list of {len(v)} items>"
    if isinstance(v, dict):
        return f"<dict of {len(v)} items>"
    return str(v)


def tokenize_text(text: str, vocab_size: int = NO_VOCAB) -> list[int]:
    """One id per whitespace-separated word: ``t<hex>`` is that id, any other word a stable
    CRC32-based id inside the vocabulary (above its first 1000 ids where it is large enough)."""
    low = 1000 if vocab_size > 101_000 else 0
    span = min(100_000, vocab_size - low)
    out = []
    for w in text.split():
        m = _HEXWORD.fullmatch(w)
        out.append(int(m.group(1), 16) if m else low + zlib.crc32(w.encode()) % span)
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
    tool: tuple[str, str] | None = None  # (function name, argument name) of the tool call answered


# benchcamp's words, and the engine's own answer word ``t`` (TOKEN_TEXT: a chat context carrying a streamed
# answer, load.agentx.context live), one token each
_PURE_WORDS = re.compile(r"\s*(?:t[0-9a-f]{0,16}(?:\s+|\Z))*")


def _benchcamp_words(messages: list) -> bool:
    """Every content is ``t<hex>`` words (or the engine's answer word ``t``): a body benchcamp built (counted word
    for word)."""
    for m in messages:
        if not isinstance(m, dict) or m.get("tool_calls"):
            return False
        c = m.get("content") or ""
        if isinstance(c, list):
            c = " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
        if not isinstance(c, str) or not _PURE_WORDS.fullmatch(c):
            return False
    return True


def _tools(body: dict) -> tuple[list, tuple[str, str] | None]:
    tools = body.get("tools")
    if tools is None:
        return [], None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name") for t in tools
    ):
        raise bad_request("tools must be a list of {type: function, function: {name, parameters}}", "tools")
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return tools, None
    fn = tools[0]["function"]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = [t["function"] for t in tools if t["function"].get("name") == name]
        if not named:
            raise bad_request(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        fn = named[0]
    props = (fn.get("parameters") or {}).get("properties") or {}
    arg = next(iter(props), "input") if isinstance(props, dict) else "input"
    return tools, (str(fn["name"]), str(arg))


def _int_field(body: dict, name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"{name} must be an integer, got {v!r}", name)
    if v < minimum:
        raise bad_request(f"{name} must be at least {minimum}, got {v}. (parameter={name}, value={v})", name)
    return v


def _prompt_ids(prompt: object, vocab_size: int = NO_VOCAB, loc: str = "body.prompt") -> list[int]:
    if isinstance(prompt, str):
        return tokenize_text(prompt, vocab_size)
    if isinstance(prompt, list):
        if not prompt:
            return []  # refused as an empty prompt, as a workload request of no tokens is
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            for i, t in enumerate(prompt):
                if t < 0:  # vLLM's schema has token ids >= 0: FastAPI refuses it before anything else
                    raise validation_error(
                        "greater_than_equal",
                        f"{loc}.{i}",
                        "Input should be greater than or equal to 0",
                        str(t),
                        {"ge": 0},
                    )
            return list(prompt)  # the vocabulary check names any id past the vocabulary
        if len(prompt) == 1:
            return _prompt_ids(prompt[0], vocab_size, f"{loc}.0")
        if len(prompt) > 1:
            raise bad_request(
                "the simulated engine serves one prompt per request; "
                "send a string, a list of token ids, or a list holding one of those",
                "prompt",
            )
    raise bad_request("prompt must be a string, a list of token ids, or a list with one of those", "prompt")


def _chat_ids(messages: object, vocab_size: int = NO_VOCAB) -> list[int]:
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
        ids.extend(tokenize_text(content, vocab_size))
    return ids


def parse_request(
    body: object, chat: bool, vocab_size: int = NO_VOCAB, default_model: str = "", counter: object = None
) -> ParsedRequest:
    """``default_model``: what a request without ``model`` is served by (vLLM: the first served name).
    ``counter``: what counts chat requests that benchcamp did not build (``benchcamp.workload.tokencount``;
    default: the calibrated estimate)."""
    if not isinstance(body, dict):
        raise validation_error(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
            _described(body),
        )
    model = body.get("model")
    if model is None and default_model:
        model = default_model
    if not isinstance(model, str) or not model:
        raise bad_request("model is required (one of the names listed by /v1/models)", "model")
    if body.get("n", 1) != 1:
        raise bad_request("the simulated engine supports n=1 only", "n")
    tool = None
    if chat:
        ids = _chat_ids(body.get("messages"), vocab_size)  # validates the messages
        tools, tool = _tools(body)
        if tools or not _benchcamp_words(body["messages"]):
            if counter is None:
                from benchcamp.workload.tokencount import default_estimate

                counter = default_estimate()
            ids = counter.chat_ids(body["messages"], tools, vocab_size)  # type: ignore[attr-defined]
    else:
        ids = _prompt_ids(body.get("prompt"), vocab_size)
    _check_prompt(len(ids))
    max_tokens = _int_field(body, "max_completion_tokens", 1) if chat else None
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    _check_min_max(max_tokens, min_tokens)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    stream = bool(body.get("stream", False))
    if opts and not stream:
        raise bad_request(
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)", "stream_options"
        )
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_ids=ids,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        continuous_usage=bool(opts.get("continuous_usage_stats", False)),
        tool=tool,
    )


# /v1/completions without max_tokens: OpenAI's default, as vLLM's CompletionRequest has it (the chat
# endpoint's default is the rest of the context)
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
EMPTY_PROMPT = "You must pass at least one prompt"


def _check_prompt(prompt_len: int) -> None:
    if prompt_len < 1:
        raise bad_request(EMPTY_PROMPT)


def _too_few(max_tokens: int) -> OpenAIError:
    return bad_request(
        f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})", "max_tokens"
    )


def _check_min_max(max_tokens: int | None, min_tokens: int) -> None:
    if max_tokens is not None and max_tokens < 1:
        raise _too_few(max_tokens)
    if min_tokens < 0:
        raise bad_request(f"min_tokens must be at least 0, got {min_tokens}.", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")


def validate_lengths(
    prompt_len: int, max_tokens: int | None, min_tokens: int, max_model_len: int, chat: bool = False
) -> int:
    """-> output length; raises vLLM's 400 for a request whose lengths it would refuse.

    The one check of a request's lengths: the HTTP server runs it on every parsed
    request, the engine core on every request it admits, and the virtual-time
    simulator on every workload request, so both clocks fail the same requests
    with the same status and message.
    """
    _check_prompt(prompt_len)
    _check_min_max(max_tokens, min_tokens)
    out = check_context(prompt_len, max_tokens, max_model_len, chat)
    if min_tokens > out:  # max_tokens cut by the context, then checked against min_tokens
        _check_min_max(out, min_tokens)
    return out


def check_context(prompt_len: int, max_tokens: int | None, max_model_len: int, chat: bool = False) -> int:
    """-> output length; raises vLLM's 400 when the request does not fit the context.

    As the real engine does: a prompt longer than the context is refused; max_tokens above the
    context is refused; otherwise the output is cut to what the context leaves (max_tokens =
    min(max_tokens, max_model_len - prompt)), and a prompt that fills the context exactly is
    refused for leaving 0 output tokens. The chat endpoint tokenizes at most max_model_len + 1
    tokens, so its message says "at least" that many.
    """
    if prompt_len > max_model_len:
        shown = min(prompt_len, max_model_len + 1) if chat else prompt_len
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{'at least ' if chat else ''}{shown} input tokens, which exceeds this limit even without any "
            f"output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={shown})",
            "input_tokens",
        )
    if max_tokens is not None and max_tokens > max_model_len:
        raise bad_request(
            f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. Please request "
            f"fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "max_tokens",
        )
    room = max_model_len - prompt_len
    out = room if max_tokens is None else min(max_tokens, room)
    if out < 1:
        raise _too_few(out)
    return out


def check_vocab(ids: list[int], vocab_size: int) -> None:
    """vLLM's input check: an id outside [0, vocab) is a 400 naming it."""
    if not ids:
        return
    top, low = max(ids), min(ids)
    if low < 0:  # the HTTP server refuses these while parsing (validation_error); the core by this
        raise bad_request(f"Token id {low} is out of vocabulary")
    if top >= vocab_size:
        raise bad_request(f"Token id {top} is out of vocabulary")


CPU_CACHED_FIELD = "benchcamp_cpu_cached_tokens"


def system_fingerprint(version: str, key: str) -> str:
    """``vllm-<version>-<8 hex>``, as vLLM answers (its hex is its own; ours a hash of ``key``)."""
    return f"vllm-{version}-{zlib.crc32(key.encode()):08x}"


def usage_dict(
    prompt: int,
    completion: int,
    cached: int,
    details: bool,
    cpu_cached: int | None = None,
    chat: bool = False,
    full: bool = False,
) -> dict:
    """``cached`` counts both KV tiers, as vLLM's ``cached_tokens`` counts connector (offload)
    hits; ``cpu_cached`` (None: no CPU tier) is the part of it that came from host memory,
    a benchcamp extension field next to it. ``full``: a non-streaming response's usage
    (vLLM's ``model_dump()``: its unset details as null); chat adds ``created_cache_tokens``
    (0 from the real engine in every answer seen)."""
    u: dict = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    if details:
        d: dict = {"cached_tokens": cached}
        if chat:
            d["created_cache_tokens"] = 0
        elif full:
            d["created_cache_tokens"] = None
        if full:
            d["multimodal_tokens"] = None
        if cpu_cached is not None:
            d[CPU_CACHED_FIELD] = cpu_cached
        u["prompt_tokens_details"] = d
    elif full:
        u["prompt_tokens_details"] = None
    if full:
        u["completion_tokens_details"] = None
    return u


class StreamFormatter:
    """Byte templates of one request's SSE chunks. ``include_usage``: a usage chunk follows the
    last content chunk (it carries ``system_fingerprint``; otherwise the last content chunk does)."""

    __slots__ = (
        "chat",
        "head",
        "tail",
        "last_tail",
        "rid",
        "created",
        "model_json",
        "obj",
        "_texts",
        "role",
        "fingerprint",
        "tool",
        "_started",
        "_first_head",
    )

    def __init__(
        self,
        rid: str,
        model: str,
        chat: bool,
        created: int | None = None,
        include_usage: bool = True,
        fingerprint: str = "",
        tool: tuple[str, str] | None = None,
    ) -> None:
        self.chat = chat
        self.tool = tool if chat else None
        self._started = False
        self.rid = rid
        self.created = int(time.time()) if created is None else created
        self.model_json = json.dumps(model)
        self.fingerprint = fingerprint
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        fp = "" if include_usage else f',"system_fingerprint":{json.dumps(fingerprint)}'
        pre = f'data: {{"id":"{rid}","object":"{self.obj}","created":{self.created},"model":{self.model_json},"choices":[{{"index":0,'
        if chat:
            self.head = (pre + '"delta":{"content":"').encode()
            self.tail = b'"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            self.last_tail = (
                '"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]' + fp + "}\n\n"
            ).encode()
            self.role = (
                pre + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
                '"prompt_token_ids":null,"prompt_text":null}\n\n'
            ).encode()
        else:
            self.head = (pre + '"text":"').encode()
            self.tail = (
                b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
                b'"token_ids":null}]}\n\n'
            )
            self.last_tail = (
                '","logprobs":null,"finish_reason":"length","stop_reason":null,'
                '"prompt_token_ids":null,"token_ids":null}]' + fp + "}\n\n"
            ).encode()
            self.role = b""
        if self.tool is not None:
            name, arg = self.tool
            # the arguments string, JSON-escaped inside the chunk's JSON
            self.head = (pre + '"delta":{"tool_calls":[{"index":0,"function":{"arguments":"').encode()
            self.tail = b'"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            self.last_tail = (
                json.dumps('"}')[1:-1]
                + '"}}]},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}]'
                + fp
                + "}\n\n"
            ).encode()
            call_id = json.dumps(tool_call_id(rid))
            self._first_head = (
                pre + '"delta":{"tool_calls":[{"id":' + call_id + ',"type":"function","index":0,"function":{"name":'
                f'{json.dumps(name)},"arguments":{json.dumps(_args_open(arg))[:-1]}'
            ).encode()
        self._texts = [b"", TOKEN_TEXT.encode()]

    def _text(self, n: int) -> bytes:
        while len(self._texts) <= n:
            self._texts.append(TOKEN_TEXT.encode() * len(self._texts))
        return self._texts[n]

    def chunk(self, n_tokens: int, last: bool) -> bytes:
        head = self.head
        if self.tool is not None and not self._started:
            self._started = True
            head = self._first_head
        return head + self._text(n_tokens) + (self.last_tail if last else self.tail)

    def usage_chunk(
        self, prompt: int, completion: int, cached: int, details: bool, cpu_cached: int | None = None
    ) -> bytes:
        body = {
            "id": self.rid,
            "object": self.obj,
            "created": self.created,
            "model": json.loads(self.model_json),
            "choices": [],
            "usage": usage_dict(prompt, completion, cached, details, cpu_cached, chat=self.chat),
            "system_fingerprint": self.fingerprint,
        }
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def tool_call_id(rid: str) -> str:
    """vLLM's id shape (``chatcmpl-tool-<hex>``), derived from the request id."""
    return "chatcmpl-tool-" + rid.rsplit("-", 1)[-1]


def _args_open(arg: str) -> str:
    """The arguments text before the generated words: ``{"<arg>": "``."""
    return "{" + json.dumps(arg) + ': "'


def tool_arguments(arg: str, completion: int) -> str:
    return _args_open(arg) + TOKEN_TEXT * completion + '"}'


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
    fingerprint: str = "",
    tool: tuple[str, str] | None = None,
) -> bytes:
    """A non-streaming response (vLLM ``model_dump()``: unset fields as null), field for field
    the real engine's; ``tool``: answered with one tool call (see the module doc)."""
    text = TOKEN_TEXT * completion
    usage = usage_dict(prompt, completion, cached, details, cpu_cached, chat=chat, full=True)
    extra: dict = {}
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
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
            "token_ids": None,
            "routed_experts": None,
        }
        if tool is not None:
            msg = choice["message"]
            assert isinstance(msg, dict)
            msg["content"] = None
            msg["tool_calls"] = [
                {
                    "id": tool_call_id(rid),
                    "type": "function",
                    "function": {"name": tool[0], "arguments": tool_arguments(tool[1], completion)},
                }
            ]
            choice["finish_reason"] = "tool_calls"
        obj = "chat.completion"
        extra = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
            "token_ids": None,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "routed_experts": None,
        }
        obj = "text_completion"
    return json.dumps(
        {
            "id": rid,
            "object": obj,
            "created": int(time.time()) if created is None else created,
            "model": model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": fingerprint,
            "usage": usage,
            **extra,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
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
