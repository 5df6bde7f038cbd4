"""MLflow as a user meets it: a real `mlflow server` on loopback, headless Chromium (Playwright, the system Chromium).
benchcamp's link opens the experiment's runs in its saved view, the headline metrics as the first columns; a
campaign with no valid point is not shown with the finished run's tick; the compare view's plot starts on the
headline throughput. Screenshots go to $BENCHCAMP_SCREENSHOT_DIR (default: the test's folder)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from factory import make_campaign

from benchcamp.config import load_config
from benchcamp.metrics import HEADLINE
from benchcamp.tracking import log_campaign
from benchcamp.tracking.store import VIEW_NAME, client, experiment_ui_path, headline_name

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make browser)")]


def _cfg(uri: str, **extra):
    return load_config(None, {"load.levels": [8, 32], "load.min_requests": 5, "tracking.mlflow_uri": uri,
                              "campaign.name": "ui", **extra})


def _status_icon(page, run_name: str) -> str:
    """The drawing of the status icon in a run's row (MLflow's icons carry no label)."""
    row = page.locator("[role=row]", has=page.get_by_text(run_name, exact=True)).first
    return row.locator("[col-id=runDateAndNestInfo] svg").first.inner_html()


def test_runs_open_on_the_headline_and_an_invalid_campaign_is_not_green(mlflow_server, tmp_path):
    from playwright.sync_api import sync_playwright

    uri = mlflow_server["uri"]
    runs = {}
    for ex, extra in (("ui-valid", {}), ("ui-invalid", {"load.min_requests": 1000}), ("ui-other", {})):
        cfg = _cfg(uri, **extra)
        camp = make_campaign(tmp_path / ex, cfg, execution_id=ex, tpot_scale=1.3 if ex == "ui-other" else 1.0)
        runs[ex] = client(uri).get_run(log_campaign(cfg, camp))
    assert runs["ui-invalid"].info.status == "FAILED" and runs["ui-valid"].info.status == "FINISHED"
    name = {ex: r.data.tags["mlflow.runName"] for ex, r in runs.items()}
    exp_id = runs["ui-valid"].info.experiment_id
    shots = Path(os.environ.get("BENCHCAMP_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        try:
            page.goto(f"{uri}/{experiment_ui_path(exp_id)}", wait_until="domcontentloaded", timeout=120_000)
            for n in name.values():
                page.get_by_text(n, exact=True).first.wait_for(timeout=180_000)
            assert page.get_by_text(VIEW_NAME).count() >= 1  # the saved view, applied
            columns = [c for c in page.locator("[role=columnheader]").evaluate_all(
                "els => els.map(e => e.getAttribute('col-id'))") if c and c.startswith(("metrics.", "tags."))]
            assert columns[: len(HEADLINE)] == [f"metrics.`{headline_name(m)}`" for m in HEADLINE], columns
            assert _status_icon(page, name["ui-invalid"]) != _status_icon(page, name["ui-valid"])
            page.wait_for_timeout(1000)
            page.screenshot(path=str(shots / "mlflow-runs-headline.png"), full_page=True)

            ids = json.dumps([runs["ui-valid"].info.run_id, runs["ui-other"].info.run_id])
            page.goto(f"{uri}/#/compare-runs?runs={ids}&experiments={json.dumps([exp_id])}", wait_until="commit")
            page.get_by_text("Comparing 2 Runs").first.wait_for(timeout=120_000)
            chips = page.locator(".du-bois-light-select-selection-item-content")
            chips.filter(has_text=headline_name("total_tokens_per_s_per_gpu")).first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)  # the plot draws
            page.screenshot(path=str(shots / "mlflow-compare-headline.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(shots / "mlflow-ui-failure.png"), full_page=True)
            (shots / "mlflow-ui-failure.html").write_text(page.content())
            raise
        finally:
            browser.close()
