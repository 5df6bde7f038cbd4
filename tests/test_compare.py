"""Noise-aware verdicts: flag real regressions, not run-to-run noise, refuse the incomparable."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchcamp.config import ConfigError, Regression, Slo, load_config
from benchcamp.metrics import request_samples, summarize
from benchcamp.pricing import load_profile
from benchcamp.verdicts.baselines import list_published, load_published
from benchcamp.verdicts.compare import any_regression, comparability_key, compare, format_table, historical_baseline

PRICES = load_profile("deepseek-v3-offpeak")
REG = Regression(relative_threshold=0.05, confidence=0.95, bootstrap_samples=400)
KEY = {"workload_digest": "abc123def456", "model": "deepseek-ai/DeepSeek-V3", "gpu": "h200", "gpu_count": 8,
       "engine_kind": "simulated"}
W = 60.0


def synthetic_run(seed: int, n: int = 400, tpot_scale: float = 1.0, ttft_scale: float = 1.0,
                  fail: float = 0.0, key: dict | None = None) -> dict:
    """n requests sent uniformly over a 60 s window: lognormal TTFT/TPOT, agentic token counts."""
    rng = np.random.default_rng(seed)
    sent = np.sort(rng.uniform(0, W, n))
    ttft = ttft_scale * rng.lognormal(np.log(0.4), 0.4, n)
    tpot = tpot_scale * rng.lognormal(np.log(0.02), 0.2, n)
    out = rng.integers(50, 400, n)
    prompt = rng.integers(8_000, 40_000, n)
    cached = (prompt * rng.uniform(0.8, 0.95, n)).astype(int)
    bad = rng.uniform(size=n) < fail
    df = pd.DataFrame({
        "scheduled_s": sent, "sent_s": sent, "first_token_s": sent + ttft,
        "last_token_s": sent + ttft + tpot * (out - 1), "itl_s": [[t] * 2 for t in tpot],
        "prompt_tokens": prompt, "cached_tokens": cached, "completion_tokens": out,
        "status": np.where(bad, 500, 200), "error": [("HTTP 500: x" if b else None) for b in bad],
    })
    summary = summarize(df, (0.0, W), 8, PRICES, 3.5, Slo())
    return {"summary": summary, "samples": request_samples(df, (0.0, W), PRICES), "key": dict(key or KEY)}


def by_metric(verdicts):
    return {v.metric: v for v in verdicts}


def test_clear_throughput_regression_is_flagged():
    history = [synthetic_run(s) for s in (1, 2, 3, 4, 5)]
    current = synthetic_run(10, n=280)  # 30% fewer requests served in the same window
    base = historical_baseline(history)
    vs = by_metric(compare(current, [base], REG))
    for m in ("total_tokens_per_s_per_gpu", "revenue_per_gpu_hour"):
        assert vs[m].verdict == "regressed", vs[m].reason
        assert vs[m].delta_rel == pytest.approx(-0.3, abs=0.06)
        assert vs[m].ci_high < 0
    assert vs["p90_user_tokens_per_s"].verdict == "unchanged"
    assert vs["error_rate"].verdict == "unchanged"
    assert any_regression(vs.values())
    assert "REGRESSED" in format_table(vs.values())


def test_latency_change_against_a_single_run_is_only_suspected():
    # both runs' requests resampled: significant within a run, but one earlier run says nothing about
    # run-to-run noise, so the verdict waits and says what it lacks
    base = synthetic_run(1) | {"name": "previous", "kind": "historical"}
    current = synthetic_run(2, tpot_scale=1.4, ttft_scale=1.5)
    vs = by_metric(compare(current, [base], REG))
    assert vs["p90_user_tokens_per_s"].verdict == "suspected"
    assert vs["ttft_p90_s"].verdict == "suspected"
    assert "0 earlier runs of this point, 3 needed" in vs["ttft_p90_s"].reason
    assert vs["ttft_p90_s"].ci_low > 0  # lower is better: the whole CI is worse
    assert not any_regression(vs.values())
    better = by_metric(compare(synthetic_run(3, tpot_scale=0.7), [base], REG))
    assert better["p90_user_tokens_per_s"].verdict == "suspected" and "improvement" in better[
        "p90_user_tokens_per_s"].reason


@pytest.mark.parametrize("current_seed", [6, 7, 8, 9])
def test_run_to_run_noise_is_not_flagged(current_seed):
    runs = [synthetic_run(s) for s in (1, 2, 3, 4, 5)]
    current = synthetic_run(current_seed)
    baselines = [historical_baseline(runs), runs[0] | {"name": "last run", "kind": "historical"}]
    verdicts = compare(current, baselines, REG)
    flagged = [v for v in verdicts if v.verdict in ("regressed", "improved")]
    assert not flagged, format_table(flagged)
    assert {v.verdict for v in verdicts} == {"unchanged"}
    # with no threshold at all, the bootstrap CI and the spread of 5 runs alone keep noise quiet
    no_threshold = Regression(relative_threshold=0.0, bootstrap_samples=400)
    flagged = [v for v in compare(current, baselines[:1], no_threshold) if v.verdict != "unchanged"]
    assert not flagged, format_table(flagged)


def test_history_spread_absorbs_a_change_beyond_the_threshold():
    # past runs that swing +-20%: a 10% lower run with tight samples is within their noise
    runs = [synthetic_run(s, n=n) for s, n in zip((1, 2, 3, 4), (400, 320, 480, 400))]
    current = synthetic_run(9, n=340)
    v = by_metric(compare(current, [historical_baseline(runs)], REG))["total_tokens_per_s_per_gpu"]
    assert abs(v.delta_rel) > 0.05
    assert v.verdict == "unchanged" and "noise" in v.reason


def test_thresholds_respected():
    base = synthetic_run(1) | {"name": "previous", "kind": "historical"}
    current = synthetic_run(10, n=280)
    loose = Regression(relative_threshold=0.05, per_metric={"total_tokens_per_s_per_gpu": 0.5},
                       bootstrap_samples=400)
    vs = by_metric(compare(current, [base], loose))
    assert vs["total_tokens_per_s_per_gpu"].verdict == "unchanged"
    assert "within the ±50% threshold" in vs["total_tokens_per_s_per_gpu"].reason
    assert vs["revenue_per_gpu_hour"].verdict == "suspected"  # default 5% still applies to the others
    with pytest.raises(ConfigError, match="regression.per_metric"):
        compare(current, [base], Regression(per_metric={"tokens": 0.1}))


def test_error_rate_regression_and_floor():
    base = synthetic_run(1) | {"name": "previous", "kind": "historical"}
    vs = by_metric(compare(synthetic_run(2, fail=0.10), [base], REG))
    assert vs["error_rate"].verdict == "suspected", vs["error_rate"].reason  # 0 -> ~10%
    assert vs["error_rate"].baseline_value == 0.0
    same = by_metric(compare(synthetic_run(3), [base], REG))
    assert same["error_rate"].verdict == "unchanged" and same["error_rate"].reason == "no change"


def test_other_workload_digest_is_not_comparable():
    base = synthetic_run(1, key=KEY | {"workload_digest": "fff999"}) | {"name": "other", "kind": "historical"}
    verdicts = compare(synthetic_run(2, n=200), [base], REG)
    assert {v.verdict for v in verdicts} == {"not_comparable"}
    assert all("other workload" in v.reason for v in verdicts)
    assert not any_regression(verdicts)
    gpu = synthetic_run(1, key=KEY | {"gpu": "b200", "gpu_count": 4}) | {"name": "b200", "kind": "historical"}
    reason = compare(synthetic_run(2), [gpu], REG)[0].reason
    assert "other GPU type (h200 here, b200" in reason and "other GPU count (8 here, 4" in reason


def test_simulated_vs_published_real_hardware_is_never_comparable():
    assert "agentx-vllm-deepseek" in list_published()
    published = load_published("agentx-vllm-deepseek")
    assert published["kind"] == "published"
    assert published["summary"] == {"total_tokens_per_s_per_gpu": 954000.0, "p90_user_tokens_per_s": 196.0,
                                     "revenue_per_gpu_hour": 38.96}
    # even a simulated run whose key matches everything else
    current = synthetic_run(1, key=published["key"] | {"workload_digest": "x", "model": "m", "gpu": "h200",
                                                       "gpu_count": 8, "engine_kind": "simulated"})
    verdicts = compare(current, [published], REG)
    assert {v.verdict for v in verdicts} == {"not_comparable"}
    assert all("simulated vs real hardware" in v.reason for v in verdicts)
    tput = by_metric(verdicts)["total_tokens_per_s_per_gpu"]
    assert tput.baseline_value == 954000.0 and tput.delta_rel < 0  # shown for information only


def test_published_baseline_without_samples_judged_on_current_samples():
    key = KEY | {"engine_kind": "vllm"}
    run = synthetic_run(1, key=key)
    ref = {"name": "paper", "kind": "published", "key": key,
           "summary": {"total_tokens_per_s_per_gpu": run["summary"]["total_tokens_per_s_per_gpu"] / 0.7}}
    vs = by_metric(compare(run, [ref], REG))
    assert vs["total_tokens_per_s_per_gpu"].verdict == "suspected"
    assert vs["ttft_p90_s"].verdict == "not_comparable" and "no value" in vs["ttft_p90_s"].reason
    # no samples at all and no history: a change is not flagged, and the reason says why
    bare = by_metric(compare({"summary": run["summary"], "key": key}, [ref], REG))
    assert bare["total_tokens_per_s_per_gpu"].verdict == "unchanged"
    assert "cannot be assessed" in bare["total_tokens_per_s_per_gpu"].reason


def test_verdicts_are_deterministic_and_keyed_from_config():
    base = synthetic_run(1) | {"name": "previous", "kind": "historical"}
    cur = synthetic_run(2, n=300)
    a, b = compare(cur, [base], REG), compare(cur, [base], REG)
    assert [v.to_dict() for v in a] == [v.to_dict() for v in b]
    # raw records as samples (already windowed) give the same verdicts as request_samples
    rng = np.random.default_rng(0)
    n = 200
    sent = rng.uniform(0, W, n)
    ttft, tpot = rng.lognormal(-1, 0.3, n), rng.lognormal(-4, 0.2, n)
    raw = pd.DataFrame({"scheduled_s": sent, "sent_s": sent, "first_token_s": sent + ttft,
                        "last_token_s": sent + ttft + tpot * 99, "itl_s": [[0.01]] * n,
                        "prompt_tokens": 1000, "cached_tokens": 900, "completion_tokens": 100,
                        "status": 200, "error": None})
    run = {"summary": summarize(raw, (0.0, W), 8, PRICES, 3.5, Slo()), "key": KEY}
    from_raw = compare(run | {"samples": raw}, [base], REG)
    from_smp = compare(run | {"samples": request_samples(raw)}, [base], REG)
    assert [v.to_dict() for v in from_raw] == [v.to_dict() for v in from_smp]
    key = comparability_key(load_config(None), "abc")
    assert key == {"workload_digest": "abc", "model": "deepseek-ai/DeepSeek-V3", "gpu": "h200",
                   "gpu_count": 8, "engine_kind": "simulated"}
    assert comparability_key(load_config(None), "abc", "c8") == key | {
        "point": "c8", "load_mode": "closed", "window_rule": "at_warmup 10s, 40s", "clock": "wall"}


def test_large_n_bootstrap_limit_matches_the_exact_bootstrap(monkeypatch):
    import benchcamp.verdicts.compare as cmp
    rng = np.random.default_rng(1)
    n = 4000
    df = pd.DataFrame({"ok": rng.uniform(size=n) > 0.02, "ttft": rng.lognormal(-1, 0.4, n),
                       "tpot": rng.lognormal(-4, 0.2, n), "total": rng.integers(8000, 40000, n).astype(float)})
    values = {"ttft_p90_s": np.percentile(df.ttft[df.ok], 90),
              "p90_user_tokens_per_s": 1 / np.percentile(df.tpot[df.ok], 90),
              "error_rate": 1 - df.ok.mean(), "total_tokens_per_s_per_gpu": 100.0}
    for metric, value in values.items():
        exact = cmp._bootstrap(metric, df, value, 1000, np.random.default_rng(0))
        monkeypatch.setattr(cmp, "EXACT_BOOTSTRAP_MAX", 10)
        limit = cmp._bootstrap(metric, df, value, 1000, np.random.default_rng(0))
        monkeypatch.setattr(cmp, "EXACT_BOOTSTRAP_MAX", 5000)
        e_lo, e_hi = np.quantile(exact, [0.025, 0.975])
        l_lo, l_hi = np.quantile(limit, [0.025, 0.975])
        width = e_hi - e_lo
        assert abs(l_lo - e_lo) < 0.15 * width and abs(l_hi - e_hi) < 0.15 * width, metric


def test_a_point_is_never_judged_against_another_points_history():
    # the c8 run is 80% "better" than c4's history only because it measured another point
    c4 = KEY | {"point": "c4", "load_mode": "closed", "window_rule": "at_warmup 10s, 30s", "clock": "wall"}
    runs = [synthetic_run(s, key=c4) for s in (1, 2, 3, 4, 5)]
    c8 = synthetic_run(10, n=720, key=c4 | {"point": "c8"})
    verdicts = compare(c8, [historical_baseline(runs)], REG)
    assert {v.verdict for v in verdicts} == {"not_comparable"}
    assert all("other point (c8 here, c4 in the baseline)" in v.reason for v in verdicts)
    # the same point with another window rule or clock is another measurement too
    for field, value in (("window_rule", "at_warmup 10s, 60s"), ("clock", "virtual"), ("load_mode", "open")):
        other = synthetic_run(10, key=c4 | {field: value})
        assert {v.verdict for v in compare(other, [historical_baseline(runs)], REG)} == {"not_comparable"}, field
    # a baseline that does not name its point is never judged against a run that does
    unnamed = historical_baseline([synthetic_run(s) for s in (1, 2, 3)])
    assert all("does not state its point" in v.reason for v in compare(c8, [unnamed], REG))


def test_published_e2e_normalized_interactivity_meets_the_runs_figure_of_that_definition():
    """A baseline whose p90_user_tokens_per_s is AgentX's E2E-normalized interactivity is compared with the run's
    e2e_normalized_interactivity_p90 (TTFT included, so lower than 1 / P90(TPOT)), not its P90 per-user rate."""
    current = synthetic_run(1)
    s = current["summary"]
    assert s["e2e_normalized_interactivity_p90"] < s["p90_user_tokens_per_s"]
    base = {"name": "agentx-e2e", "kind": "published", "key": dict(KEY), "interactivity_definition": "e2e_normalized",
            "summary": {"p90_user_tokens_per_s": s["e2e_normalized_interactivity_p90"]}}
    v = by_metric(compare(current, [base], REG))["p90_user_tokens_per_s"]
    assert v.definition == "e2e_normalized"
    assert v.current == pytest.approx(s["e2e_normalized_interactivity_p90"])
    assert v.verdict == "unchanged", v.reason
    tpot = by_metric(compare(current, [base | {"interactivity_definition": "tpot"}], REG))["p90_user_tokens_per_s"]
    assert tpot.definition == "tpot" and tpot.current == pytest.approx(s["p90_user_tokens_per_s"])
    # higher by TPOT's definition; a published figure has no run-to-run history: suspected, not improved
    assert tpot.verdict == "suspected" and tpot.reason.startswith("improvement of +"), tpot.reason


def test_published_agentx_point_says_which_interactivity_it_is():
    assert load_published("agentx-vllm-deepseek")["interactivity_definition"] == "tpot"


def test_a_verdict_read_back_from_strict_json_formats_as_it_was_made():
    """verdicts.json and XCom carry an unmeasured figure (NaN) as null: read back, the table says the same."""
    import json
    import math

    from benchcamp.results.jsonsafe import dumps
    from benchcamp.verdicts.compare import Verdict, format_table

    made = Verdict("ttft_p90_s", "agentx", 0.5, math.nan, math.nan, math.nan, math.nan, "not_comparable", "simulated")
    back = Verdict.from_dict(json.loads(dumps(made.to_dict())))
    assert math.isnan(back.ci_low) and math.isnan(back.baseline_value)
    assert format_table([back]) == format_table([made])
