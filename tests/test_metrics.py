"""benchcamp.metrics against hand-computed values on small synthetic records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchcamp.config import Load, Slo
from benchcamp.metrics import (
    HEADLINE,
    PRICE_BASIS_PARTLY,
    PRICE_BASIS_SPLIT,
    PRICE_BASIS_UNCACHED,
    pareto_frontier,
    percentile,
    pick_headline,
    request_samples,
    server_hit_rate,
    summarize,
    validity,
)
from benchcamp.pricing import PricingProfile
from benchcamp.results.records import empty_record, read_records, write_records

PRICES = PricingProfile("hand", cached_input=1.0, uncached_input=2.0, output=10.0)
SLO = Slo(ttft_s=0.6, tpot_s=0.15)


def ok_request(sent, ttft, tpot, out, prompt, cached, sched=None, **kw):
    first = sent + ttft
    last = first + tpot * (out - 1)
    return empty_record(scheduled_s=sent if sched is None else sched, sent_s=sent, first_token_s=first,
                        last_token_s=last, done_s=last, chunks=out, itl_s=[tpot] * (out - 1),
                        prompt_tokens=prompt, cached_tokens=cached, completion_tokens=out, status=200, **kw)


def failed(sent, status, error):
    return empty_record(scheduled_s=sent, sent_s=sent, done_s=sent + 1, status=status, error=error)


def frame(rows):
    return pd.DataFrame(rows)


@pytest.fixture
def records(tmp_path):
    rows = [
        ok_request(10.001, 0.5, 0.1, 11, 1000, 800, sched=10.0),   # A
        ok_request(12.0, 0.2, 0.2, 6, 500, 0),                      # B
        ok_request(15.0, 1.0, 0.05, 5, 2000, 1500, sched=14.99),    # C
        failed(16.5, 500, "HTTP 500: boom"),                         # D
        failed(19.0, 0, "timeout: no data after 300 s"),             # E
        ok_request(9.9, 0.1, 0.01, 1000, 10**6, 0),                  # warm-up: sent before t0
        ok_request(20.0, 0.1, 0.01, 1000, 10**6, 0),                 # sent at t1: outside [t0, t1)
    ]
    # through the real Parquet writer/reader, as the campaign reads them
    write_records(rows, tmp_path / "records.parquet")
    return read_records(tmp_path / "records.parquet")


def summary_of(records, **kw):
    args = dict(window=(10.0, 20.0), gpus=2, prices=PRICES, usd_per_gpu_hour=3.0, slo=SLO)
    args.update(kw)
    return summarize(records, **args)


def test_window_and_counts(records):
    s = summary_of(records)
    assert s["requests"] == 5 and s["requests_ok"] == 3 and s["requests_failed"] == 2
    assert s["window_s"] == 10.0 and s["gpus"] == 2
    assert s["error_rate"] == pytest.approx(0.4)
    assert s["errors.http_500"] == 1 and s["errors.timeout"] == 1


def test_throughput_per_gpu(records):
    s = summary_of(records)
    # cached 800+0+1500, uncached 200+500+500, output 11+6+5 over W=10 s and G=2
    assert s["cached_input_tokens_per_s_per_gpu"] == pytest.approx(2300 / 20)
    assert s["uncached_input_tokens_per_s_per_gpu"] == pytest.approx(1200 / 20)
    assert s["output_tokens_per_s_per_gpu"] == pytest.approx(22 / 20)
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(3522 / 20)
    assert s["total_tokens"] == 3522


def test_latencies_and_linear_percentiles(records):
    s = summary_of(records)
    # ttft [0.5, 0.2, 1.0]: sorted [.2, .5, 1.0]; linear p90 at rank 1.8 -> .5 + .8 * .5
    assert s["ttft_p50_s"] == pytest.approx(0.5)
    assert s["ttft_p90_s"] == pytest.approx(0.9)
    assert s["ttft_p99_s"] == pytest.approx(0.99)
    # tpot = (e2e - ttft) / (out - 1): [0.1, 0.2, 0.05]
    assert s["tpot_p50_s"] == pytest.approx(0.1)
    assert s["tpot_p90_s"] == pytest.approx(0.18)
    # e2e = ttft + tpot * (out - 1): [1.5, 1.2, 1.2]
    assert s["e2e_p50_s"] == pytest.approx(1.2)
    assert s["e2e_p99_s"] == pytest.approx(1.2 + 0.98 * 0.3)
    # itl pooled: 10 x .1, 5 x .2, 4 x .05 (failed requests add nothing)
    assert s["itl_p50_s"] == pytest.approx(0.1)
    assert s["itl_p90_s"] == pytest.approx(0.2)
    assert s["itl_mean_s"] == pytest.approx((10 * 0.1 + 5 * 0.2 + 4 * 0.05) / 19)


def test_p90_user_rate_is_the_rate_90_percent_meet():
    # 10 requests with per-user rates 10..100 tokens/s: 9 of 10 meet or exceed 1/P90(tpot)
    rows = [ok_request(float(i), 0.1, 1.0 / u, 101, 100, 0) for i, u in enumerate(range(10, 101, 10))]
    s = summarize(frame(rows), (0.0, 100.0), 1, PRICES, 1.0, SLO)
    tpots = 1.0 / np.arange(10, 101, 10)
    assert s["p90_user_tokens_per_s"] == pytest.approx(1.0 / np.percentile(tpots, 90))
    rates = np.arange(10, 101, 10)
    assert (rates >= s["p90_user_tokens_per_s"] - 1e-9).mean() == pytest.approx(0.9)


def test_revenue_cost_margin_hand_computed(records):
    s = summary_of(records)
    # (2300 * $1 + 1200 * $2 + 22 * $10) / 1e6 = $0.00492 in 10 s on 2 GPUs
    assert s["revenue_usd"] == pytest.approx(0.00492)
    assert s["revenue_per_gpu_hour"] == pytest.approx(3600 / 20 * 0.00492)  # 0.8856
    assert s["cost_per_gpu_hour"] == 3.0
    assert s["cost_per_mtok"] == pytest.approx(3.0 / (176.1 * 3600) * 1e6)
    assert s["margin_per_gpu_hour"] == pytest.approx(0.8856 - 3.0)
    assert s["blended_usd_per_mtok"] == pytest.approx(4920 / 3522)


def test_goodput(records):
    s = summary_of(records)  # SLO ttft <= .6, tpot <= .15: only A (ttft .5, tpot .1, 11 tokens)
    assert s["goodput_requests_per_s"] == pytest.approx(0.1)
    assert s["goodput_output_tokens_per_s_per_gpu"] == pytest.approx(11 / 20)
    assert s["goodput_fraction"] == pytest.approx(0.2)


def test_cache_hit_rates_and_lag(records):
    s = summary_of(records, server_delta={"vllm:prefix_cache_hits_total": 30.0,
                                          "vllm:prefix_cache_queries_total": 40.0},
                   theoretical_hit_rate=0.7)
    assert s["cache_hit_rate_client"] == pytest.approx(2300 / 3500)
    assert s["cache_hit_rate_server"] == pytest.approx(0.75)
    assert s["cache_hit_rate_theoretical"] == 0.7
    # lags (ms): 1, 0, 10, 0, 0 -> p99 at rank 3.96 = 1 + .96 * 9
    assert s["client_lag_p50_ms"] == pytest.approx(0.0, abs=1e-6)
    assert s["client_lag_p99_ms"] == pytest.approx(9.64, abs=1e-6)
    assert math.isnan(summary_of(records)["cache_hit_rate_server"])


def test_server_hit_rate_label_sum_and_missing():
    d = {'vllm:prefix_cache_hits_total{engine="0"}': 5, 'vllm:prefix_cache_hits_total{engine="1"}': 5,
         "vllm:prefix_cache_queries": 40}
    assert server_hit_rate(d) == pytest.approx(0.25)
    assert math.isnan(server_hit_rate({"vllm:prefix_cache_queries_total": 0, "vllm:prefix_cache_hits_total": 0}))


def test_seed_check_954k_tokens_at_blended_price_is_38_96():
    blended = PricingProfile("blended", 0.01134, 0.01134, 0.01134)
    # one second, one GPU, 954,000 tokens (any mix: the price is blended)
    rec = ok_request(0.5, 0.1, 0.001, 4_000, 950_000, 900_000)
    s = summarize(frame([rec]), (0.0, 1.0), 1, blended, 2.0, SLO)
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(954_000)
    # 954000 * 3600 * 0.01134 / 1e6 = 38.946: the seed's $38.96 up to the rounding of its inputs
    assert s["revenue_per_gpu_hour"] == pytest.approx(38.96, abs=0.015)
    assert round(38.96 / (954_000 * 3600 / 1e6), 5) == 0.01134


def test_failed_requests_excluded_from_latency_and_tokens():
    rows = [ok_request(1.0, 0.5, 0.1, 11, 100, 0),
            empty_record(scheduled_s=2.0, sent_s=2.0, first_token_s=2.01, last_token_s=9.0, chunks=3,
                         itl_s=[5.0, 1.99], prompt_tokens=100, completion_tokens=3, status=200,
                         error="truncated stream")]
    s = summarize(frame(rows), (0.0, 10.0), 1, PRICES, 1.0, SLO)
    assert s["error_rate"] == 0.5 and s["errors.truncated_stream"] == 1
    assert s["ttft_p99_s"] == pytest.approx(0.5) and s["itl_p99_s"] == pytest.approx(0.1)
    assert s["total_tokens"] == 111


def test_empty_window_and_all_failed_give_nan_not_exceptions(records):
    empty = summarize(records.iloc[0:0], (0.0, 5.0), 1, PRICES, 1.0, SLO)
    assert empty["requests"] == 0 and math.isnan(empty["error_rate"]) and math.isnan(empty["ttft_p90_s"])
    assert empty["total_tokens_per_s_per_gpu"] == 0.0 and math.isnan(empty["p90_user_tokens_per_s"])
    assert math.isnan(empty["cost_per_mtok"])
    bad = summarize(frame([failed(1.0, 500, "x"), failed(2.0, 503, None)]), (0.0, 5.0), 1, PRICES, 1.0, SLO)
    assert bad["error_rate"] == 1.0 and bad["errors.http_503"] == 1
    assert math.isnan(bad["ttft_p50_s"]) and math.isnan(bad["cache_hit_rate_client"])
    assert bad["revenue_per_gpu_hour"] == 0.0


def test_bad_inputs_name_the_field(records):
    with pytest.raises(ValueError, match="window"):
        summary_of(records, window=(5.0, 5.0))
    with pytest.raises(ValueError, match="gpus"):
        summary_of(records, gpus=0)
    with pytest.raises(ValueError, match="missing columns"):
        summary_of(records.drop(columns=["sent_s"]))


def test_validity_reasons_carry_numbers(records):
    s = summary_of(records)
    load = Load(min_requests=10, max_error_rate=0.05, max_sched_lag_p99_ms=5, max_client_cpu=0.9)
    v = validity(s, {"cpu_max": 0.97}, load)
    assert not v["valid"]
    text = " | ".join(v["reasons"])
    assert "only 5 requests" in text and "40.00%" in text and "9.6 ms" in text and "97%" in text
    ok = validity(s, {"cpu_max": 0.2}, Load(min_requests=5, max_error_rate=0.5, max_sched_lag_p99_ms=50))
    assert ok == {"valid": True, "reasons": []}
    s2 = summary_of(records, validity=v)
    assert s2["valid"] == 0 and "only 5 requests" in s2["invalid_reasons"]


def test_pareto_frontier_valid_points_only():
    pts = [
        {"point": "a", "total_tokens_per_s_per_gpu": 100, "p90_user_tokens_per_s": 90, "valid": True},
        {"point": "b", "total_tokens_per_s_per_gpu": 300, "p90_user_tokens_per_s": 50, "valid": True},
        {"point": "c", "total_tokens_per_s_per_gpu": 250, "p90_user_tokens_per_s": 40, "valid": True},  # dominated by b
        {"point": "d", "total_tokens_per_s_per_gpu": 900, "p90_user_tokens_per_s": 95, "valid": False},
        {"point": "e", "total_tokens_per_s_per_gpu": 500, "p90_user_tokens_per_s": 20, "valid": True},
        {"point": "f", "total_tokens_per_s_per_gpu": float("nan"), "p90_user_tokens_per_s": 99, "valid": True},
    ]
    assert [p["point"] for p in pareto_frontier(pts)] == ["e", "b", "a"]
    wrapped = [{"summary": p, "valid": p["valid"]} for p in pts]
    assert [p["summary"]["point"] for p in pareto_frontier(wrapped)] == ["e", "b", "a"]


def test_pick_headline_rule():
    pts = [
        {"point": "a", "total_tokens_per_s_per_gpu": 100, "p90_user_tokens_per_s": 90, "revenue_per_gpu_hour": 5, "valid": True},
        {"point": "b", "total_tokens_per_s_per_gpu": 300, "p90_user_tokens_per_s": 30, "revenue_per_gpu_hour": 9, "valid": True},
        {"point": "c", "total_tokens_per_s_per_gpu": 600, "p90_user_tokens_per_s": 10, "revenue_per_gpu_hour": 20, "valid": True},
        {"point": "d", "total_tokens_per_s_per_gpu": 900, "p90_user_tokens_per_s": 95, "revenue_per_gpu_hour": 99, "valid": False},
    ]
    assert pick_headline(pts)["point"] == "b"  # default SLO 20 tokens/s: c misses it, d is invalid
    assert pick_headline(pts, Slo(tpot_s=0.01))["point"] == "c"  # 100 tokens/s: nobody meets -> top throughput
    assert pick_headline([pts[3]]) == {}


def test_headline_directions_and_request_samples(records):
    assert {k: m.direction for k, m in HEADLINE.items()} == {
        "total_tokens_per_s_per_gpu": "higher", "p90_user_tokens_per_s": "higher", "ttft_p90_s": "lower",
        "revenue_per_gpu_hour": "higher", "error_rate": "lower"}
    smp = request_samples(records, (10.0, 20.0), PRICES)
    assert len(smp) == 5 and smp["ok"].sum() == 3
    assert smp["revenue"].sum() == pytest.approx(0.00492)
    assert math.isnan(percentile([], 90))


def test_requests_cut_off_by_the_client_are_incomplete_not_errors(records):
    # The fixture's window holds 3 ok requests and 2 server/transport failures.
    rows = records.to_dict("records") + [failed(18.0, 0, "drain-timeout"), failed(18.5, 0, "interrupted")]
    s = summary_of(frame(rows))
    assert s["requests"] == 7 and s["requests_incomplete"] == 2
    assert s["incomplete_rate"] == pytest.approx(2 / 7)
    assert s["error_rate"] == pytest.approx(2 / 5)          # the 2 real failures of the 5 answered
    assert s["errors.drain_timeout"] == 1 and s["errors.interrupted"] == 1
    load = Load(min_requests=1, max_error_rate=1.0, max_incomplete_rate=0.2)
    reasons = validity(s, {"cpu_max": 0.1}, load)["reasons"]
    assert len(reasons) == 1 and "28.57% of the window's requests were still running" in reasons[0]
    assert validity(s, {"cpu_max": 0.1}, Load(min_requests=1, max_error_rate=1.0, max_incomplete_rate=0.5))["valid"]


def test_cached_tokens_the_server_does_not_report_are_unknown_and_priced_as_uncached(tmp_path):
    # -1: the load generator's record of a usage without prompt_tokens_details.cached_tokens
    rows = [ok_request(10.0, 0.5, 0.1, 11, 1000, -1), ok_request(12.0, 0.2, 0.2, 6, 500, -1),
            failed(13.0, 400, 'HTTP 400: Unrecognized request argument supplied: min_tokens')]
    write_records(rows, tmp_path / "r.parquet")
    s = summary_of(read_records(tmp_path / "r.parquet"))
    assert s["cache_hit_rate_client"] is None and s["cached_tokens_reported"] == 0
    assert s["revenue_price_basis"] == PRICE_BASIS_UNCACHED
    assert s["cached_input_tokens"] == 0 and s["uncached_input_tokens"] == 1500
    assert s["revenue_usd"] == pytest.approx((1500 * 2.0 + 17 * 10.0) / 1e6)
    assert s["error_example"] == "HTTP 400: Unrecognized request argument supplied: min_tokens"
    reasons = validity(s, None, Load(min_requests=1))["reasons"]
    assert reasons == [("error rate 33.33% is above load.max_error_rate=1.00% (commonest error: HTTP 400: "
                        "Unrecognized request argument supplied: min_tokens)")]


def test_cache_hit_rate_over_the_requests_that_report_cached_tokens(records):
    assert summary_of(records)["revenue_price_basis"] == PRICE_BASIS_SPLIT
    mixed = pd.concat([records, frame([ok_request(11.0, 0.1, 0.1, 3, 4000, -1)])], ignore_index=True)
    s = summary_of(mixed)
    assert s["cache_hit_rate_client"] == pytest.approx(2300 / 3500)      # the unknown request left out
    assert s["cached_tokens_reported"] == pytest.approx(3 / 4)
    assert s["revenue_price_basis"] == PRICE_BASIS_PARTLY and s["uncached_input_tokens"] == 1200 + 4000


def test_summary_table_and_headline_say_unknown_and_the_price_basis():
    from types import SimpleNamespace

    from benchcamp.results.table import headline_text, sweep_table

    unknown = {"cache_hit_rate_client": None, "cached_tokens_reported": 0.0, "revenue_per_gpu_hour": 2.0,
               "revenue_price_basis": PRICE_BASIS_UNCACHED, "total_tokens_per_s_per_gpu": 10.0}
    nothing = {"cache_hit_rate_client": None, "revenue_price_basis": PRICE_BASIS_SPLIT}   # no request answered
    table = sweep_table([SimpleNamespace(label="c1", valid=True, summary=unknown),
                         SimpleNamespace(label="c2", valid=False, summary=nothing)]).splitlines()
    col = table[0].index("cache hit")
    assert table[2][col:col + 9].strip() == "unknown" and table[3][col:col + 9].strip() == "-"
    assert headline_text(unknown | {"point": "c1"}, "external", "deepseek").endswith(
        f"(deepseek; {PRICE_BASIS_UNCACHED})")
    assert headline_text({"point": "c1", "revenue_price_basis": PRICE_BASIS_SPLIT}, "vllm", "deepseek").endswith(
        "(deepseek)")


def test_steadiness_halves_hand_computed():
    """Window [0, 10), 1 GPU: first half 2 x (1000 prompt, 800 cached, 100 out), second half 2 x (1000, 900, 100)
    -> 440 and 440 tokens/s (drift 0), cache hit 0.80 then 0.90 (drift 0.10): steady on tokens, not on hit."""
    from benchcamp.metrics import replay_note, steadiness

    rows = [ok_request(t, 0.1, 0.01, 100, 1000, c) for t, c in ((1, 800), (3, 800), (6, 900), (8, 900))]
    st = steadiness(frame(rows), (0.0, 10.0), 1, 0.10, 0.02)
    assert st["steady_half1_tokens_per_s_per_gpu"] == st["steady_half2_tokens_per_s_per_gpu"] == 2 * 1100 / 5
    assert st["steady_throughput_drift"] == 0
    assert (st["steady_half1_cache_hit"], st["steady_half2_cache_hit"]) == (0.8, 0.9)
    assert st["steady"] == 0 and "cache hit of the window's halves differs by 10.0% (80.0% then 90.0%)" in (
        st["steady_reasons"])
    loose = steadiness(frame(rows), (0.0, 10.0), 1, 0.10, 0.2)
    assert loose["steady"] == 1 and loose["steady_reasons"] == ""
    # one half empty: its tokens/s is 0 (drift 200%), its hit unknown (None, and no hit check)
    empty = steadiness(frame(rows[:2]), (0.0, 10.0), 1, 0.10, 0.02)
    assert empty["steady_throughput_drift"] == 2.0 and empty["steady_half2_cache_hit"] is None
    assert empty["steady"] == 0 and "cache hit" not in empty["steady_reasons"]
    assert replay_note(352, "closed", 256, True).startswith("level 352 exceeds the workload's 256 distinct sessions")
    assert replay_note(64, "closed", 256, True) == "" and replay_note(352, "open", 256, True) == ""


def test_both_interactivity_definitions_on_records_whose_values_are_known():
    """Three answers, TTFT / TPOT / output tokens chosen so both per-user rates are known by hand:
    A 0.5 s / 0.1 s / 11 -> e2e 1.5 s, 0.13636 s per token; B 0.2 / 0.2 / 6 -> 1.2 s, 0.2;
    C 1.0 / 0.05 / 5 -> 1.2 s, 0.24. P90 by numpy's linear rule sits at rank 1.8 of 0..2:
    TPOT sorted 0.05, 0.1, 0.2 -> 0.1 + 0.8 * 0.1 = 0.18 -> 1 / 0.18 = 5.5556 tokens/s (P90 per-user rate);
    e2e / out sorted 0.13636, 0.2, 0.24 -> 0.2 + 0.8 * 0.04 = 0.232 -> 1 / 0.232 = 4.3103 tokens/s
    (E2E-normalized). The P10 of the inverted ratios (p(1/x), the convention AIPerf rejects) would be
    4.3333: the test tells the two apart. A failed request counts in neither."""
    rows = frame(
        [
            ok_request(1.0, 0.5, 0.1, 11, 100, 0),
            ok_request(2.0, 0.2, 0.2, 6, 100, 0),
            ok_request(3.0, 1.0, 0.05, 5, 100, 0),
            failed(4.0, 500, "HTTP 500: boom"),
        ]
    )
    s = summarize(rows, (0.0, 10.0), 1, PRICES, 2.0, SLO)
    assert s["p90_user_tokens_per_s"] == pytest.approx(1 / 0.18)
    assert s["e2e_normalized_interactivity_p90"] == pytest.approx(1 / 0.232)
    assert s["e2e_normalized_interactivity_p90"] != pytest.approx(4.3333, abs=1e-3)
    # P75: rank 1.5 -> 0.2 + 0.5 * 0.04 = 0.22
    assert s["e2e_normalized_interactivity_p75"] == pytest.approx(1 / 0.22)


def test_e2e_normalized_interactivity_of_an_idle_point_is_nan():
    s = summarize(frame([failed(1.0, 500, "HTTP 500: boom")]), (0.0, 10.0), 1, PRICES, 2.0, SLO)
    assert math.isnan(s["e2e_normalized_interactivity_p90"])
