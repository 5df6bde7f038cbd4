"""The report page, its DVC files, and how it looks in a real (headless) Chromium."""

import csv
import json
import os
import shutil
from pathlib import Path

import benchcamp_test_services as services
import pytest
from benchcamp_test_factory import make_campaign

from benchcamp.config import load_config
from benchcamp.report import render
from benchcamp.report.flow import current_input
from benchcamp.secrets.redaction import register
from benchcamp.verdicts.baselines import load_published
from benchcamp.verdicts.compare import compare

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    secret = "sk-report-secret-0123456789"
    register(secret)
    cfg = load_config(None, {"load.levels": [4, 8, 16, 32], "load.min_requests": 5,
                             "campaign.description": "<script>alert(1)</script>",
                             "engine.extra_args": ["--api-key", secret]})
    camp = make_campaign(tmp, cfg, levels=(4, 8, 16, 32), invalid_point="c32", execution_id="ex<b>1")
    old = make_campaign(tmp / "old", cfg, levels=(4, 8, 16, 32), tpot_scale=0.7, execution_id="old")
    cur = current_input(camp)
    hist = {"name": "old", "kind": "historical", "key": cur["key"], "summary": old.headline,
            "samples": current_input(old)["samples"], "points": [p.summary | {"point": p.label} for p in old.points]}
    baselines = [load_published("agentx-vllm-deepseek"), hist]
    verdicts = compare(cur, baselines, cfg.regression)
    index = render(camp, verdicts, baselines, tmp / "reports", run_id="run-<x>")
    return {"index": index, "camp": camp, "verdicts": verdicts, "secret": secret, "out": tmp / "reports"}


def test_page_is_self_contained_escaped_and_complete(rendered):
    page = rendered["index"].read_text()
    assert rendered["index"] == rendered["out"] / "agentic-smoke" / "index.html"
    assert "<script" not in page.lower()  # no JS at all, and user text is escaped
    assert "ex&lt;b&gt;1" in page and "run-&lt;x&gt;" in page
    assert rendered["secret"] not in page
    assert "http://" not in page and "https://" not in page  # nothing external to fetch
    assert page.count('src="data:image/png;base64,') == 5  # the two Pareto axes, CDFs, revenue, cache
    assert "Simulated engine." in page
    assert "client CPU saturated (synthetic)" in page  # the invalid point's reason
    assert "benchcamp reproduce &#x27;run-&lt;x&gt;&#x27;" in page
    assert "--set &#x27;load.levels=[4.0, 8.0, 16.0, 32.0]&#x27;" in page and "--set load.min_requests=5" in page
    assert rendered["camp"].fingerprint in page and rendered["camp"].workload_digest in page
    for v in rendered["verdicts"]:
        assert f'<tr class="{v.verdict}">' in page
    # a baseline out of reach for one reason is one row, not five
    assert page.count("simulated vs real hardware") == 1
    # the per-user rate differs clearly from `old`'s, but against one run's resampled requests only: suspected
    assert any(v.metric == "p90_user_tokens_per_s" and v.baseline == "old" and v.verdict == "suspected"
               for v in rendered["verdicts"])
    assert all(v.verdict == "not_comparable" for v in rendered["verdicts"] if v.baseline == "agentx-vllm-deepseek")


def test_dvc_metrics_and_plot_files(rendered):
    out, camp = rendered["out"], rendered["camp"]
    m = json.loads((out / "metrics.json").read_text())
    assert m["headline"]["total_tokens_per_s_per_gpu"] == pytest.approx(camp.headline["total_tokens_per_s_per_gpu"])
    assert set(m["points"]) == {"c4", "c8", "c16", "c32"} and m["points"]["c32"]["valid"] == 0
    pareto = list(csv.DictReader(open(out / "plots" / "pareto.csv")))
    assert {r["source"] for r in pareto} == {"this run", "old", "agentx-vllm-deepseek"}
    cdf = list(csv.DictReader(open(out / "plots" / "latency_cdf.csv")))
    assert {(r["point"], r["metric"]) for r in cdf} >= {("c4", "ttft_s"), ("c32", "tpot_s")}
    vals = [float(r["value"]) for r in cdf if r["point"] == "c4" and r["metric"] == "ttft_s"]
    assert vals == sorted(vals) and len(vals) == 101
    assert (out / "plots" / "sweep.csv").exists()
    assert sorted(p.name for p in (rendered["index"].parent / "figures").iterdir()) == [
        "cache_hit_rates.png", "latency_cdf.png", "pareto.png", "pareto_e2e_normalized.png", "revenue.png"]
    # both per-user rates per point: the P90 per-user rate and AgentX's E2E-normalized interactivity (lower: TTFT in)
    ours = [r for r in pareto if r["source"] == "this run" and r["valid"] == "1"]
    assert ours and all(0 < float(r["e2e_normalized_interactivity_p90"]) < float(r["p90_user_tokens_per_s"])
                        for r in ours)
    page = rendered["index"].read_text()
    assert "E2E-norm tok/s" in page and "Per-user rate definitions." in page


def test_a_published_rate_is_drawn_only_on_the_axis_of_its_definition():
    from benchcamp.metrics import Metric
    from benchcamp.report.plots import _on_axis

    tpot = {"summary": {"p90_user_tokens_per_s": 196.0, "total_tokens_per_s_per_gpu": 9.0},
            "meta": {"interactivity_definition": "tpot"}}
    assert _on_axis(tpot, Metric.P90_USER_RATE)["p90_user_tokens_per_s"] == 196.0
    assert Metric.E2E_INTERACTIVITY_P90 not in _on_axis(tpot, Metric.E2E_INTERACTIVITY_P90)
    e2e = tpot | {"meta": {"interactivity_definition": "e2e_normalized"}}
    assert _on_axis(e2e, Metric.E2E_INTERACTIVITY_P90)[Metric.E2E_INTERACTIVITY_P90] == 196.0
    assert Metric.P90_USER_RATE not in _on_axis(e2e, Metric.P90_USER_RATE)


def test_opens_in_headless_chromium_without_errors(rendered, tmp_path):
    if CHROMIUM is None:
        services.skip_absent("browser", "chromium not installed")
    from playwright.sync_api import sync_playwright

    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(rendered["index"].as_uri())
            page.wait_for_load_state("load")
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert len(widths) == 5 and all(w > 0 for w in widths)
    assert shot.stat().st_size > 10_000
    if os.environ.get("BENCHCAMP_SCREENSHOT_DIR"):
        dst = Path(os.environ["BENCHCAMP_SCREENSHOT_DIR"])
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, dst / "report.png")


def test_a_failed_campaign_without_points_still_renders(tmp_path):
    camp = make_campaign(tmp_path)
    camp.points, camp.headline = [], {}
    camp.error = "RuntimeError: engine <never> became ready"
    page = render(camp, [], [], tmp_path / "r").read_text()
    assert "No valid sweep point" in page and "engine &lt;never&gt; became ready" in page
