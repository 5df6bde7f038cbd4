"""History is kept and judged per point, in a real MLflow store: a campaign measured at c8 never meets the
history of campaigns measured at c4 (the trigger form's other level), and the nightly guard judges a point
over its own nights only."""

from __future__ import annotations

from factory import make_campaign

from benchcamp.config import load_config
from benchcamp.report.flow import assess
from benchcamp.tracking import log_campaign


def _cfg(uri: str, level: int):
    return load_config(None, {"load.levels": [level], "load.min_requests": 5, "tracking.mlflow_uri": uri,
                              "campaign.name": "points", "baselines.published": []})


def test_a_c8_campaign_is_never_judged_against_c4_history(tmp_path, sqlite_uri):
    c4 = _cfg(sqlite_uri, 4)
    for i in range(4):
        log_campaign(c4, make_campaign(tmp_path / f"c4-{i}", c4, f"night-c4-{i}", levels=(4,), seed=i))

    c8 = _cfg(sqlite_uri, 8)
    camp8 = make_campaign(tmp_path / "c8", c8, "form-c8", levels=(8,), seed=9)
    assert camp8.headline["point"] == "c8"
    verdicts, baselines, notes = assess(c8, camp8, sqlite_uri)
    assert not [b for b in baselines if b["kind"] == "historical"]
    assert any("same workload, model, GPU, engine and point" in n for n in notes)
    history = [v for v in verdicts if v.baseline_kind == "historical"]
    assert history and {v.verdict for v in history} == {"insufficient"}
    assert "0 earlier nights; 3 needed to judge the P90 per-user rate at ±5%" in {v.reason for v in history}

    # the next c4 night meets exactly the four c4 nights
    camp4 = make_campaign(tmp_path / "c4-next", c4, "night-c4-4", levels=(4,), seed=4)
    verdicts, baselines, _ = assess(c4, camp4, sqlite_uri)
    (hist,) = [b for b in baselines if b["kind"] == "historical"]
    assert hist["key"]["point"] == "c4" and len(hist["history"]) == 4
    guarded = [v for v in verdicts if v.baseline_kind == "historical"]
    assert guarded and all(v.baseline == "nightly series (5 nights)" for v in guarded), [v.baseline for v in guarded]
    assert {v.verdict for v in guarded} <= {"unchanged", "suspected"}, [(v.metric, v.reason) for v in guarded]


def test_history_command_draws_the_series_and_logs_it_as_a_line(tmp_path, sqlite_uri, capsys):
    from benchcamp.cli import main
    from benchcamp.tracking.store import TAG, client

    cfg = _cfg(sqlite_uri, 4)
    for i in range(4):
        log_campaign(cfg, make_campaign(tmp_path / f"n{i}", cfg, f"night-{i}", levels=(4,), seed=i))
    page = tmp_path / "trend" / "index.html"
    code = main(["history", "--campaign", "points", "--tracking-uri", sqlite_uri, "--html", str(page), "--mlflow",
                 "--metric", "total_tokens_per_s_per_gpu", "--metric", "ttft_p90_s"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "points c4 (" in out and "4 nights" in out and "tonight: unchanged" in out
    html = page.read_text()
    assert html.count("<svg") == 2 and "Total throughput" in html and "TTFT P90" in html
    # MLflow draws a metric with one value per step as a line: one step per night, oldest first
    c = client(sqlite_uri)
    (trend,) = c.search_runs([e.experiment_id for e in c.search_experiments()],
                             filter_string=f"tags.`{TAG}role` = 'trend'")
    steps = c.get_metric_history(trend.info.run_id, "trend/total_tokens_per_s_per_gpu")
    assert [m.step for m in sorted(steps, key=lambda m: m.step)] == [0, 1, 2, 3]
    # run again: the trend run is replaced, not doubled
    assert main(["history", "--campaign", "points", "--tracking-uri", sqlite_uri, "--mlflow"]) == 0
    again = c.search_runs([trend.info.experiment_id], filter_string=f"tags.`{TAG}role` = 'trend'")
    assert len(again) == 1 and len(c.get_metric_history(again[0].info.run_id, "trend/ttft_p90_s")) == 4
    assert main(["history", "--metric", "tokens"]) == 2


def test_history_keeps_each_points_nights_whatever_the_headline(tmp_path, sqlite_uri, capsys):
    """Three campaigns measured c4 and c8, a fourth c4 alone: the page and the terminal show c4 over four
    nights and c8 over three, as the guard judges them, not one series per campaign headline."""
    from benchcamp.cli import main

    alone = _cfg(sqlite_uri, 4)
    both = load_config(None, {"load.levels": [4, 8], "load.min_requests": 5, "tracking.mlflow_uri": sqlite_uri,
                              "campaign.name": "points", "baselines.published": []})
    for i in range(3):
        log_campaign(both, make_campaign(tmp_path / f"b{i}", both, f"both-{i}", levels=(4, 8), seed=i))
    log_campaign(alone, make_campaign(tmp_path / "a", alone, "alone-3", levels=(4,), seed=3))
    assert main(["history", "--campaign", "points", "--tracking-uri", sqlite_uri,
                 "--metric", "total_tokens_per_s_per_gpu"]) == 0
    out = capsys.readouterr().out
    assert "points c4 (" in out and "points c8 (" in out, out
    counts = [line.split(": ")[-1] for line in out.splitlines() if line.startswith("points c")]
    assert counts == ["4 nights", "3 nights"], out
