"""Per-request records -> the summary of one sweep point. Pure pandas/numpy, no IO.

Window rule. A request belongs to the measurement window ``[t0, t1)`` when it
was *sent* in it (``sent_s``; ``scheduled_s`` when it never got sent). Warm-up
requests (sent before ``t0``) are excluded; requests sent inside the window are
followed through the drain, so all their tokens count. In steady state the
tokens of requests still running at ``t1`` balance those of warm-up requests
running at ``t0``, so tokens / W is unbiased. ``W = t1 - t0``.

Per request (successful = HTTP 200 and no error), token counts from the
server's usage (the client never guesses them):
    ttft = first_token_s - sent_s          e2e = last_token_s - sent_s
    tpot = (e2e - ttft) / (out - 1)        for out > 1 (vLLM's TPOT)
    u    = 1 / tpot                         per-user rate, tokens/s
    itl  = every gap between streamed chunks, pooled over requests
Over the window, with G GPUs:
    throughput per GPU  = tokens / W / G  (total = cached + uncached input + output)
    P90 per-user rate   = 1 / P90(tpot)   (the rate 90% of requests meet or exceed)
    E2E-normalized interactivity = 1 / P90(e2e / out)   (AgentX's, the prefill wait included; beside the
                          per-user rate, see ``e2e_normalized_interactivity``)
    revenue per GPU-h   = 3600 / (W*G) * (cached*p_hit + uncached*p_miss + out*p_out) / 1e6
AgentX's span-based throughput, beside it (SemiAnalysis InferenceX
``utils/agentic/aggregation/request_metrics.py``, ``compute_throughput_stats``, commit
45d8c08332556a0b4e4a0f6799f490bda23bcd6a: ``(sum ISL + sum OSL) / (max request end -
min request start)`` over the profiled records without an error; per GPU it divides by
prefill GPUs + decode GPUs), over the same successful window requests:
    span S              = max(last_token_s) - min(sent_s)
    span throughput/GPU = (prompt tokens incl. cached + output tokens) / S / G
The window figure stays the headline (``throughput_headline``: ``window``); a
baseline published with the span definition is compared with the span figure
(``benchcamp.verdicts.compare``). With the window rule the tokens of requests sent in the
window count over W; the span also counts the drain after it, so the span figure
is lower when the tail drains slowly.
Steady state (``steadiness``; tolerances from ``load.steady``): the window split at its middle
``tm = (t0 + t1) / 2``, each half by the window rule above:
    tokens/s/GPU of half h   = tokens of the requests sent in h / (W/2) / G
    throughput drift         = |half2 - half1| / mean(half1, half2)     <= tolerance
    cache hit of half h      = cached / (cached + uncached) of h's requests (client)
    cache hit drift          = |hit2 - hit1|                            <= hit_tolerance
``steady`` is 1 when both hold, else 0 and ``steady_reasons`` says which and by how much (a point is
still valid: the check says whether its figures would hold for a longer window); a figure a half cannot
give (no tokens, no reported cached tokens) is None and its check is skipped. A closed loop whose
level exceeds the workload's distinct top-level sessions replays some sessions while another play of
them may still be cached; ``sessions_distinct`` and ``replay_note`` say so.
Cached tokens a server does not report (records hold -1) are unknown, not 0:
the client hit rate is then None ("unknown") and that input is priced as
uncached; ``revenue_price_basis`` says which prices revenue assumed.
Percentiles use numpy's default ``linear`` method. Failed requests count in the
error rate, never in latency or tokens. Requests the client itself cut off
(still running when the drain ended, or interrupted) are *incomplete*, not
errors: the server did nothing wrong. They leave the error rate's numerator and
denominator and are reported as ``incomplete_rate``; too many make the point
invalid (lengthen ``load.drain_s``). Nothing measured gives NaN, not an
exception; throughput is 0 when no tokens were served.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd

from benchcamp.router.affinity import ENGINE_KEY_SEP
from benchcamp.workload.agentx.scenarios import CONTEXT_OVERFLOW as _CONTEXT_OVERFLOW
from benchcamp.workload.agentx.scenarios import FAILURE_GRACE_FLOOR, prompt_form, prompt_override

PERCENTILES = (50, 90, 99)
# a lower bound on the P90 TTFT of every window request, the ones cut off at the drain's end included
# (:func:`ttft_p90_floor`); in a summary only when some were cut off, so not a Metric (those are always written)
TTFT_P90_FLOOR = "ttft_p90_floor_s"
# error kinds (see _error_kind) of requests the client cut off, not the server
INCOMPLETE_KINDS = frozenset({"drain_timeout", "interrupted"})
NAN = float("nan")
# revenue_price_basis: which input prices revenue assumed
PRICE_BASIS_SPLIT = "cached input at the cache-hit price, uncached input at the cache-miss price"
PRICE_BASIS_UNCACHED = "all input at the cache-miss price: the server did not report cached tokens"
PRICE_BASIS_PARTLY = "input of requests without reported cached tokens at the cache-miss price"
ERROR_EXAMPLE_MAX = 300


class Metric(enum.StrEnum):
    """The summary keys that readers use (compare, capacity, the report, the terminal tables,
    ``benchcamp plan``): one spelling for the writer (:func:`summarize`) and every reader.

    A member equals and hashes as its string, so ``summary[Metric.TTFT_P90]`` finds the key of a
    summary loaded from JSON; :func:`summarize` returns plain-``str`` keys, so summary.json and
    MLflow metric names are the same bytes as the strings. Keys only this module reads
    (``incomplete_rate``, ``error_example`` ...) stay strings here.
    """

    REQUESTS = "requests"
    THROUGHPUT_PER_GPU = "total_tokens_per_s_per_gpu"
    THROUGHPUT_PER_GPU_SPAN = "total_tokens_per_s_per_gpu_span"
    OUTPUT_THROUGHPUT_PER_GPU = "output_tokens_per_s_per_gpu"
    P90_USER_RATE = "p90_user_tokens_per_s"
    TTFT_P50 = "ttft_p50_s"
    TTFT_P90 = "ttft_p90_s"
    TPOT_P90 = "tpot_p90_s"
    CACHE_HIT_RATE_CLIENT = "cache_hit_rate_client"
    CACHE_HIT_RATE_SERVER = "cache_hit_rate_server"
    CACHE_HIT_RATE_THEORETICAL = "cache_hit_rate_theoretical"
    CACHE_HIT_RATE_CPU_TIER = "cache_hit_rate_cpu_tier"
    CACHED_TOKENS_REPORTED = "cached_tokens_reported"
    REVENUE_PER_GPU_HOUR = "revenue_per_gpu_hour"
    REVENUE_PRICE_BASIS = "revenue_price_basis"
    COST_PER_GPU_HOUR = "cost_per_gpu_hour"
    COST_PER_MTOK = "cost_per_mtok"
    MARGIN_PER_GPU_HOUR = "margin_per_gpu_hour"
    ERROR_RATE = "error_rate"
    # AIPerf's tag names (ai-dynamo/aiperf metrics/types/e2e_normalized_interactivity_metrics.py), so a summary
    # and an imported AIPerf export name the figure alike
    E2E_INTERACTIVITY_P90 = "e2e_normalized_interactivity_p90"
    E2E_INTERACTIVITY_P75 = "e2e_normalized_interactivity_p75"


# The throughput definitions a summary carries (see the module doc) and which one is the headline.
THROUGHPUT_DEFINITIONS = {"window": Metric.THROUGHPUT_PER_GPU, "span": Metric.THROUGHPUT_PER_GPU_SPAN}
THROUGHPUT_HEADLINE = "window"
THROUGHPUT_DEFINITION_WORDS = {
    "window": "benchcamp's window rule: tokens of requests sent in the window / window length / GPUs",
    "span": "AgentX's span rule: (ISL incl. cached + OSL) of the successful window requests / "
    "(last request end - first request start) / (prefill + decode GPUs)",
}

# The two per-user rates on InferenceX's AgentX frontier (its interactivity x-axis) and what each is. "tpot" is
# benchcamp's P90 per-user rate, the headline; a baseline states which one its figure is
# (benchcamp/data/baselines.yaml: interactivity_definition) and is compared with the run's figure of that name.
INTERACTIVITY_DEFINITIONS = {"tpot": Metric.P90_USER_RATE, "e2e_normalized": Metric.E2E_INTERACTIVITY_P90}
INTERACTIVITY_HEADLINE = "tpot"
INTERACTIVITY_DEFINITION_WORDS = {
    "tpot": "P90 per-user rate: 1 / P90((e2e - ttft) / (output tokens - 1)), decode only (InferenceX's interactivity)",
    "e2e_normalized": "E2E-normalized interactivity: 1 / P90(e2e / output tokens), the prefill wait included "
    "(InferenceX's and AIPerf's e2e_normalized_interactivity_p90)",
}

# written only when the server reports what they need (a CPU KV tier's share of the cached tokens)
METRICS_WHEN_REPORTED = frozenset({Metric.CACHE_HIT_RATE_CPU_TIER})


@dataclass(frozen=True)
class Column:
    """How every table shows a summary figure: its column title, its format, its unit and which way is better
    ("higher", "lower"; "" where neither is)."""

    metric: Metric
    label: str
    fmt: str
    unit: str = ""
    direction: str = ""


# The one registry of summary columns: the sweep and trials tables, a point's log line, the report's tables and
# cards, the side-by-side and the verdict tables all read their titles and formats here.
COLUMNS: dict[str, Column] = {
    c.metric: c
    for c in (
        Column(Metric.REQUESTS, "reqs", "{:.0f}"),
        # the headline: benchcamp's window definition
        Column(Metric.THROUGHPUT_PER_GPU, "tok/s/GPU", "{:,.0f}", "tokens/s/GPU", "higher"),
        # AgentX's span definition
        Column(Metric.THROUGHPUT_PER_GPU_SPAN, "span tok/s/GPU", "{:,.0f}", "tokens/s/GPU", "higher"),
        Column(Metric.OUTPUT_THROUGHPUT_PER_GPU, "out tok/s/GPU", "{:,.0f}", "tokens/s/GPU", "higher"),
        Column(Metric.P90_USER_RATE, "P90 user tok/s", "{:.1f}", "tokens/s", "higher"),
        # AgentX's E2E-normalized interactivity (P90)
        Column(Metric.E2E_INTERACTIVITY_P90, "E2E-norm tok/s", "{:.1f}", "tokens/s", "higher"),
        Column(Metric.TTFT_P50, "TTFT p50 s", "{:.3f}", "s", "lower"),
        Column(Metric.TTFT_P90, "TTFT p90 s", "{:.3f}", "s", "lower"),
        Column(Metric.TPOT_P90, "TPOT p90 s", "{:.4g}", "s", "lower"),  # a few ms: significant digits
        Column(Metric.CACHE_HIT_RATE_CLIENT, "cache hit", "{:.1%}", "fraction", "higher"),
        Column(Metric.CACHE_HIT_RATE_SERVER, "server hit", "{:.1%}", "fraction", "higher"),
        Column(Metric.REVENUE_PER_GPU_HOUR, "revenue $/GPU-h", "${:.2f}", "USD", "higher"),
        Column(Metric.COST_PER_GPU_HOUR, "cost $/GPU-h", "${:.2f}", "USD", "lower"),
        Column(Metric.ERROR_RATE, "error rate", "{:.2%}", "fraction", "lower"),
    )
}


@dataclass(frozen=True)
class HeadlineMetric:
    name: Metric
    direction: str  # "higher" or "lower" is better
    label: str
    unit: str
    fmt: str
    # Changes smaller than this (absolute) are never a verdict: an error rate
    # going from 0 to 0.01% is "infinitely" worse in relative terms, and nothing.
    min_abs_change: float = 0.0

    def better(self, new: float, old: float) -> bool:
        return new > old if self.direction == "higher" else new < old


def _headline(metric: Metric, title: str, min_abs_change: float = 0.0) -> HeadlineMetric:
    """A headline metric: ``title`` on its card, the rest from its column (:data:`COLUMNS`)."""
    c = COLUMNS[metric]
    return HeadlineMetric(metric, c.direction, title, c.unit, c.fmt, min_abs_change)


HEADLINE: dict[str, HeadlineMetric] = {
    m.name: m
    for m in (
        _headline(Metric.THROUGHPUT_PER_GPU, "Total throughput"),
        _headline(Metric.P90_USER_RATE, "P90 per-user rate"),
        _headline(Metric.TTFT_P90, "TTFT P90"),
        _headline(Metric.REVENUE_PER_GPU_HOUR, "Revenue per GPU-hour"),
        _headline(Metric.ERROR_RATE, "Error rate", min_abs_change=0.001),
    )
}

HEADLINE_RULE = (
    "headline point: among valid points, the one with the highest revenue per GPU-hour whose P90 per-user "
    "rate meets the SLO's rate (1 / slo.tpot_s); when none meets it, the valid point with the highest "
    "total tokens/s/GPU"
)


# ---------------------------------------------------------------------------
# per-request frame


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        if name not in obj:
            raise ValueError(f"missing field {name!r} in {sorted(obj)}")
        return obj[name]
    return getattr(obj, name)


def in_window(records: pd.DataFrame, window: tuple[float, float] | None) -> pd.Series:
    """Boolean mask of the records that belong to the window (see module doc)."""
    if window is None:
        return pd.Series(True, index=records.index)
    t0, t1 = window
    sent = records["sent_s"].astype(float)
    sent = sent.where(sent.notna(), records["scheduled_s"].astype(float))
    return (sent >= t0) & (sent < t1)


def _ok(records: pd.DataFrame) -> pd.Series:
    return (records["status"] == 200) & records["error"].isna()


def request_samples(
    records: pd.DataFrame, window: tuple[float, float] | None = None, prices: Any | None = None
) -> pd.DataFrame:
    """One row per request in the window: what compare's bootstrap resamples.

    Columns: sent_s, ok, ttft, tpot, e2e, cached, uncached, output, total,
    cached_known (the server reported cached tokens; else all input counts as
    uncached), and revenue (USD, when ``prices`` is given). Token columns are 0
    for failed requests; latency columns NaN.
    """
    _check_columns(records)
    r = records[in_window(records, window)]
    ok = _ok(r).to_numpy(dtype=bool)
    sent = r["sent_s"].to_numpy(dtype=float)
    first = r["first_token_s"].to_numpy(dtype=float)
    last = r["last_token_s"].to_numpy(dtype=float)
    prompt = r["prompt_tokens"].to_numpy(dtype=float)
    cached = r["cached_tokens"].to_numpy(dtype=float)
    out = r["completion_tokens"].to_numpy(dtype=float)
    usage_known = ok & (prompt >= 0) & (out >= 0)
    cached_known = usage_known & (cached >= 0)  # -1: the server did not report cached tokens
    # a server claiming more cached than prompt tokens must not inflate totals or revenue
    cached = np.where(usage_known, np.clip(cached, 0, np.maximum(prompt, 0)), 0.0)
    uncached = np.where(usage_known, np.clip(prompt - cached, 0, None), 0.0)
    output = np.where(usage_known, out, 0.0)
    ttft = np.where(ok, first - sent, NAN)
    e2e = np.where(ok, last - sent, NAN)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(ok & (out > 1), (e2e - ttft) / (out - 1), NAN)
    df = pd.DataFrame(
        {
            "sent_s": sent,
            "ok": ok,
            "ttft": ttft,
            "tpot": tpot,
            "e2e": e2e,
            "cached": cached,
            "uncached": uncached,
            "output": output,
            "total": cached + uncached + output,
            "cached_known": cached_known,
        }
    )
    if prices is not None:
        df["revenue"] = (cached * prices.cached_input + uncached * prices.uncached_input + output * prices.output) / 1e6
    return df


def _check_columns(records: pd.DataFrame) -> None:
    need = {
        "sent_s",
        "scheduled_s",
        "first_token_s",
        "last_token_s",
        "itl_s",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "status",
        "error",
    }
    missing = need - set(records.columns)
    if missing:
        raise ValueError(
            f"records: missing columns {sorted(missing)}; read them with benchcamp.results.records.read_records"
        )


def percentile(values: Iterable[float] | np.ndarray, q: float) -> float:
    """numpy ``linear`` percentile over the finite values; NaN when there are none."""
    return percentiles(values, (q,))[0]


def percentiles(values: Iterable[float] | np.ndarray, qs: Iterable[float]) -> list[float]:
    """Several percentiles in one pass (one partition of the data)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    qs = list(qs)
    return [float(x) for x in np.percentile(a, qs)] if a.size else [NAN] * len(qs)


def _is_list(x: Any) -> bool:
    return x is not None and not isinstance(x, (float, str))


def ttft_p90_floor(window_records: pd.DataFrame) -> float:
    """A lower bound on the P90 TTFT the window's requests would show had none been cut off: over the successful
    requests and those the client cut off (drain ended, interrupted), a cut-off request counting its first token
    if it got one, else the time it had waited when cut (its TTFT is at least that). Each value is at most the
    true TTFT and a percentile is monotone in its values, so the result is at most the true P90. Failed requests
    (the server answered an error) stay out, as they do from the TTFT percentiles. NaN when no request counts."""
    r = window_records
    ok = _ok(r).to_numpy()
    cut = np.array([_error_kind(st, e) in INCOMPLETE_KINDS for st, e in zip(r["status"], r["error"])], dtype=bool)
    sent = r["sent_s"].to_numpy(dtype=float)
    first = r["first_token_s"].to_numpy(dtype=float)
    waited = r["done_s"].to_numpy(dtype=float) - sent
    ttft = np.where(np.isfinite(first), first - sent, np.where(cut & np.isfinite(waited), waited, NAN))
    vals = ttft[(ok | cut) & np.isfinite(ttft)]
    return float(np.percentile(vals, 90)) if vals.size else NAN


def _error_kind(status: Any, error: Any) -> str:
    if isinstance(error, str) and error.strip():
        head = re.split(r"[:\n(]", error.strip(), maxsplit=1)[0]
        kind = re.sub(r"[^a-z0-9]+", "_", head.lower()).strip("_")[:32]
        return kind or "error"
    return f"http_{int(status)}" if status == status and status is not None else "unknown"


# ---------------------------------------------------------------------------
# summary


def summarize(
    records: pd.DataFrame,
    window: tuple[float, float],
    gpus: int,
    prices: Any,
    usd_per_gpu_hour: float,
    slo: Any,
    server_delta: Mapping[str, float] | None = None,
    theoretical_hit_rate: float | None = None,
    client_health: Mapping[str, Any] | None = None,
    validity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The flat summary of one sweep point (see the module doc for every formula).

    ``prices``: a :class:`benchcamp.pricing.PricingProfile` (or anything with
    cached_input/uncached_input/output in USD per million tokens).
    ``slo``: ``cfg.slo`` (ttft_s, tpot_s). ``server_delta``: the point's
    ``/metrics`` counter deltas. ``validity``: the result of :func:`validity`,
    copied in as ``valid`` (1/0) and ``invalid_reasons``.
    """
    t0, t1 = (float(x) for x in window)
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
        raise ValueError(f"window={window!r}: need finite (t0, t1) with t1 > t0; it is the point's measurement window")
    if int(gpus) < 1:
        raise ValueError(f"gpus={gpus}: need at least 1 GPU (hardware.gpu_count)")
    G, W = int(gpus), t1 - t0
    slo_ttft, slo_tpot = float(_get(slo, "ttft_s")), float(_get(slo, "tpot_s"))

    _check_columns(records)
    mask = in_window(records, (t0, t1))
    r = records[mask]
    s = request_samples(records, (t0, t1), prices)
    n = len(s)
    ok = s["ok"].to_numpy()
    n_ok = int(ok.sum())

    out: dict[str, Any] = {
        Metric.REQUESTS: n,
        "requests_ok": n_ok,
        "requests_failed": n - n_ok,
        "window_s": W,
        "gpus": G,
        "requests_per_s": n_ok / W,
    }

    # throughput per GPU (Metric.THROUGHPUT_PER_GPU, Metric.OUTPUT_THROUGHPUT_PER_GPU among them)
    tokens = {k: float(s[k].sum()) for k in ("cached", "uncached", "output", "total")}
    for k, name in (
        ("total", "total"),
        ("cached", "cached_input"),
        ("uncached", "uncached_input"),
        ("output", "output"),
    ):
        out[f"{name}_tokens"] = int(tokens[k])
        out[f"{name}_tokens_per_s_per_gpu"] = tokens[k] / W / G

    # AgentX's span-based throughput (module doc): successful window requests over their own span
    out.update(span_throughput(r[ok], G))
    out["throughput_headline"] = THROUGHPUT_HEADLINE

    # latency percentiles (Metric.TTFT_P50, TTFT_P90, TPOT_P90 among them)
    ok_r = r[ok]
    gaps = [np.asarray(x, dtype=float) for x in ok_r["itl_s"] if _is_list(x) and len(x)]
    itl = np.concatenate(gaps) if gaps else np.array([])
    series = {"ttft": s["ttft"].to_numpy(), "tpot": s["tpot"].to_numpy(), "itl": itl, "e2e": s["e2e"].to_numpy()}
    for name, vals in series.items():
        for q, value in zip(PERCENTILES, percentiles(vals, PERCENTILES)):
            out[f"{name}_p{q}_s"] = value
        finite = vals[np.isfinite(vals)]
        out[f"{name}_mean_s"] = float(finite.mean()) if finite.size else NAN

    # per-user rate: 1 / P90(tpot) is the rate 90% of requests meet or exceed
    p90_tpot = out[Metric.TPOT_P90]
    out[Metric.P90_USER_RATE] = 1.0 / p90_tpot if p90_tpot > 0 else NAN
    out["p50_user_tokens_per_s"] = 1.0 / out["tpot_p50_s"] if out["tpot_p50_s"] > 0 else NAN
    # AgentX's E2E-normalized interactivity beside it (the prefill wait included)
    out.update(
        e2e_normalized_interactivity(
            s["e2e"].to_numpy(), s["output"].to_numpy(), s["ttft"].to_numpy(), (s["cached"] + s["uncached"]).to_numpy()
        )
    )

    # money (input whose cached share is unknown is priced as uncached, and the summary says so)
    known = s["cached_known"].to_numpy()
    n_known = int(known.sum())
    revenue_usd = float(s["revenue"].sum())
    out["pricing_profile"] = str(getattr(prices, "name", "custom"))
    out[Metric.CACHED_TOKENS_REPORTED] = n_known / n_ok if n_ok else NAN
    out[Metric.REVENUE_PRICE_BASIS] = (
        PRICE_BASIS_SPLIT if n_known == n_ok else PRICE_BASIS_UNCACHED if n_known == 0 else PRICE_BASIS_PARTLY
    )
    out["revenue_usd"] = revenue_usd
    out[Metric.REVENUE_PER_GPU_HOUR] = 3600.0 / (W * G) * revenue_usd
    out["blended_usd_per_mtok"] = revenue_usd / tokens["total"] * 1e6 if tokens["total"] > 0 else NAN
    out[Metric.COST_PER_GPU_HOUR] = float(usd_per_gpu_hour)
    tok_per_gpu_hour = out[Metric.THROUGHPUT_PER_GPU] * 3600.0
    out[Metric.COST_PER_MTOK] = float(usd_per_gpu_hour) / tok_per_gpu_hour * 1e6 if tok_per_gpu_hour > 0 else NAN
    out[Metric.MARGIN_PER_GPU_HOUR] = out[Metric.REVENUE_PER_GPU_HOUR] - out[Metric.COST_PER_GPU_HOUR]

    # goodput: successful requests meeting both SLOs (a one-token answer has no TPOT: it meets it)
    tpot_ok = np.where(np.isnan(s["tpot"].to_numpy()), True, s["tpot"].to_numpy() <= slo_tpot)
    good = ok & (s["ttft"].to_numpy() <= slo_ttft) & tpot_ok
    out["goodput_requests_per_s"] = int(good.sum()) / W
    out["goodput_output_tokens_per_s_per_gpu"] = float(s["output"].to_numpy()[good].sum()) / W / G
    out["goodput_fraction"] = int(good.sum()) / n if n else NAN

    # cache hit rate three ways
    # client: over the requests whose cached tokens the server reported; None ("unknown") when none did
    cached_k = float(s["cached"].to_numpy()[known].sum())
    prompt_k = cached_k + float(s["uncached"].to_numpy()[known].sum())
    out[Metric.CACHE_HIT_RATE_CLIENT] = (cached_k / prompt_k if prompt_k > 0 else NAN) if n_known or not n_ok else None
    # the part of the client's hits a CPU KV tier served (usage benchcamp_cpu_cached_tokens): only when reported
    cpu = r["cpu_cached_tokens"].to_numpy(dtype=float)[ok] if "cpu_cached_tokens" in r else np.array([])
    if np.isfinite(cpu).any() and prompt_k > 0:
        out[Metric.CACHE_HIT_RATE_CPU_TIER] = float(np.nansum(cpu)) / prompt_k
    out[Metric.CACHE_HIT_RATE_SERVER] = server_hit_rate(server_delta)
    # per replica (DP engine): how evenly session affinity / the router spread the cache's work
    for eng, rate in engine_hit_rates(server_delta).items():
        out[f"{PER_ENGINE_HIT_RATE}{eng}"] = rate
    out[Metric.CACHE_HIT_RATE_THEORETICAL] = float(theoretical_hit_rate) if theoretical_hit_rate is not None else NAN

    # errors (incomplete requests apart: the client cut them off)
    failed = r[~ok]
    kinds: dict[str, int] = {}
    for status, error in zip(failed["status"], failed["error"]):
        k = _error_kind(status, error)
        kinds[k] = kinds.get(k, 0) + 1
    for k, c in sorted(kinds.items()):
        out[f"errors.{k}"] = c
    messages = failed["error"].dropna()
    messages = messages[~messages.map(lambda e: _error_kind(0, e) in INCOMPLETE_KINDS)]
    if len(messages):  # the server's own words for the commonest failure
        out["error_example"] = str(messages.value_counts().index[0])[:ERROR_EXAMPLE_MAX]
    incomplete = sum(c for k, c in kinds.items() if k in INCOMPLETE_KINDS)
    answered = n - incomplete
    out["requests_incomplete"] = incomplete
    out["incomplete_rate"] = incomplete / n if n else NAN
    if incomplete:  # what the cut-off requests still prove about TTFT (capacity decides a tier on it)
        out[TTFT_P90_FLOOR] = ttft_p90_floor(r)
    out[Metric.ERROR_RATE] = (n - n_ok - incomplete) / answered if answered else NAN

    # the client's own health: late sends understate latency (coordinated omission)
    lag = (r["sent_s"].astype(float) - r["scheduled_s"].astype(float)).to_numpy() * 1000.0
    out["client_lag_p50_ms"], out["client_lag_p99_ms"] = percentiles(lag, (50, 99))
    if client_health and client_health.get("cpu_max") is not None:
        out["client_cpu_max"] = float(client_health["cpu_max"])
    if validity is not None:
        out["valid"] = int(bool(validity.get("valid")))
        out["invalid_reasons"] = "; ".join(validity.get("reasons") or [])
    return _plain_keys(out)


def e2e_normalized_interactivity(
    e2e_s: np.ndarray,
    output_tokens: np.ndarray,
    ttft_s: np.ndarray | None = None,
    input_tokens: np.ndarray | None = None,
) -> dict[str, float]:
    """AgentX's E2E-normalized interactivity: ``1 / P(e2e_s / output tokens)`` at P90 and P75, tokens/s per user.

    As AIPerf computes it (ai-dynamo/aiperf ``src/aiperf/metrics/e2e_normalized_interactivity_analyzer.py``,
    commit ffb76283485029dab1b8c84f8367f1349d4c267c, the family AIPerf 0.14 reports; its docstring pins it to
    InferenceX's ``derived-agentic-metrics.ts``): per request the seconds per output token ``e2e / OSL``, over the
    requests whose latency, OSL and (where given) TTFT and ISL are all finite and > 0; numpy's linear
    percentile of that, inverted. The percentile is taken of the ratio, then inverted (``1 / p(x)``, not
    ``p(1 / x)``): P90 is the rate of the slow tail. NaN when no request qualifies."""
    e2e = np.asarray(e2e_s, dtype=float)
    osl = np.asarray(output_tokens, dtype=float)
    keep = np.isfinite(e2e) & (e2e > 0) & np.isfinite(osl) & (osl > 0)
    for extra in (ttft_s, input_tokens):
        if extra is not None:
            col = np.asarray(extra, dtype=float)
            keep &= np.isfinite(col) & (col > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = e2e[keep] / osl[keep]
    p90, p75 = percentiles(ratio, (90, 75))
    return {
        Metric.E2E_INTERACTIVITY_P90.value: 1.0 / p90 if p90 > 0 else NAN,
        Metric.E2E_INTERACTIVITY_P75.value: 1.0 / p75 if p75 > 0 else NAN,
    }


def span_throughput(ok_records: pd.DataFrame, gpus: int) -> dict[str, float]:
    """AgentX's span-based throughput of successful records (module doc): ISL (prompt tokens,
    cached included) + OSL over (last end - first start), per GPU."""
    if not len(ok_records):
        return {"span_s": NAN, Metric.THROUGHPUT_PER_GPU_SPAN: 0.0, "output_tokens_per_s_per_gpu_span": 0.0}
    start = float(ok_records["sent_s"].astype(float).min())
    end = float(ok_records["last_token_s"].astype(float).max())  # a successful response ends with its last token
    span = end - start
    isl = float(ok_records["prompt_tokens"].astype(float).clip(lower=0).sum())
    osl = float(ok_records["completion_tokens"].astype(float).clip(lower=0).sum())
    if not span > 0:
        return {"span_s": span, Metric.THROUGHPUT_PER_GPU_SPAN: NAN, "output_tokens_per_s_per_gpu_span": NAN}
    return {
        "span_s": span,
        Metric.THROUGHPUT_PER_GPU_SPAN: (isl + osl) / span / int(gpus),
        "output_tokens_per_s_per_gpu_span": osl / span / int(gpus),
    }


def steadiness(
    records: pd.DataFrame, window: tuple[float, float], gpus: int, tolerance: float, hit_tolerance: float
) -> dict[str, Any]:
    """Whether the window is steady (module doc): its two halves' tokens/s and client cache hit."""
    t0, t1 = (float(x) for x in window)
    tm = (t0 + t1) / 2
    half = {}
    for name, w in (("1", (t0, tm)), ("2", (tm, t1))):
        s = request_samples(records, w)
        known = s["cached_known"].to_numpy()
        cached = float(s["cached"].to_numpy()[known].sum())
        prompt = cached + float(s["uncached"].to_numpy()[known].sum())
        half[name] = (float(s["total"].sum()) / (tm - t0) / int(gpus), cached / prompt if prompt > 0 else NAN)
    (a, ha), (b, hb) = half["1"], half["2"]
    drift = abs(b - a) / ((a + b) / 2) if a + b > 0 else NAN
    hit_drift = abs(hb - ha) if ha == ha and hb == hb else NAN
    reasons = []
    if drift == drift and drift > tolerance:
        reasons.append(
            f"tokens/s/GPU of the window's halves differ by {drift:.1%} ({a:,.0f} then {b:,.0f}), more than "
            f"load.steady.tolerance={tolerance:.0%}: the figure depends on the window's length; lengthen "
            "load.warmup_s or load.duration_s"
        )
    if hit_drift == hit_drift and hit_drift > hit_tolerance:
        reasons.append(
            f"cache hit of the window's halves differs by {hit_drift:.1%} ({ha:.1%} then {hb:.1%}), more "
            f"than load.steady.hit_tolerance={hit_tolerance:.1%}"
        )
    figures = {
        "steady_half1_tokens_per_s_per_gpu": a,
        "steady_half2_tokens_per_s_per_gpu": b,
        "steady_throughput_drift": drift,
        "steady_half1_cache_hit": ha,
        "steady_half2_cache_hit": hb,
        "steady_cache_hit_drift": hit_drift,
    }
    # None, not NaN, for what a half cannot tell (no tokens, no reported cached tokens): the summary reaches
    # strict JSON (Airflow's XCom) as it is
    return {
        "steady": int(not reasons),
        "steady_reasons": "; ".join(reasons),
        **{k: (v if v == v else None) for k, v in figures.items()},
    }


def replay_note(level: float, mode: str, sessions_distinct: int | None, replay_salt: bool) -> str:
    """'' unless a closed loop's level exceeds the workload's distinct top-level sessions."""
    if mode != "closed" or not sessions_distinct or level <= sessions_distinct:
        return ""
    return (
        f"level {level:g} exceeds the workload's {sessions_distinct} distinct sessions: some sessions are replayed "
        "while another play of them runs"
        + (
            ", each replay under its own salt (load.steady.replay_salt)"
            if replay_salt
            else ", with the same token ids (load.steady.replay_salt=false): their cache hits are an upper bound"
        )
    )


def _plain_keys(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The keys as plain ``str`` (a Metric member's value): every sink (JSON, YAML, MLflow, pickle)
    gets the same bytes as before Metric existed, whatever it makes of a str subclass."""
    return {k.value if isinstance(k, Metric) else k: v for k, v in summary.items()}


PER_ENGINE_HIT_RATE = "cache_hit_rate_server.engine"  # + the rank: one summary key per DP engine


def engine_hit_rates(delta: Mapping[str, float] | None) -> dict[str, float]:
    """DP engine -> its prefix-cache hits / queries over the point (NaN: no queries), from the
    per-engine keys of the /metrics delta; {} when the server exports one engine or none."""
    hits: dict[str, float] = {}
    queries: dict[str, float] = {}
    for k, v in (delta or {}).items():
        name, sep, eng = k.partition(ENGINE_KEY_SEP)
        if not sep or v is None:
            continue
        if name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total"):
            hits[eng] = hits.get(eng, 0.0) + float(v)
        elif name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total"):
            queries[eng] = queries.get(eng, 0.0) + float(v)
    if len(queries) < 2:
        return {}
    order = sorted(queries, key=lambda e: (0, int(e)) if e.isdigit() else (1, e))  # type: ignore[arg-type]
    return {e: (hits.get(e, 0.0) / queries[e] if queries[e] else NAN) for e in order}


def server_hit_rate(delta: Mapping[str, float] | None) -> float:
    """prefix-cache hits / queries from the point's ``/metrics`` deltas (vLLM names,
    with or without ``_total`` and labels summed); NaN when absent or no queries."""
    if not delta:
        return NAN

    def total(base: str) -> float | None:
        vals = [float(v) for k, v in delta.items() if k.split("{", 1)[0] in (base, base + "_total") and v is not None]
        return sum(vals) if vals else None

    hits = total("vllm:prefix_cache_hits")
    queries = total("vllm:prefix_cache_queries")
    if hits is None or not queries:
        return NAN
    return hits / queries


# ---------------------------------------------------------------------------
# validity, frontier, headline


class ValidityLimits(Protocol):
    """What :func:`validity` reads: the config's ``load`` section (benchcamp.config.Load, a layer above)."""

    @property
    def min_requests(self) -> int: ...
    @property
    def max_error_rate(self) -> float: ...
    @property
    def max_incomplete_rate(self) -> float: ...
    @property
    def max_sched_lag_p99_ms(self) -> float: ...
    @property
    def max_client_cpu(self) -> float: ...


def validity(
    summary: Mapping[str, Any], client_health: Mapping[str, Any] | None, load: ValidityLimits
) -> dict[str, Any]:
    """Whether a point's numbers can be trusted; reasons are sentences with the numbers."""
    # what stopped a client worker (e.g. the server refused the point's first requests) comes first
    reasons: list[str] = list(dict.fromkeys(str(e) for e in (client_health or {}).get("worker_errors") or ()))
    n = int(summary.get(Metric.REQUESTS, 0) or 0)
    min_req = int(load.min_requests)
    if n < min_req:
        reasons.append(
            f"only {n} requests in the measurement window, fewer than load.min_requests={min_req}; "
            "lengthen load.duration_s or raise the load level"
        )
    err, max_err = summary.get(Metric.ERROR_RATE, NAN), float(load.max_error_rate)
    if isinstance(err, (int, float)) and err == err and err > max_err:
        example = summary.get("error_example")
        reasons.append(
            f"error rate {err:.2%} is above load.max_error_rate={max_err:.2%}"
            + (f" (commonest error: {example})" if example else "")
        )
    inc, max_inc = summary.get("incomplete_rate", NAN), float(load.max_incomplete_rate)
    if isinstance(inc, (int, float)) and inc == inc and inc > max_inc:
        reasons.append(
            f"{inc:.2%} of the window's requests were still running when the drain ended, above "
            f"load.max_incomplete_rate={max_inc:.2%}; lengthen load.drain_s"
        )
    lag, max_lag = summary.get("client_lag_p99_ms", NAN), float(load.max_sched_lag_p99_ms)
    if isinstance(lag, (int, float)) and lag == lag and lag > max_lag:
        reasons.append(
            f"client scheduling lag p99 {lag:.1f} ms is above load.max_sched_lag_p99_ms={max_lag:g} ms: "
            "the client was late sending requests (it was the bottleneck); add load.workers or cores"
        )
    cpu = (client_health or {}).get("cpu_max")
    max_cpu = float(load.max_client_cpu)
    if cpu is not None and float(cpu) > max_cpu:
        reasons.append(
            f"client CPU peaked at {float(cpu):.0%} of a core, above load.max_client_cpu={max_cpu:.0%}: "
            "the client may have been the bottleneck; add load.workers or cores"
        )
    return {"valid": not reasons, "reasons": reasons}


# A context-overflow answer: the harness's substrings (agentx-harness 1.0.12, Environment.AGENTX), case-insensitive;
# AgentX's submission is invalid above max_context_overflow_rate of them.
CONTEXT_OVERFLOW = _CONTEXT_OVERFLOW


def context_overflows(records: pd.DataFrame, window: tuple[float, float]) -> tuple[int, int]:
    """(context-overflow answers, requests) among the window's requests."""
    r = records[in_window(records, window)]
    return sum(1 for e in r["error"].dropna() if CONTEXT_OVERFLOW.search(str(e))), len(r)


def _failed(r: pd.DataFrame) -> pd.Series:
    return r["error"].notna() | (r["status"].astype(float) != 200)


def metric_coverage(records: pd.DataFrame, window: tuple[float, float], duration_s: float) -> tuple[float, float]:
    """(TTFT, ITL) coverage of the window, as the harness measures it (accumulator.py
    ``profile_metric_duration_coverage``): how far into the window its latest first token, and its latest
    end of a successful answer with at least two tokens, came, over the window's length (0 to 1)."""
    r = records[in_window(records, window)]
    ok = ~_failed(r)

    def ratio(t: pd.Series) -> float:
        t = t.astype(float)
        t = t[t.notna()]
        return 0.0 if t.empty else min(max((float(t.max()) - window[0]) / duration_s, 0.0), 1.0)

    return ratio(r["first_token_s"]), ratio(r["last_token_s"][ok & (r["chunks"].astype(float) >= 2)])


def failure_abort(records: pd.DataFrame, window: tuple[float, float], level: float, limit: float) -> str | None:
    """Where the harness's failure abort (records_manager.py: failures / records above ``limit``, armed
    once max(concurrency, 10) records are in) would have stopped the run: the window's answers in the order
    they ended; None if it never fires."""
    r = records[in_window(records, window)].sort_values("done_s", kind="stable")
    failed = _failed(r).to_numpy()
    if not len(failed):
        return None
    n = np.arange(1, len(failed) + 1)
    bad = np.cumsum(failed)
    hit = np.flatnonzero((n >= max(int(level), FAILURE_GRACE_FLOOR)) & (bad > limit * n))
    if not len(hit):
        return None
    i = int(hit[0])
    t = float(r["done_s"].iloc[i]) - window[0]
    return f"failed_request_threshold ({int(bad[i])} of {i + 1} requests failed by {t:.1f} s, above {limit:.0%})"


def warmup_failures(records: pd.DataFrame, window: tuple[float, float]) -> int:
    """Failed requests before the window: the harness aborts a run whose warm-up has one."""
    r = records[records["sent_s"].astype(float) < window[0]]
    return int(_failed(r).sum())


def agentx_submission(
    overflows: int,
    requests: int,
    rules: Any,
    cancelled: str | None,
    ignore_eos_sent: bool,
    corpus: str | None,
    coverage: tuple[float, float] | None = None,
    failure: str | None = None,
    warmup_failed: int = 0,
    api: str | None = None,
) -> dict[str, Any]:
    """AgentX's ``submission_valid`` of one point, as the harness decides it: false above
    ``max_context_overflow_rate`` of context overflows, on cancellation, after the failure abort or a failed
    warm-up, under the coverage ratio, or with an unsafe override (a setting away from the scenario's,
    ignore_eos not sent, token ids where the harness sends chat (``api``: the form on the wire, which
    ``agentx_prompt`` names), or a workload that is not the pinned corpus: ``corpus`` says why, None when it is)."""
    reasons: list[str] = []
    rate = overflows / requests if requests else 0.0
    limit = float(_get(rules, "max_context_overflow_rate"))
    if rate > limit:
        reasons.append(f"context_overflow_rate_exceeded ({overflows} of {requests} requests, above {limit:.0%})")
    if warmup_failed:
        reasons.append(f"trajectory_warmup_failed ({warmup_failed} warm-up requests failed: the harness aborts)")
    if failure:
        reasons.append(failure)
    if cancelled:
        reasons.append(f"run_cancelled ({cancelled})")
    need = float(_get(rules, "min_metric_coverage"))
    if coverage is not None and max(coverage) < need:
        reasons.append(
            f"insufficient_profile_metric_coverage (TTFT {coverage[0]:.1%}, ITL {coverage[1]:.1%} of the window; "
            f"needs {need:.0%})"
        )
    overridden = list(rules.overrides()) if hasattr(rules, "overrides") else []
    unsafe = list(overridden)
    if api is not None and prompt_override(api):
        unsafe.append(str(prompt_override(api)))
    if not ignore_eos_sent:
        unsafe.append("ignore_eos not sent (the server refuses vLLM's sampling fields)")
    if corpus:
        unsafe.append(corpus)
    if unsafe:
        reasons.append("unsafe_override (" + "; ".join(unsafe) + ")")
    out = {
        "agentx_submission_valid": int(not reasons),
        "agentx_submission_reasons": "; ".join(reasons),
        "agentx_scenario": str(_get(rules, "scenario")),
        "agentx_overrides": "; ".join(overridden),
        **({"agentx_prompt": prompt_form(api, _context_of(rules))} if api else {}),
        "context_overflow_count": overflows,
        "context_overflow_rate": rate,
    }
    if coverage is not None:
        out.update(agentx_ttft_coverage=coverage[0], agentx_itl_coverage=coverage[1])
    return out


def _context_of(rules: Any) -> str:
    """load.agentx.context (rules written before it existed: recorded)."""
    got = rules.get("context") if isinstance(rules, Mapping) else getattr(rules, "context", None)
    return str(got or "recorded")


def _summary_of(point: Mapping[str, Any]) -> Mapping[str, Any]:
    return point["summary"] if isinstance(point.get("summary"), Mapping) else point


def _is_valid(point: Mapping[str, Any]) -> bool:
    v = point.get("valid", _summary_of(point).get("valid", True))
    return bool(v)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


_Point = TypeVar("_Point", bound=Mapping[str, Any])


def pareto_frontier(points: Sequence[_Point], rate: str = Metric.P90_USER_RATE) -> list[_Point]:
    """Valid points not dominated in (total tokens/s/GPU, per-user rate), both
    maximised; returned in order of rising per-user rate. ``rate``: the P90 per-user rate, or
    ``Metric.E2E_INTERACTIVITY_P90`` (InferenceX's other axis). A point is a summary
    dict (``valid`` key honoured) or ``{"summary": ..., "valid": ...}``."""
    X, Y = Metric.THROUGHPUT_PER_GPU, rate
    cands = [p for p in points if _is_valid(p) and _finite(_summary_of(p).get(X)) and _finite(_summary_of(p).get(Y))]
    # sort by per-user rate desc, throughput desc: a point is on the frontier when its
    # throughput beats every point with a higher (or equal) per-user rate seen before it
    cands.sort(key=lambda p: (-_summary_of(p)[Y], -_summary_of(p)[X]))
    front: list[_Point] = []
    best_x = -math.inf
    for p in cands:
        if _summary_of(p)[X] > best_x:
            front.append(p)
            best_x = _summary_of(p)[X]
    return list(reversed(front))


def pick_headline(points: list[Mapping[str, Any]], slo: Any | None = None) -> dict[str, Any]:
    """The campaign's headline point by :data:`HEADLINE_RULE`; ``{}`` when no point is valid.

    ``slo`` defaults to the config's default SLO (tpot 50 ms -> 20 tokens/s)."""
    valid = [p for p in points if _is_valid(p) and _finite(_summary_of(p).get(Metric.THROUGHPUT_PER_GPU))]
    if not valid:
        return {}
    tpot = float(_get(slo, "tpot_s")) if slo is not None else 0.05
    need = 1.0 / tpot
    meets = [
        p
        for p in valid
        if _finite(_summary_of(p).get(Metric.P90_USER_RATE))
        and _summary_of(p)[Metric.P90_USER_RATE] >= need
        and _finite(_summary_of(p).get(Metric.REVENUE_PER_GPU_HOUR))
    ]
    if meets:
        best = max(meets, key=lambda p: _summary_of(p)[Metric.REVENUE_PER_GPU_HOUR])
        rule = f"highest revenue per GPU-hour among valid points with P90 per-user rate >= {need:g} tokens/s"
    else:
        best = max(valid, key=lambda p: _summary_of(p)[Metric.THROUGHPUT_PER_GPU])
        rule = f"no valid point reaches {need:g} tokens/s per user; highest tokens/s/GPU"
    return dict(best) | {"headline_rule": rule}


# ---------------------------------------------------------------------------
# power and cost (per GPU, per megawatt)
#
# Power per GPU = the board's rated power (TDP/TBP, GPU profile ``board_power_w``) x
# ``node_overhead_factor`` (CPUs, NICs, fans, PSU losses of the node, per GPU; 1.0 =
# GPU boards only). A rating, not a measurement: per-MW figures are upper-bound power,
# hence lower-bound efficiency. Cost per million tokens and revenue minus cost per
# GPU-hour (``cost_per_mtok``, ``margin_per_gpu_hour``) are in :func:`summarize`.


def watts_per_gpu(board_power_w: float | None, node_overhead_factor: float = 1.0) -> float:
    """Power drawn per GPU, node share included; NaN when the board power is unknown."""
    if board_power_w is None or not board_power_w > 0:
        return NAN
    if not node_overhead_factor >= 1.0:
        raise ValueError(f"node_overhead_factor={node_overhead_factor}: must be >= 1 (1 = GPU boards only)")
    return float(board_power_w) * float(node_overhead_factor)


def per_mw(value_per_gpu: float, board_power_w: float | None, node_overhead_factor: float = 1.0) -> float:
    """A per-GPU rate expressed per megawatt of node power (e.g. tokens/s/GPU -> tokens/s/MW)."""
    w = watts_per_gpu(board_power_w, node_overhead_factor)
    return float(value_per_gpu) / w * 1e6 if math.isfinite(w) and _finite(value_per_gpu) else NAN


def agents_per_mw(agents: float, gpus: int, board_power_w: float | None, node_overhead_factor: float = 1.0) -> float:
    """Concurrent agents served per megawatt (AA-AgentPerf's headline unit)."""
    if int(gpus) < 1:
        raise ValueError(f"gpus={gpus}: need at least 1 GPU (hardware.gpu_count)")
    return per_mw(float(agents) / int(gpus), board_power_w, node_overhead_factor)


def power_metrics(
    summary: Mapping[str, Any], board_power_w: float | None, node_overhead_factor: float = 1.0
) -> dict[str, float]:
    """Keys to add to a point's summary: watts per GPU, tokens/s per MW, and (restated
    for one place to read them) cost per million tokens and revenue minus cost per GPU-hour."""
    return _plain_keys(
        {
            "watts_per_gpu": watts_per_gpu(board_power_w, node_overhead_factor),
            "total_tokens_per_s_per_mw": per_mw(
                _num_or_nan(summary.get(Metric.THROUGHPUT_PER_GPU)), board_power_w, node_overhead_factor
            ),
            "output_tokens_per_s_per_mw": per_mw(
                _num_or_nan(summary.get(Metric.OUTPUT_THROUGHPUT_PER_GPU)), board_power_w, node_overhead_factor
            ),
            Metric.COST_PER_MTOK: _num_or_nan(summary.get(Metric.COST_PER_MTOK)),
            Metric.MARGIN_PER_GPU_HOUR: _num_or_nan(summary.get(Metric.MARGIN_PER_GPU_HOUR)),
        }
    )


def _num_or_nan(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return NAN
