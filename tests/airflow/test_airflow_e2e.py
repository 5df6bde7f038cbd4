"""End to end through Airflow's own servers: `airflow standalone` on a free loopback
port, the campaign triggered through the REST API with a conf, run to success.
Also drives the trigger form in headless Chromium (Playwright): coherent defaults, GPUs = -1 refused by
Trigger rather than clamped; screenshots in /tmp/benchcamp-shots.

The same run checks that no secret is at rest (issue #24): the HF token in an Airflow Variable
(named by ``hf_token_ref``), S3 credentials in the environment and the engine's own key (read from
the engine's environment while it serves) are found 0 times in the XCom entries, the rendered
fields and the task logs over REST, and in every table of the metadata DB; a second run with
secrets typed into the conf (``engine.extra_args``, the endpoint URL) is refused at resolve_config
and leaves them only where Airflow put them before any task ran: ``dag_run.conf`` and the audit log
of the trigger request (``log.extra``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from airflow_support import copy_airflow_db, scan_airflow_db, scan_text
from test_campaign_dag import _engines_left, tiny_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path("/tmp/benchcamp-shots")
# Planted in the standalone's environment: distinct, random, easy to grep.
PLANTED = {
    "hf_token (airflow variable)": f"hf-variable-{os.urandom(12).hex()}",
    "AWS_SECRET_ACCESS_KEY (env)": f"aws-secret-{os.urandom(12).hex()}",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(method: str, url: str, token: str | None = None, body: dict | None = None, timeout: float = 10):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _wait(what: str, fn, timeout: float, proc, log: Path, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"airflow standalone exited ({proc.returncode}) while waiting for {what}:\n"
                                 + log.read_text()[-3000:])
        try:
            out = fn()
            if out:
                return out
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n" + log.read_text()[-3000:])


@pytest.fixture
def standalone(tmp_path, migrated_airflow_db):
    port = _free_port()
    home = tmp_path / "airflow-home"
    home.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ,
           "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
           # no fixed ports (log servers), few executor processes (2 shared cores)
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
           "AIRFLOW__CORE__PARALLELISM": "4",
           "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
           "BENCHCAMP_PROJECT_DIR": str(ROOT), "BENCHCAMP_PARAMS": str(ROOT / "tests" / "params-http.yaml"),
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
           "AIRFLOW_VAR_BENCH_HF_TOKEN": PLANTED["hf_token (airflow variable)"],
           "AWS_SECRET_ACCESS_KEY": PLANTED["AWS_SECRET_ACCESS_KEY (env)"]}
    copy_airflow_db(migrated_airflow_db, home)  # migrated, with the pools gpu_nodes (2) and loadgen_hosts (1)
    log = tmp_path / "standalone.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([f"{bin_dir}/airflow", "standalone"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tmp_path)
    try:
        yield {"port": port, "home": home, "proc": proc, "log": log}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _browser() -> tuple[Any, str] | None:
    """(Playwright's sync_playwright, Debian's Chromium) where both are here, else None."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    return (sync_playwright, chromium) if Path(chromium).exists() else None


def _browse_trigger_form(base: str, token: str) -> Path | None:
    """The trigger form in a real browser (headless Chromium, Playwright; issue 34): the defaults are one
    coherent configuration (Topology none, GPUs = TP x DP), a campaign name field, and GPUs = -1 is neither
    clamped nor triggered: Trigger answers "Invalid input for param gpu_count" before a run exists.
    Screenshots go to SHOTS at each step (CI keeps them). None without Chromium or Playwright."""
    found = _browser()
    if found is None:
        return None
    sync_playwright, chromium = found
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "campaign-trigger-form.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        # The UI authenticates with the same JWT as the REST API, in the "_token" cookie.
        context.add_cookies([{"name": "_token", "value": token, "url": base}])
        page = context.new_page()
        try:
            page.goto(f"{base}/dags/benchcamp_campaign", wait_until="networkidle", timeout=120_000)
            page.get_by_role("button", name="Trigger").first.click(timeout=60_000)
            dialog = page.get_by_role("dialog").first
            dialog.wait_for(timeout=60_000)

            def open_section(name: str) -> None:  # one section open at a time
                dialog.get_by_text(name, exact=True).first.click()
                page.wait_for_timeout(700)

            open_section("Campaign")
            assert dialog.get_by_text("Campaign name").first.is_visible()
            open_section("Hardware")
            # Every field has a valid default: the form can be submitted as it opens.
            assert dialog.get_by_role("button", name="Trigger").last.is_enabled()
            page.screenshot(path=str(shot), full_page=True)
            assert dialog.get_by_text("none: one engine of TP x DP GPUs").first.is_visible()  # Topology's default
            # the Hardware section's number inputs, in the form's order: GPUs, Tensor parallel, Data parallel
            numbers = dialog.get_by_role("spinbutton").filter(visible=True)
            gpus, tp, dp = numbers.nth(0), numbers.nth(1), numbers.nth(2)
            assert int(gpus.input_value()) == int(tp.input_value()) * int(dp.input_value())
            gpus.fill("-1")
            gpus.press("Tab")
            page.wait_for_timeout(500)
            assert gpus.input_value() == "-1"  # not clamped to 1 without a word
            dialog.get_by_role("button", name="Trigger").last.click()
            page.get_by_text("Invalid input for param gpu_count", exact=False).first.wait_for(timeout=30_000)
            page.screenshot(path=str(SHOTS / "campaign-trigger-refused.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(SHOTS / "campaign-trigger-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    return shot


def _browse_mlflow(db: Path, tmp: Path) -> Path | None:
    """The MLflow UI on the campaign's store (`mlflow server` on loopback, headless Chromium): the experiment
    opens on its runs (benchcamp's link carries workflowType=machine_learning, the experiment its kind tag),
    the parent run listed by its name <campaign>/<model>/<gpu>/<time>. None without Chromium or Playwright."""
    found = _browser()
    if found is None:
        return None
    sync_playwright, chromium = found
    from mlflow.tracking import MlflowClient

    from benchcamp.tracking.store import WORKFLOW_TYPE, experiment_ui_path

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("dagtest")
    runs = client.search_runs([exp.experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    child = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id)
    name = parent.data.tags["mlflow.runName"]
    assert name.startswith("dagtest/Llama-3.1-8B-Instruct/h200/"), name
    port = _free_port()
    server_log = tmp / "mlflow-ui.log"
    with open(server_log, "w") as out:
        ui = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{db}"],
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp)
    base = f"http://127.0.0.1:{port}"
    shot = SHOTS / "mlflow-experiment.png"
    try:
        _wait("the MLflow UI", lambda: urllib.request.urlopen(f"{base}/health", timeout=2).status == 200, 120, ui,
              server_log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                # not networkidle: the UI keeps polling; the run's name in the table is the sign it loaded
                page.goto(f"{base}/{experiment_ui_path(exp.experiment_id)}", wait_until="domcontentloaded",
                          timeout=120_000)
                page.get_by_text(name).first.wait_for(timeout=120_000)  # the runs table, not "No data"
                page.screenshot(path=str(shot), full_page=True)
                # a point's run carries what identifies it alone (its tags on the run page)
                # the same page, another hash route: a same-document navigation (no load event to wait for)
                page.goto(f"{base}/#/experiments/{exp.experiment_id}/runs/{child.info.run_id}"
                          f"?workflowType={WORKFLOW_TYPE}", wait_until="commit")
                page.get_by_text("benchcamp.fingerprint").first.wait_for(timeout=120_000)
                for tag in ("benchcamp.gpu", "benchcamp.engine_version", "benchcamp.clock", "benchcamp.model"):
                    assert page.get_by_text(tag, exact=True).count() >= 1, tag
                assert page.get_by_text("Evaluations", exact=True).count() == 0  # not the GenAI view
                page.screenshot(path=str(SHOTS / "mlflow-point-run.png"), full_page=True)
            except Exception:
                page.screenshot(path=str(SHOTS / "mlflow-failure.png"), full_page=True)
                raise
            finally:
                browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
    return shot


def _watch_engine_keys(prefix: str, keys: set[str], stop: threading.Event) -> None:
    """The API keys of this DAG's engines, read from their environment while they serve."""
    while not stop.is_set():
        for p in psutil.process_iter():
            try:
                env = p.environ()
                if env.get("BENCHCAMP_EXECUTION_ID", "").startswith(prefix) and env.get("VLLM_API_KEY"):
                    keys.add(env["VLLM_API_KEY"])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        stop.wait(0.5)


def _rest_views(base: str, token: str, run_id: str) -> str:
    """What the REST API shows of a run: its task instances (rendered fields included), every
    XCom entry (as stored and deserialized) and every task log."""
    runs = f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/{run_id}"
    s, tis = _call("GET", f"{runs}/taskInstances?limit=100", token)
    assert s == 200, tis
    out = [json.dumps(tis)]
    for ti in tis["task_instances"]:
        task, m = urllib.request.quote(ti["task_id"], safe=""), ti["map_index"]
        s, entries = _call("GET", f"{runs}/taskInstances/{task}/xcomEntries?map_index={m}", token)
        out.append(json.dumps(entries))
        for entry in (entries.get("xcom_entries", []) if s == 200 else []):
            for q in ("", "&deserialize=true", "&deserialize=true&stringify=true"):
                out.append(json.dumps(_call("GET", f"{runs}/taskInstances/{task}/xcomEntries/{entry['key']}"
                                                   f"?map_index={m}{q}", token)[1]))
        for attempt in range(1, (ti.get("try_number") or 1) + 1):
            out.append(json.dumps(_call("GET", f"{runs}/taskInstances/{task}/logs/{attempt}?map_index={m}",
                                        token, timeout=30)[1]))
    return "\n".join(out)


def test_standalone_rest_trigger_with_conf_runs_campaign_to_success(standalone, tmp_path, mlflow_db):
    base = f"http://127.0.0.1:{standalone['port']}"
    proc, log = standalone["proc"], standalone["log"]
    _wait("the API server", lambda: _call("GET", f"{base}/api/v2/monitor/health")[0] == 200, 180, proc, log)
    pw_file = standalone["home"] / "simple_auth_manager_passwords.json.generated"
    password = _wait("the generated password", lambda: pw_file.exists() and json.loads(pw_file.read_text())["admin"],
                     60, proc, log)
    status, body = _call("POST", f"{base}/auth/token", body={"username": "admin", "password": password})
    assert status in (200, 201), body
    token = body["access_token"]
    _wait("the DAG to be parsed", lambda: _call("GET", f"{base}/api/v2/dags/benchcamp_campaign", token)[0] == 200,
          180, proc, log, every=0.5)
    assert _call("PATCH", f"{base}/api/v2/dags/benchcamp_campaign", token, {"is_paused": False})[0] == 200
    conf = tiny_conf(tmp_path)
    conf["hf_token_ref"] = "airflow-variable:bench_hf_token"
    engine_keys: set[str] = set()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_engine_keys, args=("benchcamp_campaign.", engine_keys, stop), daemon=True)
    watcher.start()
    status, run = _call("POST", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token,
                        {"logical_date": None, "conf": conf})
    assert status in (200, 201), run
    run_id = urllib.request.quote(run["dag_run_id"], safe="")

    def finished(rid=run_id):
        s, r = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/{rid}", token)
        return r["state"] if s == 200 and r["state"] in ("success", "failed") else None

    state = _wait("the campaign run", finished, 420, proc, log, every=1)
    stop.set()
    watcher.join(10)
    if state != "success":
        _, tis = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/{run_id}/taskInstances", token)
        pytest.fail(f"run {state}: " + json.dumps({t["task_id"]: t["state"] for t in tis["task_instances"]}))
    assert _engines_left("benchcamp_campaign.") == []

    # No secret at rest (#24): a run with secrets typed into its conf is refused at resolve_config...
    typed = {"--hf-token in engine.extra_args": f"hf-extra-args-{os.urandom(12).hex()}",
             "endpoint_url password": f"form-url-password-{os.urandom(12).hex()}"}
    refused_conf = tiny_conf(tmp_path, [{"engine.extra_args": ["--hf-token", typed["--hf-token in engine.extra_args"]]}])
    refused_conf["endpoint_url"] = f"http://bench:{typed['endpoint_url password']}@127.0.0.1:9"
    status, refused = _call("POST", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token,
                            {"logical_date": None, "conf": refused_conf})
    assert status in (200, 201), refused
    refused_id = urllib.request.quote(refused["dag_run_id"], safe="")
    assert _wait("the refused run", lambda: finished(refused_id), 240, proc, log) == "failed"
    # ...and neither run's XCom, rendered fields or task logs over REST, nor any table of the DB, holds a secret.
    assert len(engine_keys) == 1, "the engine's key was not seen in its environment"
    planted = {**PLANTED, "engine API key": engine_keys.pop()}
    shown = _rest_views(base, token, run_id) + _rest_views(base, token, refused_id)
    assert "engine-env:" in shown and "secret given as a value" in shown  # the views were read (controls)
    assert scan_text(shown, {**planted, **typed}) == {}
    found = scan_airflow_db(standalone["home"] / "airflow.db", {**planted, **typed})
    assert {k: v for k, v in found.items() if k in planted and v} == {}, found
    # A secret typed into the conf is stored by Airflow before any task runs: in the run's conf, and over REST
    # also in its audit log of the trigger request (log.extra). benchcamp refuses it there; nothing else holds it.
    assert {k: sorted(set(v)) for k, v in found.items() if k in typed} == {
        k: ["dag_run.conf", "log.extra"] for k in typed}, found

    shot = _browse_trigger_form(base, token)
    if shot is not None:
        assert shot.stat().st_size > 10_000
        # the refused trigger created no run: the two REST runs are all there is
        _, runs = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token)
        assert runs["total_entries"] == 2, runs
        assert _browse_mlflow(tmp_path / "mlflow.db", tmp_path).stat().st_size > 10_000
