"""The nightly guard on series whose truth is known: the exact night a shift began, confirmed on its
second night, one alarm per shift, nothing on noise, and what an unjudgeable night lacks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchcamp.verdicts.compare import any_regression, guard_verdicts
from benchcamp.verdicts.guard import GuardRule, Night, config_diff, judge_series

TPUT, TTFT = "total_tokens_per_s_per_gpu", "ttft_p90_s"


def series(values, change_at: int | None = None) -> list[Night]:
    """Nights n0, n1 ...; from ``change_at`` on, engine.max_num_seqs is halved."""
    return [
        Night(f"n{i}", float(v), config={"engine.max_num_seqs": "4" if change_at is not None and i >= change_at
                                         else "8", "git_commit": "abc"})
        for i, v in enumerate(values)
    ]


def noisy(n: int, seed: int, cv: float = 0.03) -> np.ndarray:
    return 1000.0 * (1 + cv * np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("seed", range(6))
def test_the_exact_change_night_is_found_and_confirmed_on_its_second_night(seed):
    x = noisy(26, seed)
    x[20:] *= 0.8
    nights = series(x, change_at=20)
    verdicts = [judge_series(TPUT, nights[:t]) for t in range(20, 27)]
    before, first, second = verdicts[0], verdicts[1], verdicts[2]
    assert before.status == "unchanged", before.reason
    assert first.status in ("suspected", "unchanged"), first.reason  # one night is never a verdict
    assert second.status == "regressed" and second.began == "n20", second.reason
    assert second.new_alarm and not first.new_alarm
    assert second.diff == {"engine.max_num_seqs": ("8", "4")}
    assert "engine.max_num_seqs 8 -> 4" in second.reason
    # later nights keep the regression standing without alarming again
    assert [v.status for v in verdicts[3:]] == ["regressed"] * 4
    assert not any(v.new_alarm for v in verdicts[3:])


def test_a_10_percent_step_in_3_percent_noise_is_found_near_its_night():
    # what bench/regression_guard.py measures over many series, on 20 with 20 nights before the step:
    # most confirmed on the step's second night, all by its third, the night it began found in nearly all
    by_two, by_three = [], []
    for seed in range(50, 70):
        x = noisy(24, seed)
        x[20:] *= 0.9
        by_two.append(judge_series(TPUT, series(x, 20)[:22]))
        by_three.append(judge_series(TPUT, series(x, 20)[:23]))
    assert sum(v.status == "regressed" for v in by_two) >= 12, [v.status for v in by_two]
    assert all(v.status == "regressed" for v in by_three), [v.reason for v in by_three]
    began = [v.began for v in by_three]
    assert began.count("n20") >= 14 and sum(b in ("n19", "n20", "n21") for b in began) >= 19, began


def test_a_lower_is_better_metric_regresses_upwards():
    x = 0.05 * (1 + 0.03 * np.random.default_rng(3).standard_normal(24))
    x[20:] *= 1.2
    v = judge_series(TTFT, series(x, 20)[:22])
    assert v.status == "regressed" and v.began == "n20" and v.delta_rel == pytest.approx(0.2, abs=0.05)


@pytest.mark.parametrize("seed", range(5))
def test_unchanged_series_raise_no_alarm(seed):
    nights = series(noisy(60, 100 + seed))
    statuses = [judge_series(TPUT, nights[:t]).status for t in range(4, 61)]
    assert not {"regressed", "improved"} & set(statuses), statuses


def test_one_slow_night_is_suspected_and_then_forgotten():
    x = noisy(22, 7)
    x[20] *= 0.7
    first = judge_series(TPUT, series(x)[:21])
    assert first.status == "suspected", first.reason
    after = judge_series(TPUT, series(x)[:22])
    assert after.status in ("unchanged", "suspected") and not after.new_alarm


def test_a_recovery_closes_the_alarm():
    x = noisy(30, 11)
    x[15:24] *= 0.8
    nights = series(x)
    opened = [t for t in range(4, 31) if judge_series(TPUT, nights[:t]).new_alarm]
    closed = [t for t in range(4, 31) if judge_series(TPUT, nights[:t]).closed_alarm]
    assert opened == [17]  # nights n15 and n16 are the two that confirm it
    assert closed and closed[0] in (25, 26), closed
    assert judge_series(TPUT, nights).status == "improved"


def test_what_a_short_series_lacks_is_said():
    v = judge_series("p90_user_tokens_per_s", series([100.0, 101.0, 80.0]), GuardRule(threshold=0.05))
    assert v.status == "insufficient"
    assert v.reason == "2 earlier nights; 3 needed to judge the P90 per-user rate at ±5%"
    idle = judge_series(TPUT, series([100.0, 101.0, 99.0, 100.0, math.nan]))
    assert idle.status == "insufficient" and "this night has no Total throughput" in idle.reason


def test_config_diff_names_what_changed_in_order():
    before = {"git_commit": "a", "engine_version": "0.11", "engine.block_size": "16", "hardware": "h200 x8"}
    after = {"git_commit": "b", "engine_version": "0.12", "engine.block_size": "16", "hardware": "h200 x8"}
    assert list(config_diff(before, after).items()) == [("engine_version", ("0.11", "0.12")),
                                                         ("git_commit", ("a", "b"))]


def test_guard_verdicts_exit_on_the_confirming_night_only():
    x = noisy(25, 5)
    x[20:] *= 0.85
    nights = series(x, 20)
    on = guard_verdicts({TPUT: nights[:22]})
    assert on[0].verdict == "regressed" and on[0].alarm == "opened" and any_regression(on)
    later = guard_verdicts({TPUT: nights[:24]})
    assert later[0].verdict == "regressed" and later[0].alarm == "open" and not any_regression(later)
    assert on[0].began == "n20" and on[0].diff == {"engine.max_num_seqs": ["8", "4"]}


def test_tonights_trials_are_read_from_the_block_the_trials_step_writes():
    import json

    from benchcamp.report.flow import tonight_trials
    from benchcamp.results.trials import TRIALS_KEY, TrialFigures, point_trials

    metric = "total_tokens_per_s_per_gpu"
    made = [TrialFigures(trial=k, folder=f"trial-{k}", valid=True, reasons=(), figures={metric: v})
            for k, v in ((2, 110.0), (1, 100.0), (3, None))]
    headline = {metric: 105.0, TRIALS_KEY: json.loads(json.dumps(point_trials(made, asked=3, confidence=0.95).to_dict()))}
    assert tonight_trials(headline, metric) == (100.0, 110.0)
    assert tonight_trials({metric: 105.0}, metric) == ()
    night = Night("n1", 105.0, tonight_trials(headline, metric))
    assert night.figure == 105.0


def test_an_unchanged_verdict_says_when_its_nights_are_too_scattered_to_judge():
    """Four nights of a loaded 2-core box (the real CPU vLLM through the nightly DAG) then prefix caching off:
    -80% stays inside the band of those four nights, and the reason says the band cannot judge it."""
    wide = judge_series("total_tokens_per_s_per_gpu", series([3042.7, 2230.2, 2323.4, 3203.1, 533.2]))
    assert wide.status == "unchanged" and "-80.1%" in wide.reason
    assert "too scattered to judge it" in wide.reason and "noise band [" in wide.reason, wide.reason
    tight = judge_series("total_tokens_per_s_per_gpu", series([100.0, 101.0, 99.0, 102.0, 98.0]))
    assert tight.status == "unchanged" and "scattered" not in tight.reason, tight.reason
