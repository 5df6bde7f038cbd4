"""Check an endpoint before a sweep: reachable, key accepted, model served."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from benchcamp.loadgen.spec import EndpointError


def _base(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def reachable(endpoint: str, timeout: float = 2.0) -> bool:
    """A TCP connect to the endpoint's host:port succeeds."""
    u = urlsplit(endpoint)
    try:
        with socket.create_connection((u.hostname, u.port or (443 if u.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def preflight(endpoint: str, api_key: str | None, model: str, timeout: float = 10.0) -> list[str]:
    """Raise EndpointError with the cause and the fix; return the served model ids."""
    u = urlsplit(endpoint or "")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise EndpointError(f"endpoint {endpoint!r} is not a URL; give http(s)://host:port (--endpoint or "
                            "provider.endpoint.url)")
    req = urllib.request.Request(_base(endpoint) + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise EndpointError(
                f"endpoint {_base(endpoint)} rejected the API key (HTTP {exc.code}); "
                + ("set the right key in the environment variable named by --api-key-env / "
                   "provider.endpoint.api_key_env" if api_key else
                   "it needs one: export it and name the variable with --api-key-env / provider.endpoint.api_key_env")
            ) from None
        if exc.code == 404:  # some servers have no model list; the first request will tell
            return []
        raise EndpointError(f"endpoint {_base(endpoint)}/v1/models answered HTTP {exc.code}; "
                            "is it an OpenAI-compatible server?") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointError(f"cannot reach endpoint {_base(endpoint)} ({reason}); check the URL and that the "
                            "server is running and reachable from here") from None
    try:
        ids = [m.get("id") for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        raise EndpointError(f"endpoint {_base(endpoint)}/v1/models did not return an OpenAI model list; "
                            "is it an OpenAI-compatible server?") from None
    if model and ids and model not in ids:
        raise EndpointError(f"model {model!r} is not served by {_base(endpoint)} (it serves {ids}); "
                            "set engine.served_model_name (or engine.model) to one of them")
    return ids
