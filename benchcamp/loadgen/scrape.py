"""The server's Prometheus ``/metrics``, before and after each point.

Counters are summed over their label sets (one per model / engine / DP rank),
and the point keeps after - before. The prefix-cache counters are also kept per
DP engine (``vllm:prefix_cache_hits@engine=0`` ..., ``benchcamp.metrics.engine_key``)
for the per-replica cache hit rates. Endpoints without ``/metrics`` (hosted
APIs) give an empty dict; that is not an error.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from benchcamp.router.affinity import PER_ENGINE_COUNTERS, engine_key

# vLLM V1 names, and the V0 names some deployments still export.
COUNTERS = (
    "vllm:prefix_cache_hits",
    "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries",
    "vllm:num_preemptions",
    "vllm:request_success",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prompt_tokens_cached",  # vLLM >= 0.1x: cached prompt tokens, one series per DP engine
)
# Latency histograms, kept as ``<name>_sum``, ``<name>_count`` and ``<name>_bucket:<le>`` (cumulative counts,
# summed over labels): the engine's own timings of a point, free of the client's scheduling (benchcamp calibrate).
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:time_per_output_token_seconds",  # its name before vLLM 0.11
    "vllm:e2e_request_latency_seconds",
)
# Behind a topology's router (benchcamp.router) every sample carries role="prefill|decode|unified": the
# counters are also kept per role, as "<role>/<name>", with the KV connector's external hits.
ROLE_COUNTERS = (*COUNTERS, "vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries")
_ROLE = re.compile(r'[{,]role="([^"]+)"')
_LE = re.compile(r'le="([^"]+)"')
_ENGINE = re.compile(r'engine="([^"]+)"')
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFNaN]+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Counter name (without ``_total``) -> value summed over labels, for COUNTERS; HISTOGRAMS' sums,
    counts and buckets as ``<name>_sum``, ``<name>_count``, ``<name>_bucket:<le>``; behind a topology's
    router, ROLE_COUNTERS per role as ``<role>/<name>``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name = m.group(1)
        if name.endswith("_created"):
            continue
        base = name[:-6] if name.endswith("_total") else name
        hist, _, part = name.rpartition("_")
        if hist in HISTOGRAMS and part in ("sum", "count", "bucket"):
            le = _LE.search(m.group(2) or "") if part == "bucket" else None
            if part == "bucket" and le is None:
                continue
            base = f"{hist}_bucket:{le.group(1)}" if le else name
            try:
                out[base] = out.get(base, 0.0) + float(m.group(3))
            except ValueError:
                continue
        elif base in ROLE_COUNTERS:
            try:
                v = float(m.group(3))
            except ValueError:
                continue
            if base in COUNTERS:
                out[base] = out.get(base, 0.0) + v
                eng = _ENGINE.search(m.group(2) or "") if base in PER_ENGINE_COUNTERS else None
                if eng is not None:
                    ek = engine_key(base, eng.group(1))
                    out[ek] = out.get(ek, 0.0) + v
            role = _ROLE.search(m.group(2) or "")
            if role is not None and role.group(1) != "router":
                k = f"{role.group(1)}/{base}"
                out[k] = out.get(k, 0.0) + v
    return out


def scrape(endpoint: str, api_key: str | None = None, timeout: float = 5.0) -> dict[str, float] | None:
    """The counters, or None when the endpoint has no usable /metrics."""
    base = endpoint.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    req = urllib.request.Request(base + "/metrics")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return parse_prometheus(resp.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """after - before per counter present in both (a restarted server resets counters: dropped)."""
    if not before or not after:
        return {}
    out = {}
    for k, v in after.items():
        if k in before and v >= before[k]:
            out[k] = v - before[k]
    return out
