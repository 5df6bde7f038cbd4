"""Prometheus text exposition (format 0.0.4) of vLLM's V1 metric names.

Only what benchcamp and typical dashboards read: gauges, counters and the three
latency histograms, labelled ``model_name`` and ``engine`` as vLLM does (one
``engine`` label value per data-parallel replica in vLLM; the simulated server
reports the node as ``engine="0"``). Bucket bounds are vLLM's. Counters get the
``_total`` suffix on the sample and not on ``# TYPE``, like prometheus_client.
Written by hand (no prometheus_client dependency) and cheap to observe: an
observation is a bisect and two additions.
"""

from __future__ import annotations

from bisect import bisect_left

# Bucket upper bounds as in vllm/v1/metrics/loggers.py.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


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


class Metrics:
    """The server's metrics; gauges are read from a callback at scrape time."""

    COUNTERS = {
        "vllm:prompt_tokens": "Number of prefill tokens processed.",
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

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.labels = f'engine="0",model_name="{_escape(model_name)}"'
        self.counters: dict[str, float] = {k: 0 for k in self.COUNTERS}
        self.success: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def render(self, gauges: dict[str, float], core_counters: dict[str, float] | None = None) -> str:
        """``core_counters`` (from the engine core) override the server's own counts."""
        lab = self.labels
        out: list[str] = []
        for name, help_ in self.GAUGES.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{lab}}} {_fmt(gauges.get(name, 0.0))}"]
        counters = dict(self.counters)
        counters.update(core_counters or {})
        for name, help_ in self.COUNTERS.items():
            out += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter",
                    f"{name}_total{{{lab}}} {_fmt(counters[name])}"]
        name = "vllm:request_success"
        out += [f"# HELP {name}_total Count of successfully processed requests.", f"# TYPE {name}_total counter"]
        for reason, n in self.success.items():
            out.append(f'{name}_total{{{lab},finished_reason="{reason}"}} {_fmt(n)}')
        for name, help_, h in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
        ):
            out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
            cum = 0
            for bound, c in zip(h.bounds, h.counts):
                cum += c
                out.append(f'{name}_bucket{{{lab},le="{_fmt(float(bound))}"}} {_fmt(cum)}')
            out.append(f'{name}_bucket{{{lab},le="+Inf"}} {_fmt(h.count)}')
            out.append(f"{name}_count{{{lab}}} {_fmt(h.count)}")
            out.append(f"{name}_sum{{{lab}}} {_fmt(float(h.sum))}")
        return "\n".join(out) + "\n"


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
