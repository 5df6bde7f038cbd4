"""The CPU KV tier in a point's summary and in the report's cache bars (records from a real writer)."""

from __future__ import annotations

from benchcamp.config import Slo
from benchcamp.metrics import summarize
from benchcamp.pricing import PricingProfile
from benchcamp.report import plots
from benchcamp.results.records import empty_record, read_records, write_records

PRICES = PricingProfile("hand", cached_input=1.0, uncached_input=2.0, output=10.0)


def _rec(sent: float, prompt: int, cached: int, cpu: int | None):
    return empty_record(scheduled_s=sent, sent_s=sent, first_token_s=sent + 0.1, last_token_s=sent + 0.2,
                        done_s=sent + 0.2, chunks=2, itl_s=[0.1], prompt_tokens=prompt, cached_tokens=cached,
                        cpu_cached_tokens=cpu, completion_tokens=2, status=200)


def _summary(tmp_path, rows):
    write_records(rows, tmp_path / "r.parquet")
    return summarize(read_records(tmp_path / "r.parquet"), (0.0, 10.0), 1, PRICES, 1.0, Slo(ttft_s=1, tpot_s=1))


def test_summary_splits_the_client_hit_rate_by_tier(tmp_path):
    s = _summary(tmp_path, [_rec(1.0, 1000, 800, 300), _rec(2.0, 1000, 200, 0)])
    assert s["cache_hit_rate_client"] == 0.5 and s["cache_hit_rate_cpu_tier"] == 300 / 2000
    unreported = _summary(tmp_path, [_rec(1.0, 1000, 800, None)])
    assert "cache_hit_rate_cpu_tier" not in unreported and unreported["cache_hit_rate_client"] == 0.8


def test_cache_bars_hatch_the_cpu_tier_share_of_the_client_bar():
    point = {"point": "c8", "cache_hit_rate_theoretical": 0.6, "cache_hit_rate_client": 0.5,
             "cache_hit_rate_server": 0.35, "cache_hit_rate_cpu_tier": 0.15}
    fig = plots.cache_hit_rates([point])
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == 1
    assert abs(hatched[0].get_height() - 0.15) < 1e-12 and abs(hatched[0].get_y() - 0.35) < 1e-12
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "of which CPU KV tier" in legend
    plain = plots.cache_hit_rates([{k: v for k, v in point.items() if k != "cache_hit_rate_cpu_tier"}])
    assert not any(p.get_hatch() for p in plain.axes[0].patches)
