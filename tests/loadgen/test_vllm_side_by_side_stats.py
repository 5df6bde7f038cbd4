"""bench/vllm_bench_side_by_side.py: vLLM's formulas over records, and the request set both clients send.
No timing: hand-made records with known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def sbs():
    from bench import vllm_bench_side_by_side

    return vllm_bench_side_by_side


def _rec(sent, first, last, done, itl, out, prompt=100, status=200, error=None):
    return {
        "session_id": "q0", "turn": 0, "scheduled_s": sent, "sent_s": sent, "first_token_s": first,
        "last_token_s": last, "done_s": done, "itl_s": itl, "chunks": len(itl) + 1, "prompt_tokens": prompt,
        "cached_tokens": 0, "completion_tokens": out, "status": status, "error": error,
    }  # fmt: skip


def test_vllm_definitions_by_hand(sbs):
    df = pd.DataFrame([
        _rec(0.0, 0.5, 1.5, 1.6, [0.25, 0.25, 0.5], 5),  # tpot (1.5 - 0.5) / 4 = 0.25
        _rec(0.1, 0.3, 0.7, 2.1, [0.4], 2),  # tpot 0.4
        _rec(0.2, 0.4, 0.4, 0.5, [], 1),  # one token: no TPOT, TTFT 0.2
        _rec(0.3, math.nan, math.nan, 0.9, [], -1, prompt=-1, status=500, error="http 500"),  # failed: ignored
    ])  # fmt: skip
    s = sbs.vllm_definitions(df)
    assert s["completed"] == 3 and s["failed"] == 1
    assert s["duration_s"] == pytest.approx(2.1)  # first send to the last request done
    assert s["mean_ttft_ms"] == pytest.approx((500 + 200 + 200) / 3)
    assert s["median_ttft_ms"] == pytest.approx(200)
    assert s["mean_tpot_ms"] == pytest.approx(325)  # requests with out > 1 only
    assert s["p99_tpot_ms"] == pytest.approx(np.percentile([250, 400], 99))
    assert s["mean_itl_ms"] == pytest.approx(np.mean([250, 250, 500, 400]))  # pooled gaps
    assert s["median_e2el_ms"] == pytest.approx(600)
    assert s["total_token_throughput"] == pytest.approx((300 + 8) / 2.1)
    assert s["output_throughput"] == pytest.approx(8 / 2.1)
    assert s["request_throughput"] == pytest.approx(3 / 2.1)
    assert sbs.vllm_definitions(df, duration_s=4.0)["output_throughput"] == pytest.approx(2.0)


def test_vllm_result_round_trip(sbs):
    """vllm bench's per-request lists -> records -> its own formulas give its own figures back."""
    doc = {
        "start_times": [100.0, 100.1, 100.5], "ttfts": [0.2, 0.3, 0.1], "latencies": [1.2, 0.9, 0.5],
        "itls": [[0.5, 0.5], [0.3, 0.3], [0.2, 0.2]], "input_lens": [10, 12, 11], "output_lens": [3, 3, 3],
        "errors": ["", "", ""],
    }  # fmt: skip
    rec = sbs.records_from_vllm(doc)
    s = sbs.vllm_definitions(rec, duration_s=1.25)
    assert s["mean_ttft_ms"] == pytest.approx(200)
    assert s["mean_tpot_ms"] == pytest.approx(np.mean([0.5, 0.3, 0.2]) * 1e3)
    assert s["total_token_throughput"] == pytest.approx((33 + 9) / 1.25)
    # one wave (every send before the first end): benchcamp's window rule has nothing to measure
    with pytest.raises(ValueError, match="N >= 2C"):
        sbs.headline_window(rec)


def test_headline_window_is_the_busy_part(sbs):
    # two slots, lockstep waves of 1 s: sends at 0, 0, 1, 1, 2, 2; ends at 1, 1, 2, 2, 3, 3.1
    sends = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    ends = [1.0, 1.0, 2.0, 2.0, 3.0, 3.1]
    df = pd.DataFrame([_rec(s, s + 0.1, e, e, [0.1], 2) for s, e in zip(sends, ends)])
    assert sbs.headline_window(df) == (1.0, 3.0)
    s = sbs.benchcamp_definitions(df)
    assert s["requests"] == 4 and s["window_s"] == pytest.approx(2.0)  # waves 2 and 3, over 2 s
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(4 * 102 / 2.0)


def test_request_set_is_what_benchcamp_sends(sbs):
    """The text vllm bench gets for request i is byte for byte the prompt of benchcamp's body for it."""
    from benchcamp.loadgen.body import request_body

    wl, texts = sbs.request_set(6, 3, 100, 16, salt=5)
    assert [len(s.requests) for s in wl.sessions] == [2, 2, 2]
    for s in wl.sessions:
        for r in s.requests:
            i = sbs.request_index(s.id, r.turn, 3)
            body = json.loads(
                request_body("completions", "m", r.blocks, r.prompt_len, r.output_len, wl.block_size,
                             wl.vocab_size, 5, prompt="text")
            )  # fmt: skip
            assert body["prompt"] == texts[i] and len(texts[i].split()) == 100
            assert body["max_tokens"] == body["min_tokens"] == 16 and body["ignore_eos"] is True
    assert len(set(texts)) == 6  # no two requests share a prompt
