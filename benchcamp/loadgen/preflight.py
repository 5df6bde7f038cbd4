"""Check an endpoint before a sweep: reachable, key accepted, model served, and what
it supports (``benchcamp.loadgen.readiness.check``, the one readiness check). The sweep passes
the capabilities on to each point (``PointSpec.from_load``) and its worker plans.
"""

from __future__ import annotations

import logging
import socket
from urllib.parse import urlsplit

from benchcamp.loadgen.readiness import Capabilities, base_url, check

log = logging.getLogger(__name__)


def reachable(endpoint: str, timeout: float = 2.0) -> bool:
    """A TCP connect to the endpoint's host:port succeeds."""
    u = urlsplit(endpoint)
    try:
        with socket.create_connection((u.hostname, u.port or (443 if u.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def probe(endpoint: str, api_key: str | None, model: str, timeout: float = 60.0) -> Capabilities:
    """The endpoint's capabilities (one attempt, no waiting); EndpointError with the cause and
    the fix when it cannot be measured."""
    caps = check(endpoint, api_key, model, timeout_s=0, probe=True, probe_timeout_s=timeout)
    caps.require_measurable()
    odd = [
        k
        for k in ("completions", "token_ids", "chat", "vllm_sampling", "cached_tokens", "health", "metrics")
        if not getattr(caps, k)
    ]
    if odd:
        log.warning(
            "endpoint %s lacks %s; the load generator adapts (see each point's spec.request_notes)",
            base_url(endpoint),
            ", ".join(odd),
        )
    return caps


def preflight(endpoint: str, api_key: str | None, model: str, timeout: float = 60.0) -> list[str]:
    """Raise EndpointError with the cause and the fix; return the served model ids."""
    return list(probe(endpoint, api_key, model, timeout).models)
