"""Pricing profiles: the shipped data, lookups, config overrides, the seed check."""

from __future__ import annotations

import pytest

from benchcamp.config import ConfigError, load_config
from benchcamp.pricing import PricingProfile, list_profiles, load_profile, prices_for


def test_v3_era_prices_and_offpeak_discounts():
    std, off = load_profile("deepseek-v3-standard"), load_profile("deepseek-v3-offpeak")
    assert (std.cached_input, std.uncached_input, std.output) == (0.07, 0.27, 1.10)
    # V3 off-peak was 50% off every rate, 16:30-00:30 UTC
    for f in ("cached_input", "uncached_input", "output"):
        assert getattr(off, f) == pytest.approx(getattr(std, f) / 2)
    assert off.hours_utc == "16:30-00:30"
    # R1 off-peak was 75% off (to the cent: $2.19 / 4 = $0.5475 was listed as $0.55)
    r1, r1off = load_profile("deepseek-r1-standard"), load_profile("deepseek-r1-offpeak")
    for f in ("cached_input", "uncached_input", "output"):
        assert getattr(r1off, f) == pytest.approx(getattr(r1, f) / 4, abs=0.005)


def test_every_profile_has_source_date_and_verification():
    names = list_profiles()
    assert {"deepseek-v3-standard", "deepseek-v3-offpeak", "deepseek-v3.2-list"} <= set(names)
    for name in names:
        p = load_profile(name)
        assert p.source and p.date, name
        assert p.verification in ("official", "secondary", "unverified"), name
        assert min(p.cached_input, p.uncached_input, p.output) >= 0
        assert p.cached_input <= p.uncached_input, f"{name}: a cache hit should not cost more than a miss"
    later = load_profile("deepseek-v3.2-list")
    assert (later.cached_input, later.uncached_input, later.output) == (0.028, 0.28, 0.42)


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ConfigError) as e:
        load_profile("deepseek-v9")
    msg = str(e.value)
    assert "pricing.profile" in msg and "deepseek-v9" in msg and "deepseek-v3-offpeak" in msg


def test_config_override_replaces_prices_and_renames():
    cfg = load_config(None, ["pricing.usd_per_mtok={cached_input: 0.01, uncached_input: 0.2, output: 0.9}"])
    p = prices_for(cfg.pricing)
    assert (p.cached_input, p.uncached_input, p.output) == (0.01, 0.2, 0.9)
    assert p.name == "deepseek-v3-offpeak+override"
    assert prices_for(load_config(None).pricing) == load_profile("deepseek-v3-offpeak")
    with pytest.raises(ConfigError, match="pricing.profile"):
        prices_for(load_config(None, ["pricing.profile=nope"]).pricing)


def test_revenue_and_blended_price():
    p = PricingProfile("x", 0.035, 0.135, 0.55)
    # 1M cached + 100K uncached + 10K output tokens
    assert p.revenue_usd(1e6, 1e5, 1e4) == pytest.approx(0.035 + 0.0135 + 0.0055)
    assert p.blended_usd_per_mtok(1e6, 1e5, 1e4) == pytest.approx(0.054 / 1.11)
    # the seed: $38.96 per GPU-hour at 954K tokens/s/GPU is a blended $0.01134 per million
    per_gpu_hour_mtok = 954_000 * 3600 / 1e6
    assert 38.96 / per_gpu_hour_mtok == pytest.approx(0.01134, abs=5e-6)
    assert per_gpu_hour_mtok * 0.01134 == pytest.approx(38.96, abs=0.015)


def test_seed_record_revenue_to_the_cent_at_v41_flash_offpeak():
    """954K tokens/s/GPU x the baseline's stated token mix x deepseek-flash-offpeak = $38.96/GPU-hour."""
    from benchcamp.pricing import mix_for_blended_price
    from benchcamp.verdicts.baselines import load_published

    seed = load_published("agentx-vllm-deepseek")
    profile = load_profile(seed["meta"]["pricing"])
    assert profile.name == "deepseek-flash-offpeak"
    assert (profile.cached_input, profile.uncached_input, profile.output) == (0.003, 0.15, 0.60)
    mix = seed["meta"]["token_mix"]
    assert mix["cached_input"] + mix["uncached_input"] + mix["output"] == pytest.approx(1, abs=1e-5)
    mtok_per_gpu_hour = seed["summary"]["total_tokens_per_s_per_gpu"] * 3600 / 1e6
    revenue = mtok_per_gpu_hour * profile.blended_usd_per_mtok(mix["cached_input"], mix["uncached_input"], mix["output"])
    assert round(revenue, 2) == seed["summary"]["revenue_per_gpu_hour"] == 38.96
    # the stated mix is the solver's, for the stated output share (128 prompt tokens per output token)
    solved = mix_for_blended_price(profile, 38.96 / mtok_per_gpu_hour, output_share=1 / 129)
    assert (solved.cached_input, solved.uncached_input) == pytest.approx((mix["cached_input"], mix["uncached_input"]),
                                                                         abs=1e-5)
    assert solved.cache_hit_rate == pytest.approx(mix["cache_hit_rate"], abs=1e-4)


def test_v3_era_offpeak_prices_cannot_give_the_seed_revenue():
    from benchcamp.pricing import mix_for_blended_price

    blended = 38.96 / (954_000 * 3600 / 1e6)
    for name in ("deepseek-v3-offpeak", "deepseek-flash-peak"):
        with pytest.raises(ValueError, match="outside what"):
            mix_for_blended_price(load_profile(name), blended, output_share=1 / 129)


def test_v4_flash_price_history_is_dated_in_order():
    launch, cut, offpeak, v41 = (load_profile(n) for n in (
        "deepseek-v4-flash-launch", "deepseek-v4-flash-list", "deepseek-v4-flash-offpeak", "deepseek-flash-offpeak"))
    assert cut.cached_input == pytest.approx(launch.cached_input / 10)  # the 2026-04-26 cut: one tenth
    assert (cut.uncached_input, cut.output) == (launch.uncached_input, launch.output)
    assert launch.date.endswith("2026-04-26") and cut.date.startswith("2026-04-26")
    assert offpeak.date == "2026-08-16 to 2026-09-10" and v41.date == "from 2026-09-10"
    peak = load_profile("deepseek-flash-peak")
    for f in ("cached_input", "uncached_input", "output"):
        assert getattr(peak, f) == pytest.approx(2 * getattr(v41, f))  # off-peak is half of peak
