"""AgentX's span-based total tokens/s/GPU beside benchcamp's window figure: the formula on
hand-made records, the headline named everywhere, and like-with-like comparisons."""

from __future__ import annotations

import math

import pytest

from benchcamp.metrics import THROUGHPUT_HEADLINE, Metric, summarize
from benchcamp.pricing import PricingProfile
from benchcamp.results.records import empty_record, read_records, write_records
from benchcamp.results.table import headline_text, sweep_table
from benchcamp.verdicts.baselines import load_published
from benchcamp.verdicts.compare import compare, format_table

PRICES = PricingProfile("hand", cached_input=1.0, uncached_input=2.0, output=10.0)


def _rec(sent, done, prompt, cached, out, status=200, error=None):
    return empty_record(scheduled_s=sent, sent_s=sent, first_token_s=sent + 0.1, last_token_s=done, done_s=done,
                        chunks=out, itl_s=[0.01] * (out - 1), prompt_tokens=prompt, cached_tokens=cached,
                        completion_tokens=out, status=status, error=error)


def _summary(tmp_path, records, window=(10.0, 20.0), gpus=2):
    write_records(records, tmp_path / "r.parquet")
    return summarize(read_records(tmp_path / "r.parquet"), window=window, gpus=gpus, prices=PRICES,
                     usd_per_gpu_hour=3.0, slo={"ttft_s": 1.0, "tpot_s": 0.2})


def test_span_throughput_is_isl_plus_osl_over_first_start_to_last_end_per_gpu(tmp_path):
    recs = [
        _rec(5.0, 11.0, 1000, 800, 10),   # warm-up: sent before the window, in neither figure
        _rec(10.0, 12.0, 1000, 900, 20),
        _rec(14.0, 26.0, 3000, 0, 40),    # sent in the window, ends in the drain
        _rec(15.0, 15.5, 500, 0, 1, status=500, error="HTTP 500: boom"),  # failed: not counted
    ]
    s = _summary(tmp_path, recs)
    # window rule: (1000 + 20 + 3000 + 40) over W = 10 s and 2 GPUs
    assert s[Metric.THROUGHPUT_PER_GPU] == pytest.approx(4060 / 10 / 2)
    # span rule: the same tokens (ISL incl. cached + OSL) over last end 26 - first start 10 = 16 s
    assert s["span_s"] == pytest.approx(16.0)
    assert s[Metric.THROUGHPUT_PER_GPU_SPAN] == pytest.approx(4060 / 16 / 2)
    assert s["output_tokens_per_s_per_gpu_span"] == pytest.approx(60 / 16 / 2)
    assert s["throughput_headline"] == THROUGHPUT_HEADLINE == "window"
    empty = _summary(tmp_path, [_rec(1.0, 2.0, 10, 0, 2)])
    assert empty[Metric.THROUGHPUT_PER_GPU_SPAN] == 0.0 and math.isnan(empty["span_s"])


def test_terminal_tables_name_the_headline_and_show_the_span_figure(tmp_path):
    s = _summary(tmp_path, [_rec(10.0, 12.0, 1000, 900, 20), _rec(14.0, 26.0, 3000, 0, 40)])
    line = headline_text(dict(s, point="c4"), "simulated", "hand")
    assert "203 tokens/s/GPU (window; AgentX span 127)" in line

    class P:
        label, valid, summary = "c4", True, s

    assert "span tok/s/GPU" in sweep_table([P()])


def test_a_span_baseline_is_compared_with_the_span_figure_and_a_window_one_with_the_window():
    cur = {"summary": {Metric.THROUGHPUT_PER_GPU: 1000.0, Metric.THROUGHPUT_PER_GPU_SPAN: 800.0},
           "key": {"workload_digest": "d", "model": "m", "gpu": "h200", "gpu_count": 8, "engine_kind": "vllm"}}
    key = dict(cur["key"])
    span = {"name": "agentx", "kind": "published", "key": key, "throughput_definition": "span",
            "summary": {Metric.THROUGHPUT_PER_GPU: 800.0}}
    window = {"name": "ours", "kind": "published", "key": key, "summary": {Metric.THROUGHPUT_PER_GPU: 800.0}}
    vs = {v.baseline: v for v in compare(cur, [span, window]) if v.metric == Metric.THROUGHPUT_PER_GPU}
    assert (vs["agentx"].current, vs["agentx"].verdict, vs["agentx"].definition) == (800.0, "unchanged", "span")
    assert (vs["ours"].current, vs["ours"].definition) == (1000.0, "window")
    assert "total_tokens_per_s_per_gpu (span)" in format_table(vs.values())


def test_the_published_agentx_baseline_names_the_span_definition():
    b = load_published("agentx-vllm-deepseek")
    assert b["throughput_definition"] == "span" == b["meta"]["throughput_definition"]
