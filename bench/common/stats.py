"""Per-request statistics, one function for every client's records (benchcamp's, and the peers'
exports turned into the same arrays), so two clients' figures differ only by what they measured."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd


def pct(v: Any, q: float) -> float:
    """numpy's linear percentile over the finite values (as benchcamp.metrics.percentile); NaN for none. A
    successful streamed answer whose one token decodes to no text has no content chunk, so no first-token stamp
    (neither client stamps a TTFT for it): it must not make the whole figure NaN."""
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if len(v) else float("nan")


def succeeded(records: pd.DataFrame) -> pd.DataFrame:
    """benchcamp's records that ended well (HTTP 200, no error)."""
    return records[records["error"].isna() & (records["status"] == 200)]


def record_arrays(ok: pd.DataFrame, end: str = "done_s") -> tuple[np.ndarray, ...]:
    """benchcamp's successful records -> what ``request_stats`` takes: ttft, tpot, e2e, prompt tokens, output
    tokens, send and end times (``end``: the record column that ends a request)."""
    e2e = (ok["last_token_s"] - ok["sent_s"]).to_numpy(float)
    ttft = (ok["first_token_s"] - ok["sent_s"]).to_numpy(float)
    out = ok["completion_tokens"].to_numpy(float)
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
    sent, last = ok["sent_s"].to_numpy(float), ok[end].to_numpy(float)
    return ttft, tpot, e2e, ok["prompt_tokens"].to_numpy(float), out, sent, last


def request_stats(ttft_s: Any, tpot_s: Any, e2e_s: Any, prompt: Any, out: Any, start_s: Any, end_s: Any,
                  n_sent: int) -> dict[str, float]:
    """TTFT / TPOT percentiles, E2E p50, mean prompt tokens and span-rule throughput (all tokens over the first
    start to the last end) of one client's successful requests."""
    ttft, tpot = np.asarray(ttft_s, float), np.asarray(tpot_s, float)
    tpot = tpot[np.isfinite(tpot)]
    span = float(np.nanmax(end_s) - np.nanmin(start_s)) if np.isfinite(end_s).any() else float("nan")
    res: dict[str, float] = {
        "sent": n_sent,
        "completed": int(len(ttft)),
        "prompt_tokens_mean": float(np.mean(prompt)) if len(prompt) else float("nan"),
        "output_tokens": float(np.sum(out)),
        "span_s": span,
        "output_tok_s_span": float(np.sum(out)) / span if span > 0 else float("nan"),
        "total_tok_s_span": float(np.sum(out) + np.sum(prompt)) / span if span > 0 else float("nan"),
        "e2e_p50_ms": pct(e2e_s, 50) * 1e3,
    }
    for q in (50, 90, 99):
        res[f"ttft_p{q}_ms"] = pct(ttft, q) * 1e3
        res[f"tpot_p{q}_ms"] = pct(tpot, q) * 1e3
    return res


# table rows (label, key) of request_stats' latency figures
LATENCY_ROWS = [
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TTFT p90 (ms)", "ttft_p90_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("TPOT p50 (ms) [AIPerf: ITL]", "tpot_p50_ms"),
    ("TPOT p90 (ms)", "tpot_p90_ms"),
    ("E2E p50 (ms)", "e2e_p50_ms"),
]


def window_summary(records: pd.DataFrame, window: tuple[float, float], gpus: int = 1) -> dict[str, Any]:
    """``benchcamp.metrics.summarize`` over ``window``: no prices, no SLO (what a campaign's headline says)."""
    from benchcamp.metrics import summarize

    prices = SimpleNamespace(name="none", cached_input=0.0, uncached_input=0.0, output=0.0)
    return dict(summarize(records, tuple(window), gpus, prices, 0.0, {"ttft_s": 1e9, "tpot_s": 1e9}))
