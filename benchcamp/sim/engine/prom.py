"""Prometheus text exposition (format 0.0.4) of vLLM's V1 metric names.

Only what benchcamp and typical dashboards read: gauges, counters (including
``prompt_tokens_cached``), the three latency histograms and the per-request token
histograms, labelled ``model_name`` and ``engine`` as vLLM does: one series per
data-parallel engine (``engine="0"`` .. ``engine="N-1"``). Bucket bounds are vLLM's. Counters get the
``_total`` suffix on the samples and on ``# HELP``/``# TYPE``, as prometheus_client writes
format 0.0.4.
Written by hand (no prometheus_client dependency) and cheap to observe: an
observation is a bisect and two additions.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

# Bucket upper bounds of vLLM's PrometheusStatLogger, written as vLLM writes them (one list each;
# ITL is vLLM's time_per_output_token / inter_token_latency histogram), from
# https://github.com/vllm-project/vllm/blob/005a810bc40faa25b8870fbc8559c3462581eee3/vllm/v1/metrics/loggers.py
# (read 2026-11-30).
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
               1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
               40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# vllm:iteration_tokens_total's bounds (ITERATION_TOKENS_BUCKETS) and the queue time's (REQUEST_LATENCY_BUCKETS, the
# same as e2e's), vllm/v1/metrics/buckets.py of the CPU build's vLLM 0.32.0 (read 2026-12-02)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# fmt: on


class Histogram:
    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last = +Inf overflow
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float, n: int = 1) -> None:
        # Prometheus buckets are "le": v == bound falls in that bucket.
        self.counts[bisect_left(self.bounds, v)] += n
        self.sum += v * n
        self.count += n


def _fmt(v: float) -> str:
    v = float(v)
    if v == int(v) and abs(v) < 1e15:
        return f"{v:.1f}"
    return repr(float(v))


def _pow_buckets(top: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to ``top``."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > top:
                return tuple(out)
            out.append(float(v))
        exp += 1


class EngineStats:
    """What one DP engine (vLLM's ``engine`` label) counts itself."""

    __slots__ = ("counters", "e2e", "itl", "iteration_tokens", "output_len", "prompt_len", "queue", "success", "ttft")

    def __init__(self, max_model_len: int) -> None:
        self.counters: dict[str, float] = {k: 0 for k in Metrics.COUNTERS}
        self.success: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # vLLM's per-step histogram: observed for each step with outputs, the tokens it generated plus the prompt
        # tokens computed for the requests whose first token it made (IterationStats: prompt_token_stats.computed
        # + num_generation_tokens, vllm/v1/metrics/loggers.py and stats.py of vLLM 0.32.0)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.queue = Histogram(E2E_BUCKETS)  # arrival -> first scheduled (vLLM: scheduled_ts - queued_ts)
        tokens = _pow_buckets(max_model_len)
        self.prompt_len = Histogram(tokens)
        self.output_len = Histogram(tokens)


class Metrics:
    """The server's metrics, one series per DP engine; gauges are read from a callback at scrape time."""

    COUNTERS = {
        "vllm:prompt_tokens": "Number of prefill tokens processed.",
        "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local prefix cache hits).",
        "vllm:generation_tokens": "Number of generation tokens processed.",
        "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
        "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
        "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
        # the CPU KV tier (--kv-offloading-size), under vLLM's names for KV-connector hits
        "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector cross-instance cache "
        "sharing, in terms of number of queried tokens.",
        "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector cross-instance cache "
        "sharing, in terms of number of cached tokens.",
    }
    GAUGES = {
        "vllm:num_requests_running": "Number of requests in model execution batches.",
        "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
        "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    }

    def __init__(
        self, model_name: str, engines: int = 1, max_model_len: int = 131072, cache_info: dict[str, str] | None = None
    ) -> None:
        self.model_name = model_name
        self.cache_info = dict(cache_info or {})  # vllm:cache_config_info's labels (the KV cache's settings)
        name = _escape(model_name)
        self.labels = [f'engine="{i}",model_name="{name}"' for i in range(engines)]
        self.engines = [EngineStats(max_model_len) for _ in range(engines)]

    def render(
        self,
        gauges: list[dict[str, float]] | dict[str, float],
        core_counters: list[dict[str, float]] | dict[str, float] | None = None,
    ) -> str:
        """Per engine: ``gauges`` and ``core_counters`` (from the engine core, overriding the
        server's own counts) are a list with one dict per engine, or one dict for engine 0."""
        n = len(self.engines)
        per_gauges = gauges if isinstance(gauges, list) else [gauges] + [{}] * (n - 1)
        per_core = core_counters if isinstance(core_counters, list) else [core_counters or {}] + [{}] * (n - 1)
        out: list[str] = []
        for name, help_ in self.GAUGES.items():
            out += _family(name, help_, "gauge", ((lab, g.get(name, 0.0)) for lab, g in zip(self.labels, per_gauges)))
        counters = []
        for e, core in zip(self.engines, per_core):
            c = dict(e.counters)
            c.update(core or {})
            counters.append(c)
        for name, help_ in self.COUNTERS.items():
            out += _family(f"{name}_total", help_, "counter", ((lab, c[name]) for lab, c in zip(self.labels, counters)))
        # vLLM's split of the prompt tokens by where their KV came from (this engine's CPU tier counts
        # in local_cache_hit, with the prefix cache's hits; a KV connector's in external_kv_transfer)
        by_source = (
            (f'{lab},source="{src}"', v)
            for lab, c in zip(self.labels, counters)
            for src, v in (
                ("local_compute", c["vllm:prompt_tokens"] - c["vllm:prompt_tokens_cached"]),
                ("local_cache_hit", c["vllm:prompt_tokens_cached"] - c.get("vllm:external_kv_transfer_tokens", 0.0)),
                ("external_kv_transfer", c.get("vllm:external_kv_transfer_tokens", 0.0)),
            )
        )
        out += _family("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", "counter", by_source)
        if self.cache_info:
            out += _family(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                "gauge",
                (
                    (lab + "".join(f',{k}="{_escape(v)}"' for k, v in sorted(self.cache_info.items())), 1.0)
                    for lab in self.labels
                ),
            )
        success = (
            (f'{lab},finished_reason="{reason}"', k)
            for lab, e in zip(self.labels, self.engines)
            for reason, k in e.success.items()
        )
        out += _family("vllm:request_success_total", "Count of successfully processed requests.", "counter", success)
        for name, help_, attr in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "queue"),
            ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration_tokens"),
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_len"),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", "output_len"),
        ):
            out += _family(name, help_, "histogram", ())
            for lab, e in zip(self.labels, self.engines):
                h = getattr(e, attr)
                cum = 0
                for bound, c in zip(h.bounds, h.counts):
                    cum += c
                    out.append(f'{name}_bucket{{{lab},le="{_fmt(float(bound))}"}} {_fmt(cum)}')
                out.append(f'{name}_bucket{{{lab},le="+Inf"}} {_fmt(h.count)}')
                out.append(f"{name}_count{{{lab}}} {_fmt(h.count)}")
                out.append(f"{name}_sum{{{lab}}} {_fmt(float(h.sum))}")
        return "\n".join(out) + "\n"


def _family(name: str, help_: str, kind: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    """One metric family: its ``# HELP`` and ``# TYPE`` lines, then a line per (labels, value)."""
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *(f"{name}{{{lab}}} {_fmt(v)}" for lab, v in samples)]


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def parse_text(text: str) -> dict[str, float]:
    """Samples of an exposition as {'name{labels}': value}; for tests and clients."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        out[key] = float(val)
    return out
