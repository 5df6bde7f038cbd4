"""The router in front of a topology's engines: one OpenAI-compatible endpoint on loopback.

Two modes, one process (``benchcamp router serve`` or ``python -m benchcamp.router``):

- ``unified``: N replicas that each serve whole requests; ``--policy`` round_robin, random,
  least_loaded (fewest requests in flight through this router), or session_affinity (the
  ``--session-header`` key, default ``X-Session-ID``, picks the replica by a stable hash, so a
  session's turns find their prefix cached; requests without the header go round robin).
- ``pd``: prefill/decode disaggregation as vLLM's toy proxy
  (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): each request goes first to
  a prefill instance with ``max_tokens=1``, ``stream=false`` and
  ``kv_transfer_params.do_remote_decode``; then to a decode instance with the
  ``kv_transfer_params`` the prefill returned (NIXL's remote block ids; none with the
  disk-backed ExampleConnector, whose decode finds the blocks in the shared folder),
  and the decode's answer streams back unchanged.

The answer's bytes are passed through as they arrive (``iter_any``: no parsing, no
re-framing of the SSE stream); the router is in the measurement path, so it adds one
loopback hop and nothing per token. ``/health`` is 200 only when every backend's is;
``/metrics`` is every backend's exposition with ``role`` and ``instance`` labels added,
plus the router's own counters. See :mod:`benchcamp.router.server`.
"""

from __future__ import annotations

# benchcamp.topology's router policies (its cache_aware is deployed as session_affinity); "session" is an alias
ROUTER_POLICIES = ("round_robin", "random", "least_loaded", "session_affinity", "session")
DEFAULT_SESSION_HEADER = "X-Session-ID"


def router_argv(
    host: str,
    port: int,
    *,
    unified: list[str] | None = None,
    prefill: list[str] | None = None,
    decode: list[str] | None = None,
    policy: str = "round_robin",
    session_header: str = DEFAULT_SESSION_HEADER,
) -> list[str]:
    """The router's command line (its key comes from ``VLLM_API_KEY``, never argv)."""
    import sys

    argv = [sys.executable, "-m", "benchcamp.router", "--host", host, "--port", str(port), "--policy", policy]
    argv += ["--session-header", session_header]
    for flag, urls in (("--backend", unified), ("--prefill", prefill), ("--decode", decode)):
        for url in urls or []:
            argv += [flag, url]
    return argv
