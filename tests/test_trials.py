"""benchcamp.results.trials: a point's figure over its trials (mean, median, Student-t interval), the point's
summary as the trials' aggregate, and the trials block as it round-trips through JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchcamp.metrics import Metric
from benchcamp.results.outcome import PointOutcome, combine_trials
from benchcamp.results.trials import FigureInterval, PointTrials, aggregate_summary

# Student's t quantiles t(0.975, df) as printed t tables give them (e.g. NIST/SEMATECH e-Handbook of Statistical
# Methods, 1.3.6.7.2, "Critical values of the Student's t distribution"); 2.776 for df=4 is also in AIPerf's
# multi-run confidence guide (docs/tutorials/multi-run-confidence.md, read 2026-12-05).
T975 = {1: 12.706, 2: 4.303, 4: 2.776}


def test_the_interval_of_three_known_trial_values_is_the_textbook_t_interval():
    f = FigureInterval.of([10.0, 12.0, 14.0], 0.95)
    # mean 12, sample std 2 (squares 4 + 0 + 4 over n - 1 = 2), half width t(0.975, 2) * 2 / sqrt(3)
    half = T975[2] * 2.0 / math.sqrt(3)
    assert f.n == 3 and f.mean == 12.0 and f.median == 12.0 and f.std == pytest.approx(2.0)
    assert f.t_critical == pytest.approx(T975[2], abs=5e-4)
    assert f.ci_low == pytest.approx(12.0 - half, rel=1e-4) and f.ci_high == pytest.approx(12.0 + half, rel=1e-4)
    assert f.half_width_rel == pytest.approx(half / 12.0, rel=1e-4)


def test_five_trials_and_a_99_percent_level():
    values = [150.0, 152.0, 148.0, 155.0, 151.0]
    f = FigureInterval.of(values, 0.95)
    sd = math.sqrt(sum((v - 151.2) ** 2 for v in values) / 4)
    assert f.mean == pytest.approx(151.2) and f.std == pytest.approx(sd)
    assert f.ci_high - f.mean == pytest.approx(T975[4] * sd / math.sqrt(5), rel=1e-3)
    assert FigureInterval.of(values, 0.99).ci_high > f.ci_high  # a higher level, a wider interval


def test_a_trial_without_a_finite_value_is_left_out_and_one_value_has_no_interval():
    f = FigureInterval.of([1.0, float("nan"), None, 3.0], 0.95)
    assert f.values == (1.0, None, None, 3.0) and f.n == 2 and f.mean == 2.0
    assert f.ci_high - f.mean == pytest.approx(T975[1] * math.sqrt(2) / math.sqrt(2), rel=1e-3)
    one = FigureInterval.of([5.0, None], 0.95)
    assert one.n == 1 and one.mean == 5.0 and one.ci_low is None and one.std is None
    assert FigureInterval.of([None, None], 0.95).mean is None


def test_identical_trials_have_a_zero_width_interval():
    f = FigureInterval.of([7.0, 7.0, 7.0], 0.95)
    assert f.ci_low == f.ci_high == 7.0 and f.std == 0.0


def test_the_points_summary_means_figures_and_holds_a_flag_only_when_every_trial_does():
    s = aggregate_summary(
        [
            {"a": 1.0, "steady": 1, "note": "x", "ok": True, "only_first": 4.0, "idle": math.nan},
            {"a": 2.0, "steady": 0, "note": "x", "ok": True, "idle": math.nan},
            {"a": 6.0, "steady": 1, "note": "y", "ok": False, "idle": math.nan},
        ]
    )
    assert s["a"] == 3.0 and s["steady"] == 0 and s["ok"] is False and s["only_first"] == 4.0
    assert math.isnan(s["idle"])  # an idle engine's NaN stays "no value", never 0
    assert s["note"] == "trial-1: x; trial-2: x; trial-3: y"


def _outcome(folder: Path, k: int, tps: float, valid: bool = True, reasons: tuple[str, ...] = ()) -> PointOutcome:
    summary = {Metric.THROUGHPUT_PER_GPU: tps, Metric.TTFT_P90: 0.1 * k, Metric.REQUESTS: 100 + k}
    records = folder / f"trial-{k}" / "records.parquet"
    return PointOutcome("c4", 4.0, summary, records, valid, list(reasons), window=(1.0, 2.0 + k))


def test_combined_trials_are_the_point_valid_only_when_every_trial_is(tmp_path):
    trials = [
        (2, _outcome(tmp_path, 2, 110.0, False, ("too few requests",))),
        (1, _outcome(tmp_path, 1, 100.0)),
        (3, _outcome(tmp_path, 3, 120.0, False, ("too few requests",))),
    ]
    p = combine_trials(trials, 3, 0.95)
    assert p.summary[Metric.THROUGHPUT_PER_GPU] == 110.0 and p.summary[Metric.REQUESTS] == 102.0
    assert not p.valid and p.reasons == ["trial-2, trial-3: too few requests"]
    assert p.records_path == tmp_path / "trial-1" / "records.parquet" and p.window == (1.0, 3.0)
    assert p.folder == tmp_path
    assert p.trials is not None and [t.trial for t in p.trials.trials] == [1, 2, 3]
    assert p.trials.values(Metric.THROUGHPUT_PER_GPU) == [100.0, 110.0, 120.0]
    f = p.trials.figures[Metric.THROUGHPUT_PER_GPU]
    assert f.mean == 110.0 and f.ci_high == pytest.approx(110.0 + T975[2] * 10.0 / math.sqrt(3), rel=1e-4)


def test_the_trials_block_round_trips_through_strict_json(tmp_path):
    p = combine_trials([(1, _outcome(tmp_path, 1, 100.0)), (2, _outcome(tmp_path, 2, 104.0))], 3, 0.9)
    assert p.trials is not None
    text = json.dumps(p.trials.to_dict(), allow_nan=False)  # every value finite or null
    back = PointTrials.from_dict(json.loads(text))
    assert back == p.trials and back.measured == 2 and back.asked == 3


def test_an_unset_trials_keeps_the_fingerprint_and_a_set_one_changes_it():
    from benchcamp.config import load_config

    base = load_config(None)
    assert base.load.trials == 1
    assert load_config(None, ["load.trials=1"]).fingerprint() == base.fingerprint() == "fcec604a3988a9e9"
    assert load_config(None, ["load.trials=3"]).fingerprint() != base.fingerprint()


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["load.trials=0"], "load.trials: Input should be greater than or equal to 1"),
        (["load.trials=3", "load.mode=capacity"], "load.trials=3: load.mode=capacity searches levels"),
        (["load.trials=2", "load.shards=2", "load.workers=1"], "load.trials=2 runs on one load-generator host"),
    ],
)
def test_bad_trials_are_one_line_naming_the_field_and_the_fix(sets, said):
    from benchcamp.config import load_config
    from benchcamp.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(None, sets)
    (line,) = [x for x in str(err.value).splitlines() if "load.trials" in x]
    assert said in line
