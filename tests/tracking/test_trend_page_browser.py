"""The trend page as a user opens it: `benchcamp history --html` over a real MLflow store (six unchanged nights,
then two with the engine's decode slowed by half), opened in headless Chromium. Each headline is drawn, the
P90 per-user rate's change point is marked on the night it began, the page raises no error, and its screenshot
is kept ($BENCHCAMP_ARTIFACTS/trend/, default <repo>/.ci/artifacts/trend/, as the Airflow walk-through's are)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import benchcamp_test_services as services
import pytest
from factory import make_campaign

from benchcamp.config import load_config
from benchcamp.metrics import HEADLINE
from benchcamp.tracking import log_campaign

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("BENCHCAMP_ARTIFACTS") or ROOT / ".ci" / "artifacts") / "trend"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
UNCHANGED, PLANTED = 6, 2

pytestmark = pytest.mark.slow


def test_the_trend_page_marks_the_night_a_planted_change_began(tmp_path, sqlite_uri):
    if CHROMIUM is None:
        services.skip_absent("browser", "chromium not installed")
    from playwright.sync_api import sync_playwright

    from benchcamp.cli import main

    cfg = load_config(None, {"load.levels": [4], "load.min_requests": 5, "tracking.mlflow_uri": sqlite_uri,
                             "campaign.name": "trend", "baselines.published": []})
    for i in range(UNCHANGED + PLANTED):
        slow = 2.0 if i >= UNCHANGED else 1.0  # every token takes twice as long: the per-user rate halves
        log_campaign(cfg, make_campaign(tmp_path / f"n{i}", cfg, f"night-{i}", levels=(4,), seed=i, tpot_scale=slow))
    page_path = tmp_path / "trend" / "index.html"
    assert main(["history", "--campaign", "trend", "--tracking-uri", sqlite_uri, "--html", str(page_path)]) == 0

    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            heights = page.eval_on_selector_all("svg", "els => els.map(e => e.getBoundingClientRect().height)")
            headings = page.eval_on_selector_all("h3", "els => els.map(e => e.innerText)")
            rate = page.locator("h3", has_text=HEADLINE["p90_user_tokens_per_s"].label).first
            rate_status = rate.locator(".status").inner_text()
            rate_chart = rate.locator("xpath=following-sibling::*[local-name()='svg'][1]")
            marked = rate_chart.locator(".cp").count()
            label = rate_chart.locator(".cplabel").first.text_content() if marked else ""
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "trend-page.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert len(heights) == len(HEADLINE) and all(h > 50 for h in heights), (heights, headings)
    assert all(f"{UNCHANGED + PLANTED} nights" in h for h in headings), headings
    assert rate_status == "regressed", headings  # confirmed on the second planted night
    assert marked == 1 and f"night-{UNCHANGED}" in label, label  # the night it began, named on the chart
    assert (SHOTS / "trend-page.png").stat().st_size > 10_000
