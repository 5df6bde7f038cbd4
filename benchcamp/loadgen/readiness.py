"""One readiness check for every path: wait until the endpoint serves, check the
key and the model, then probe what the server supports.

Both the engine deployment (``benchcamp.deploy.wait_ready``) and the load
generator's preflight (``benchcamp.loadgen.preflight``) call :func:`check`.
Modelled on vLLM's ``benchmarks/lib/ready_checker.py`` (poll until a real
request succeeds), extended for servers that are neither benchcamp's nor vLLM's:

- ready: ``/health`` answers 200, or, on a server that has no ``/health``
  (404/405), ``/v1/models`` answers; a 401/403 there is the key, not "not yet";
- capabilities, from tiny real streamed requests (``max_tokens`` 2): token-id
  prompts on ``/v1/completions``, text prompts, chat, ``stream_options.
  include_usage``, ``usage.prompt_tokens_details.cached_tokens`` (one prompt sent
  twice, so a server that reports cached tokens only when non-zero shows them),
  vLLM's extra sampling fields (``min_tokens``, ``ignore_eos``), ``/metrics``.

A leaf module: it imports no deployment or load-generator code. The caller
supplies the engine's liveness and log tail as callables. Problems are one line
naming the setting to change and quoting the server's own message.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from benchcamp.errors import EndpointError, EngineError, http_error_text, server_message

log = logging.getLogger(__name__)

API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
KEY_HINT = "set the key in the environment variable named by --api-key-env / provider.endpoint.api_key_env"
# The probe prompt: 64 tokens (several KV blocks, so a repeat hits a prefix cache), ids far
# from any tokenizer's special tokens, and the same prompt as text (the simulated engine reads
# ``t<hex>`` words back as these ids; any other server sees 64 words).
PROBE_IDS = tuple(range(1000, 1064))
PROBE_TEXT = " ".join(f"t{i:x}" for i in PROBE_IDS)
PROBE_MAX_TOKENS = 2


@dataclass(frozen=True)
class Capabilities:
    """What an endpoint supports, as probed; JSON-able (``to_dict``/``from_dict``)."""

    models: tuple[str, ...] = ()
    health: bool = False  # /health answers 200
    metrics: bool = False  # /metrics answers Prometheus text
    completions: bool = False  # /v1/completions serves a streamed text prompt
    token_ids: bool = False  # /v1/completions accepts token-id prompts
    chat: bool = False  # /v1/chat/completions serves a streamed message
    include_usage: bool = False  # streams end with usage (stream_options.include_usage)
    cached_tokens: bool = False  # usage has prompt_tokens_details.cached_tokens
    vllm_sampling: bool = False  # min_tokens and ignore_eos accepted
    refused: dict[str, str] = field(default_factory=dict)  # probe -> the server's answer

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = list(self.models)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Capabilities:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["models"] = tuple(known.get("models") or ())
        return cls(**known)

    def request_plan(self, api: str) -> RequestPlan:
        """How the load generator talks to this server when ``load.api=api`` is asked for:
        the API that works (the other one when only that one does), token ids or text,
        vLLM's sampling fields or not. Raises EndpointError when nothing measurable works."""
        if api not in API_PATHS:
            raise EndpointError(f"load.api={api!r}: unknown; use completions or chat")
        self.require_measurable()
        notes: list[str] = []
        use = api
        if not self._serves(api):
            use = "chat" if api == "completions" else "completions"
            notes.append(
                f"load.api={api} is not served ({self._why(api if api == 'chat' else 'completions-text')});"
                f" measured with {use} instead: set load.api={use} to say so in the config"
            )
        prompt = "ids" if use == "completions" and self.token_ids else "text"
        if use == "completions" and prompt == "text":
            notes.append(
                "prompts sent as text built from the workload's token blocks: the server refuses token-id "
                f"prompts ({self._why('completions-ids')}); prefixes are still shared, prompt lengths are "
                "the server tokenizer's"
            )
        if not self.vllm_sampling:
            notes.append(
                "output lengths not forced: the server refuses min_tokens/ignore_eos "
                f"({self._why('vllm-sampling')}); outputs may end early at EOS"
            )
        if not self.cached_tokens:
            notes.append(
                "cached tokens unknown: the server's usage has no prompt_tokens_details.cached_tokens; "
                "cache hit rate is 'unknown' and all input is priced as uncached"
            )
        return RequestPlan(
            api=use,
            prompt=prompt,
            vllm_sampling=self.vllm_sampling,
            cached_tokens_reported=self.cached_tokens,
            notes=tuple(notes),
        )

    def _serves(self, api: str) -> bool:
        return self.chat if api == "chat" else (self.completions or self.token_ids)

    def require_measurable(self) -> None:
        """Raise EndpointError when no request form gives what a measurement needs."""
        if not (self._serves("completions") or self._serves("chat")):
            raise EndpointError(
                "the endpoint serves neither /v1/completions nor /v1/chat/completions "
                f"({self._why('completions-text', 'chat')}); check provider.endpoint.url and "
                "engine.served_model_name"
            )
        if not self.include_usage:
            raise EndpointError(
                "the endpoint's streams carry no token usage (stream_options.include_usage"
                + (f": {self._why('usage')}" if self.refused.get("usage") else "")
                + "): benchcamp counts tokens from the server's usage; it cannot measure this "
                "server as configured (provider.endpoint.url)"
            )

    def _why(self, *probes: str) -> str:
        said = [f"{p}: {self.refused[p]}" for p in probes if p in self.refused]
        return "; ".join(said) or "not offered"


@dataclass(frozen=True)
class RequestPlan:
    """What the load generator sends: API, prompt form, vLLM sampling fields; ``notes``
    say, in words, every way this differs from the workload as specified."""

    api: str = "completions"
    prompt: str = "ids"  # ids | text
    vllm_sampling: bool = True  # min_tokens = max_tokens and ignore_eos: output lengths forced
    cached_tokens_reported: bool = True  # usage without cached_tokens means 0 (else: unknown)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), notes=list(self.notes))


# -- HTTP ------------------------------------------------------------------------


def base_url(endpoint: str) -> str:
    """``endpoint`` without a trailing slash or ``/v1``; EndpointError when it is not a URL."""
    u = urlsplit(endpoint or "")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise EndpointError(
            f"endpoint {endpoint!r} is not a URL; give http(s)://host:port (--endpoint or provider.endpoint.url)"
        )
    return endpoint.rstrip("/").removesuffix("/v1")


@dataclass
class _Answer:
    status: int  # 0: no HTTP answer (connection failed)
    body: bytes = b""
    error: str = ""  # the transport error when status is 0

    def message(self) -> str:
        """The server's own error message (OpenAI/FastAPI shapes, else the text), one line."""
        return http_error_text(self.status, self.body) if self.status else self.error


def _call(url: str, api_key: str | None, body: dict | None = None, timeout: float = 5.0) -> _Answer:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("User-Agent", "benchcamp-readiness")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return _Answer(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        return _Answer(exc.code, exc.read())
    except (urllib.error.URLError, OSError) as exc:
        return _Answer(0, error=str(getattr(exc, "reason", exc)))


# -- readiness -------------------------------------------------------------------


def check(
    endpoint: str,
    api_key: str | None,
    model: str,
    *,
    timeout_s: float = 0.0,
    poll_s: float = 0.25,
    alive: Callable[[], bool] | None = None,
    log_tail: Callable[[], str] | None = None,
    probe: bool = True,
    probe_timeout_s: float = 60.0,
) -> Capabilities:
    """Wait up to ``timeout_s`` for the endpoint to serve (0: one attempt), check the key and
    the model, and (``probe``) probe its capabilities.

    ``alive``: False once the engine process is gone (stop waiting); ``log_tail``: its last
    log lines for messages. Raises EngineError when the engine exits or never gets ready,
    EndpointError for what a setting fixes (URL, key, model, unsupported API).
    """
    base = base_url(endpoint)
    health, models = _wait(base, api_key, model, timeout_s, poll_s, alive, log_tail)
    if not probe:
        return Capabilities(models=tuple(models), health=health)
    return _probe(base, api_key, model, tuple(models), health, probe_timeout_s)


def _tail(log_tail: Callable[[], str] | None) -> str:
    return ("\n" + log_tail()) if log_tail else ""


def _wait(
    base: str,
    api_key: str | None,
    model: str,
    timeout_s: float,
    poll_s: float,
    alive: Callable[[], bool] | None,
    log_tail: Callable[[], str] | None,
) -> tuple[bool, list[str]]:
    deadline = time.monotonic() + max(0.0, timeout_s)
    last = "no answer yet"
    while True:
        if alive is not None and not alive():
            raise EngineError(f"engine exited before it was ready ({last}){_tail(log_tail)}")
        h = _call(base + "/health", None)
        if h.status == 0:
            last = f"cannot connect: {h.error}"
        elif h.status == 200 or 400 <= h.status < 500:  # 4xx: no usable /health; ask /v1/models
            m = _call(base + "/v1/models", api_key)
            if m.status in (401, 403):
                raise EndpointError(
                    f"endpoint {base} rejected the API key ({m.message()}); "
                    + (
                        KEY_HINT
                        if api_key
                        else "it needs one: export it and name the variable "
                        "with --api-key-env / provider.endpoint.api_key_env"
                    )
                )
            if m.status == 200:
                return h.status == 200, _served(base, m, model)
            if m.status == 404:  # no model list at all: the probes will tell
                return h.status == 200, []
            last = f"/v1/models: {m.message()}" if m.status else f"cannot connect: {m.error}"
        else:
            last = f"/health: {h.message()}"
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    if timeout_s <= 0 and last.startswith("cannot connect"):
        raise EndpointError(
            f"cannot reach endpoint {base} ({last[len('cannot connect: ') :]}); check the URL "
            "(provider.endpoint.url) and that the server is running and reachable from here"
        )
    if timeout_s <= 0:
        raise EndpointError(
            f"endpoint {base} is not serving ({last}); is it an OpenAI-compatible server (provider.endpoint.url)?"
        )
    raise EngineError(f"engine at {base} not ready after {timeout_s:.0f}s ({last}){_tail(log_tail)}")


def _served(base: str, answer: _Answer, model: str) -> list[str]:
    try:
        ids = [m.get("id") for m in json.loads(answer.body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        raise EndpointError(
            f"endpoint {base}/v1/models did not return an OpenAI model list; is "
            "provider.endpoint.url the server's base URL?"
        ) from None
    if model and ids and model not in ids:
        raise EndpointError(
            f"model {model!r} is not served by {base} (it serves {ids}); "
            "set engine.served_model_name (or engine.model) to one of them"
        )
    return ids


# -- capability probes -------------------------------------------------------------


@dataclass
class _Stream:
    answer: _Answer
    usage: dict | None = None
    error: str = ""  # why the request did not work ("" when it did)

    @property
    def ok(self) -> bool:
        return not self.error


def _body(model: str, api: str, prompt: str, usage: bool = True, vllm: bool = False) -> dict:
    body: dict[str, Any] = {"model": model, "max_tokens": PROBE_MAX_TOKENS, "stream": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": PROBE_TEXT}]
    else:
        body["prompt"] = list(PROBE_IDS) if prompt == "ids" else PROBE_TEXT
    if usage:
        body["stream_options"] = {"include_usage": True}
    if vllm:
        body.update(min_tokens=PROBE_MAX_TOKENS, ignore_eos=True)
    return body


def _stream(base: str, api_key: str | None, body: dict, api: str, timeout: float) -> _Stream:
    a = _call(base + API_PATHS[api], api_key, body, timeout)
    if a.status != 200:
        return _Stream(a, error=a.message())
    usage, error, events = None, "", 0
    for line in a.body.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        events += 1
        if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
            usage = obj["usage"]
        if isinstance(obj, dict) and obj.get("error"):
            error = "stream error event: " + server_message(json.dumps(obj))
    if not events:
        error = error or "HTTP 200 but no server-sent events (stream=true ignored?)"
    return _Stream(a, usage, error)


def _probe(
    base: str, api_key: str | None, model: str, models: tuple[str, ...], health: bool, timeout: float
) -> Capabilities:
    """As few requests as the answers allow (2 on vLLM or the simulated engine): fault
    injection and rate limits count every one of them."""
    refused: dict[str, str] = {}
    sent: list[_Stream] = []

    def run(name: str, api: str, prompt: str, vllm: bool, usage: bool = True) -> _Stream:
        s = _stream(base, api_key, _body(model, api, prompt, usage=usage, vllm=vllm), api, timeout)
        if s.answer.status in (401, 403):
            raise EndpointError(
                f"endpoint {base} rejected the API key on {API_PATHS[api]} ({s.answer.message()}); {KEY_HINT}"
            )
        if s.ok:
            sent.append(s)
        else:
            refused[name] = s.error
        return s

    # 1. the load generator's own request: token ids with vLLM's sampling fields
    completions = token_ids = sampling = run("completions-ids", "completions", "ids", vllm=True).ok
    if not completions:  # 2. which part was refused: ids, the sampling fields, or /v1/completions
        text = run("completions-text", "completions", "text", vllm=False)
        completions = text.ok
        if completions:
            token_ids = run("completions-ids", "completions", "ids", vllm=False).ok
            if token_ids:
                refused["vllm-sampling"] = refused.pop("completions-ids")
            else:
                sampling = run("vllm-sampling", "completions", "text", vllm=True).ok
    # 3. chat, with the sampling fields where completions took them (or where nothing is known yet)
    chat = run("chat", "chat", "text", vllm=sampling or not completions)
    if not chat.ok and not completions:
        chat = run("chat", "chat", "text", vllm=False)
        if chat.ok:
            refused["vllm-sampling"] = refused.pop("chat", "")
    if not (completions or chat.ok):
        # Perhaps only stream_options is refused: then the server answers but reports no usage.
        api = "chat" if refused.get("completions-text", "").startswith("HTTP 404") else "completions"
        if run("plain", api, "text", vllm=False, usage=False).ok:
            refused["usage"] = refused.get("completions-text" if api == "completions" else "chat", "")
            return Capabilities(
                models=models, health=health, completions=api == "completions", chat=api == "chat", refused=refused
            )
        if not any(why.startswith("HTTP") for why in refused.values()):
            # nothing answered at all (reset, refused): the server went away, no setting of ours is wrong
            raise EndpointError(
                f"endpoint {base} stopped answering during the probe requests for model {model!r} (engine died?): "
                f"/v1/completions: {refused.get('completions-text')}; /v1/chat/completions: {refused.get('chat')}; "
                "see the engine's log"
            )
        raise EndpointError(
            f"endpoint {base} refused every probe request for model {model!r}: /v1/completions: "
            f"{refused.get('completions-text')}; /v1/chat/completions: {refused.get('chat')}; "
            "check engine.served_model_name, provider.endpoint.url, and that it is an "
            "OpenAI-compatible server"
        )
    # 4. cached tokens: the probes share their prompt, so a server that reports cached tokens only
    #    when non-zero has shown them by now; else the first request once more
    usages = [s.usage for s in sent if s.usage is not None]
    cached = any(_reports_cached(u) for u in usages)
    if usages and not cached:
        first = "completions" if completions else "chat"
        again = run("cached-tokens", first, "ids" if token_ids else "text", vllm=sampling)
        cached = again.ok and again.usage is not None and _reports_cached(again.usage)
    if not usages:
        refused["usage"] = "streams end without a usage chunk"
    m = _call(base + "/metrics", api_key)
    metrics = m.status == 200 and (b"# TYPE" in m.body or b"vllm:" in m.body)
    caps = Capabilities(
        models=models,
        health=health,
        metrics=bool(metrics),
        completions=completions,
        token_ids=token_ids,
        chat=chat.ok,
        include_usage=bool(usages),
        cached_tokens=cached,
        vllm_sampling=sampling,
        refused=refused,
    )
    log.debug("endpoint %s capabilities: %s", base, caps.to_dict())
    return caps


def _reports_cached(usage: dict) -> bool:
    details = usage.get("prompt_tokens_details")
    return isinstance(details, dict) and details.get("cached_tokens") is not None
