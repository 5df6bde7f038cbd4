"""End to end through Airflow's own servers: `airflow standalone` on a free loopback port, a one-GPU
simulated campaign typed into the trigger form in headless Chromium (Playwright, the system Chromium) as a
user would (campaign name, model, H200 x 1, TP1/DP1, Topology none, levels [4], a short window; no Extra
overrides), triggered by its Trigger button and followed in the UI to success: the run's page says
Success, the sweep's log has the per-point table line, the verdict's the verdict table. Before that the
form's defaults are checked (coherent, GPUs = TP x DP) and GPUs = -1 is refused by Trigger, not clamped.
A second campaign (the same one on the virtual clock, `benchcamp run`) goes into the same MLflow store,
and the MLflow UI shows the runs, a point's tags and the compare view of the two campaigns.
Screenshots of every step go to $BENCHCAMP_ARTIFACTS (default <repo>/.ci/artifacts/airflow-e2e/), with
the page's HTML on a failure: CI keeps that folder. Without Chromium or Playwright the same values go
through the REST API and the browser steps are left out, except under BENCHCAMP_REQUIRE_BROWSER=1 (what
.ci/run sets), where the test fails instead.

The same run checks that no secret is at rest: the HF token in an Airflow Variable
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
import re
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

import benchcamp_test_services as services
import psutil
import pytest
from airflow_support import copy_airflow_db, scan_airflow_db, scan_text
from test_campaign_dag import _engines_left, tiny_conf

from bench.common.processes import poll

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # minutes of start-up on a loaded box
ROOT = Path(__file__).resolve().parents[2]
# What the browser saw (screenshots always, the page's HTML on a failure), where CI keeps it (git-ignored).
SHOTS = Path(os.environ.get("BENCHCAMP_ARTIFACTS") or ROOT / ".ci" / "artifacts") / "airflow-e2e"
# What a user types into the trigger form for a one-GPU campaign (field -> value); the REST fallback sends
# the same values as the conf. Everything else keeps the form's defaults (the deployment's params file).
FORM = {"campaign_name": "dagtest", "model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b",
        "hf_token_ref": "airflow-variable:bench_hf_token", "enable_expert_parallel": False, "gpu": "h200",
        "gpu_count": 1, "tensor_parallel_size": 1, "data_parallel_size": 1, "topology": "none", "levels": [4],
        "warmup_s": 0.5, "duration_s": 4.0}
# Planted in the standalone's environment: distinct, random, easy to grep.
PLANTED = {
    "hf_token (airflow variable)": f"hf-variable-{os.urandom(12).hex()}",
    "AWS_SECRET_ACCESS_KEY (env)": f"aws-secret-{os.urandom(12).hex()}",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(method: str, url: str, token: str | None = None, body: dict | None = None, timeout: float = 60):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _wait(what: str, fn, timeout: float, proc, log: Path, every: float = 1.0):
    def alive() -> None:
        if proc.poll() is not None:
            raise AssertionError(f"airflow standalone exited ({proc.returncode}) while waiting for {what}:\n"
                                 + log.read_text()[-3000:])

    return poll(what, fn, timeout, every, alive, lambda: log.read_text()[-3000:])


def _deployment_params(tmp: Path) -> Path:
    """The deployment's params file (what BENCHCAMP_PARAMS names on a real Airflow): the HTTP campaign's
    (tests/params-http.yaml, DeepSeek-V3 on 8 x H200) with this test's store, MLflow and workload under
    ``tmp`` and validity loose enough for 2 shared cores (validity has its own tests). The form's
    defaults come from it; what the user types replaces them."""
    import yaml

    params = yaml.safe_load((ROOT / "tests" / "params-http.yaml").read_text())
    params["load"].update({"drain_s": 3, "min_requests": 1, "workers": 1, "max_error_rate": 1.0,
                           "max_sched_lag_p99_ms": 10000, "max_client_cpu": 1.0, "max_incomplete_rate": 1.0})
    params["workload"]["data"] = str(tmp / "workload.parquet")
    params["results"]["store"] = str(tmp / "results")
    params["tracking"]["mlflow_uri"] = f"sqlite:///{tmp}/mlflow.db"
    path = tmp / "params-deployment.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture
def standalone(tmp_path, migrated_airflow_db):
    port = _free_port()
    params = _deployment_params(tmp_path)
    home = tmp_path / "airflow-home"
    home.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ,
           "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__DEFAULT_WRAP": "True",  # as scripts/airflow-local.sh
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
           # no fixed ports (log servers), few executor processes (2 shared cores)
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
           "AIRFLOW__CORE__PARALLELISM": "4",
           "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
           "BENCHCAMP_PROJECT_DIR": str(ROOT), "BENCHCAMP_PARAMS": str(params),
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
           "AIRFLOW_VAR_BENCH_HF_TOKEN": PLANTED["hf_token (airflow variable)"],
           "AWS_SECRET_ACCESS_KEY": PLANTED["AWS_SECRET_ACCESS_KEY (env)"]}
    copy_airflow_db(migrated_airflow_db, home)  # migrated, with the pools gpu_nodes (2) and loadgen_hosts (1)
    log = tmp_path / "standalone.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([f"{bin_dir}/airflow", "standalone"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tmp_path)
    try:
        yield {"port": port, "home": home, "proc": proc, "log": log, "params": params, "env": env}
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


def _shoot(page, name: str, html: bool = False) -> Path:
    """A full-page screenshot into SHOTS (and the page's HTML beside it when ``html``, for a failure)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if html:
        (SHOTS / f"{name}.html").write_text(page.content())
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    return SHOTS / f"{name}.png"


def _fill_form(page, dialog) -> None:
    """FORM typed into the open trigger form as a user types it, section by section."""

    def open_section(name: str) -> None:  # a section's header toggles it: one open at a time
        dialog.get_by_text(name, exact=True).first.click()
        page.wait_for_timeout(500)

    def choose(label: str, value: str) -> None:  # a select field: type the choice, Enter
        box = dialog.locator(f"xpath=//*[normalize-space(text())='{label}']/ancestor::*[.//input[@role='combobox']]"
                             "[1]//input[@role='combobox']").first
        box.click()
        box.fill(value)
        box.press("Enter")

    open_section("Campaign")
    dialog.locator("#element_campaign_name").fill(FORM["campaign_name"])
    open_section("Campaign")
    open_section("Engine")
    dialog.locator("#element_model").fill(FORM["model"])
    dialog.locator("#element_hf_token_ref").fill(FORM["hf_token_ref"])
    choose("Model profile", FORM["model_profile"])
    expert = dialog.locator("[name=element_enable_expert_parallel]")
    if expert.is_checked() != FORM["enable_expert_parallel"]:
        expert.locator("xpath=..").click()  # the switch's visible part
    _shoot(page, "1-form-engine")
    open_section("Engine")
    open_section("Hardware")
    assert dialog.get_by_text("none: one engine of TP x DP GPUs").first.is_visible()  # Topology: none
    for name in ("gpu_count", "tensor_parallel_size", "data_parallel_size"):
        dialog.locator(f"[name=element_{name}]").fill(str(FORM[name]))
    _shoot(page, "2-form-hardware")
    open_section("Hardware")
    open_section("Load")
    # Sweep levels is a JSON editor: emptied it reads [], then the level goes between the brackets
    levels = dialog.locator(".monaco-editor").first
    levels.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    page.wait_for_timeout(300)
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    page.keyboard.type(",".join(str(v) for v in FORM["levels"]))
    assert json.loads(levels.locator(".view-lines").inner_text().replace("\xa0", " ")) == FORM["levels"]
    dialog.locator("[name=element_warmup_s]").fill(str(FORM["warmup_s"]))
    dialog.locator("[name=element_duration_s]").fill(str(FORM["duration_s"]))
    page.keyboard.press("Tab")
    page.wait_for_timeout(300)
    _shoot(page, "3-form-load")


def _form_campaign(found, base: str, token: str, after_trigger, proc, log: Path) -> str:
    """The trigger form in a real browser: the defaults are one coherent configuration
    (Topology none, GPUs = TP x DP, a campaign name field); GPUs = -1 is neither clamped nor triggered;
    then FORM typed in, Trigger clicked (``after_trigger()`` runs at once) and the run followed on its
    page to Success, and its sweep and verdict logs read. Returns the run's id."""
    sync_playwright, chromium = found
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
            dialog.get_by_text("Campaign", exact=True).first.click()
            page.wait_for_timeout(500)
            assert dialog.get_by_text("Campaign name").first.is_visible()
            # the form opens on the first-run preset; the rack-scale campaign of params.yaml is the other choice
            assert dialog.get_by_text("First run: Llama-3.1-8B on 1 x H200", exact=False).first.is_visible()
            _shoot(page, "0-form-preset")
            dialog.get_by_text("Campaign", exact=True).first.click()
            dialog.get_by_text("Hardware", exact=True).first.click()
            page.wait_for_timeout(500)
            # Every field has a valid default: the form can be submitted as it opens.
            assert dialog.get_by_role("button", name="Trigger").last.is_enabled()
            _shoot(page, "0-form-defaults")
            gpus, tp, dp = (dialog.locator(f"[name=element_{n}]")
                            for n in ("gpu_count", "tensor_parallel_size", "data_parallel_size"))
            assert int(gpus.input_value()) == int(tp.input_value()) * int(dp.input_value())
            gpus.fill("-1")
            gpus.press("Tab")
            page.wait_for_timeout(300)
            assert gpus.input_value() == "-1"  # not clamped to 1 without a word
            dialog.get_by_role("button", name="Trigger").last.click()
            page.get_by_text("Invalid input for param gpu_count", exact=False).first.wait_for(timeout=30_000)
            _shoot(page, "0-form-refused-gpus")
            dialog.get_by_text("Hardware", exact=True).first.click()  # closed: _fill_form opens each section
            page.wait_for_timeout(300)
            _fill_form(page, dialog)
            dialog.get_by_role("button", name="Trigger").last.click()
            page.wait_for_url("**/dags/benchcamp_campaign/runs/**", timeout=60_000)  # the UI opens the run's page
            run_id = urllib.request.unquote(page.url.split("/runs/", 1)[1].split("/")[0])
            after_trigger()
            badge = page.locator("[data-testid=header-card] [data-testid=state-badge]").first
            deadline = time.monotonic() + 420
            state, reloaded = "", time.monotonic()
            while time.monotonic() < deadline:
                assert proc.poll() is None, "airflow standalone exited:\n" + log.read_text()[-3000:]
                state = badge.inner_text(timeout=60_000).strip() if badge.count() else ""
                if state in ("Success", "Failed"):
                    break
                if time.monotonic() - reloaded > 30:  # the page polls the run; reload in case it stopped
                    page.reload(wait_until="domcontentloaded")
                    reloaded = time.monotonic()
                page.wait_for_timeout(2000)
            _shoot(page, "4-run")
            assert state == "Success", f"the run's page says {state!r}"
            run_page = f"{base}/dags/benchcamp_campaign/runs/{urllib.request.quote(run_id, safe='')}"
            # the sweep's log: a table line per point as it finished
            page.goto(f"{run_page}/tasks/engine_config.sweep/mapped/0", wait_until="domcontentloaded")
            page.get_by_text("P90 user tok/s").first.wait_for(timeout=60_000)
            text = page.locator("body").inner_text()
            assert re.search(r"\bc4\s+yes\s+\d+\s+[\d,]+\s+[\d.]+\s+[\d.]+\s+[\d.]+%", text), text[-2000:]
            _shoot(page, "5-log-sweep")
            # the verdict's log: the verdict table (the published record: a simulation is not comparable)
            page.goto(f"{run_page}/tasks/verdict", wait_until="domcontentloaded")
            page.get_by_text("not_comparable").first.wait_for(timeout=60_000)
            text = page.locator("body").inner_text()
            assert "baseline value" in text and "agentx-vllm-deepseek" in text, text[-2000:]
            _shoot(page, "6-log-verdict")
            return run_id
        except Exception:
            _shoot(page, "airflow-failure", html=True)
            raise
        finally:
            browser.close()


def _browse_mlflow(found, db: Path, tmp: Path) -> None:
    """The MLflow UI on the campaigns' store (`mlflow server` on loopback, headless Chromium): the experiment
    opens on its runs (benchcamp's link carries workflowType=machine_learning, the experiment its kind tag),
    both campaigns listed by their names <campaign>/<model>/<gpu>/<time>; a point's run shows the tags that
    identify it; the compare view of the two campaigns shows both with their headline metrics."""
    sync_playwright, chromium = found
    from mlflow.tracking import MlflowClient

    from benchcamp.tracking.store import WORKFLOW_TYPE, experiment_ui_path

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("dagtest")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    parents = [r for r in runs if r.data.tags.get("benchcamp.role") == "campaign"]
    assert len(parents) == 2, [r.data.tags.get("mlflow.runName") for r in parents]  # the form's, the virtual one
    child = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id)
    names = [r.data.tags["mlflow.runName"] for r in parents]
    assert all(n.startswith("dagtest/Llama-3.1-8B-Instruct/h200/") for n in names), names
    port = _free_port()
    server_log = tmp / "mlflow-ui.log"
    with open(server_log, "w") as out:
        ui = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{db}"],
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait("the MLflow UI", lambda: urllib.request.urlopen(f"{base}/health", timeout=2).status == 200, 120, ui,
              server_log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            try:
                # not networkidle: the UI keeps polling; the runs' names in the table are the sign it loaded
                page.goto(f"{base}/{experiment_ui_path(exp.experiment_id)}", wait_until="domcontentloaded",
                          timeout=120_000)
                for name in names:  # the runs table, not "No data"
                    page.get_by_text(name).first.wait_for(timeout=120_000)
                _shoot(page, "7-mlflow-experiment")
                # a point's run carries what identifies it alone (its tags on the run page)
                # the same page, another hash route: a same-document navigation (no load event to wait for)
                page.goto(f"{base}/#/experiments/{exp.experiment_id}/runs/{child.info.run_id}"
                          f"?workflowType={WORKFLOW_TYPE}", wait_until="commit")
                page.get_by_text("benchcamp.fingerprint").first.wait_for(timeout=120_000)
                for tag in ("benchcamp.gpu", "benchcamp.engine_version", "benchcamp.clock", "benchcamp.model"):
                    assert page.get_by_text(tag, exact=True).count() >= 1, tag
                assert page.get_by_text("Evaluations", exact=True).count() == 0  # not the GenAI view
                _shoot(page, "8-mlflow-point-run")
                # the two campaigns compared: MLflow's compare-runs view (what "Compare" opens from the table)
                ids = json.dumps([r.info.run_id for r in parents])
                page.goto(f"{base}/#/compare-runs?runs={ids}&experiments={json.dumps([exp.experiment_id])}",
                          wait_until="commit")
                page.get_by_text("Comparing 2 Runs").first.wait_for(timeout=120_000)
                for name in names:
                    assert page.get_by_text(name).count() >= 1, name
                assert page.get_by_text("load.clock").count() >= 1  # what differs: wall vs virtual
                # verdict tags with fixed keys: one row for both runs (the first judged against the published
                # record, the second against the first too)
                assert page.get_by_text("benchcamp.verdict.total_tokens_per_s_per_gpu.published", exact=True).count()
                assert page.get_by_text("benchcamp.verdict.total_tokens_per_s_per_gpu.history", exact=True).count()
                # the plot starts on MLflow's first metric name: the headline throughput (benchcamp.tracking.store)
                chips = page.locator(".du-bois-light-select-selection-item-content")
                chips.filter(has_text="Headline/1_total_tokens_per_s_per_gpu").first.wait_for(timeout=30_000)
                page.wait_for_timeout(1000)  # the plot redraws
                _shoot(page, "9-mlflow-compare")
            except Exception:
                _shoot(page, "mlflow-failure", html=True)
                raise
            finally:
                browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)


def _watch_engine_keys(prefix: str, keys: dict[str, set[str]], stop: threading.Event) -> None:
    """The API keys of this DAG's engines by execution id, read from their environment while they serve
    (by execution id: on a shared machine other tests' DAG runs serve engines of the same DAG id)."""
    while not stop.is_set():
        for p in psutil.process_iter():
            try:
                env = p.environ()
                execution = env.get("BENCHCAMP_EXECUTION_ID", "")
                if execution.startswith(prefix) and env.get("VLLM_API_KEY"):
                    keys.setdefault(execution, set()).add(env["VLLM_API_KEY"])
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


def _second_campaign(params: Path, tmp: Path) -> subprocess.Popen:
    """The form's campaign again on the virtual clock (`benchcamp run`, seconds, no engine process), into the
    same MLflow store: a second real parent run for MLflow's compare view (judged against the first)."""
    sets = {"campaign.name": FORM["campaign_name"], "engine.model": FORM["model"],
            "engine.model_profile": FORM["model_profile"], "engine.enable_expert_parallel": "false",
            "hardware.gpu_count": 1, "engine.tensor_parallel_size": 1, "engine.data_parallel_size": 1,
            "load.levels": "[4]", "load.warmup_s": FORM["warmup_s"], "load.duration_s": FORM["duration_s"],
            "load.clock": "virtual",
            # the first-run preset's workload (the form's run measured it), found from this test's folder
            "workload.spec": str(ROOT / "workloads" / "agentic-coding.yaml")}
    argv = [str(Path(sys.executable).with_name("benchcamp")), "run", "--params", str(params),
            "--reports", str(tmp / "reports"), *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]
    return subprocess.Popen(argv, stdout=open(tmp / "second-campaign.log", "w"), stderr=subprocess.STDOUT, cwd=tmp)


def test_standalone_form_trigger_runs_campaign_to_success(standalone, tmp_path, mlflow_db):
    base = f"http://127.0.0.1:{standalone['port']}"
    proc, log = standalone["proc"], standalone["log"]
    # a loaded machine (the suite beside it) takes minutes to start the API server
    _wait("the API server", lambda: _call("GET", f"{base}/api/v2/monitor/health")[0] == 200, 480, proc, log)
    pw_file = standalone["home"] / "simple_auth_manager_passwords.json.generated"
    password = _wait("the generated password", lambda: pw_file.exists() and json.loads(pw_file.read_text())["admin"],
                     60, proc, log)
    status, body = _call("POST", f"{base}/auth/token", body={"username": "admin", "password": password})
    assert status in (200, 201), body
    token = body["access_token"]
    _wait("the DAG to be parsed", lambda: _call("GET", f"{base}/api/v2/dags/benchcamp_campaign", token)[0] == 200,
          180, proc, log, every=0.5)
    engine_keys: dict[str, set[str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_engine_keys, args=("benchcamp_campaign.", engine_keys, stop), daemon=True)
    watcher.start()

    def finished(rid: str):
        s, r = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/{urllib.request.quote(rid, safe='')}",
                     token)
        return r["state"] if s == 200 and r["state"] in ("success", "failed") else None

    # No secret at rest: a run with secrets typed into its conf, triggered over REST while the form's
    # campaign runs (it ends at resolve_config), is refused...
    typed = {"--hf-token in engine.extra_args": f"hf-extra-args-{os.urandom(12).hex()}",
             "endpoint_url password": f"form-url-password-{os.urandom(12).hex()}"}
    refused_conf = tiny_conf(tmp_path, [{"engine.extra_args": ["--hf-token", typed["--hf-token in engine.extra_args"]]}])
    refused_conf["endpoint_url"] = f"http://bench:{typed['endpoint_url password']}@127.0.0.1:9"
    refused: dict[str, str] = {}

    def trigger_refused() -> None:
        status, run = _call("POST", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token,
                            {"logical_date": None, "conf": refused_conf})
        assert status in (200, 201), run
        refused["id"] = run["dag_run_id"]

    found = _browser()
    if found is None:
        services.absent("browser", "no Chromium or Playwright here: the form and the MLflow UI go unchecked")
    if found is not None:
        run_id = _form_campaign(found, base, token, trigger_refused, proc, log)
    else:  # no browser here: the same values through the REST API
        assert _call("PATCH", f"{base}/api/v2/dags/benchcamp_campaign", token, {"is_paused": False})[0] == 200
        status, run = _call("POST", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token,
                            {"logical_date": None, "conf": dict(FORM)})
        assert status in (200, 201), run
        run_id = run["dag_run_id"]
        trigger_refused()
    state = _wait("the campaign run", lambda: finished(run_id), 420, proc, log, every=1)
    stop.set()
    watcher.join(10)
    if state != "success":
        _, tis = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/"
                              f"{urllib.request.quote(run_id, safe='')}/taskInstances", token)
        pytest.fail(f"run {state}: " + json.dumps({t["task_id"]: t["state"] for t in tis["task_instances"]}))
    from benchcamp.provision.base import safe_name

    execution = safe_name(f"benchcamp_campaign.{run_id}.m0")  # the form run's one engine configuration
    assert _engines_left(execution) == []
    _, conf = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns/{urllib.request.quote(run_id, safe='')}",
                    token)
    assert {k: conf["conf"][k] for k in FORM} == FORM and conf["conf"]["overrides"] == {}  # typed, no Extra
    second = _second_campaign(standalone["params"], tmp_path)  # meanwhile: the secrets' checks

    assert _wait("the refused run", lambda: finished(refused["id"]), 240, proc, log) == "failed"
    # ...and neither run's XCom, rendered fields or task logs over REST, nor any table of the DB, holds a secret.
    assert len(engine_keys.get(execution, ())) == 1, f"the engine's key was not seen in its environment: {engine_keys}"
    planted = {**PLANTED, "engine API key": engine_keys[execution].pop()}
    shown = (_rest_views(base, token, urllib.request.quote(run_id, safe=""))
             + _rest_views(base, token, urllib.request.quote(refused["id"], safe="")))
    assert "engine-env:" in shown and "secret given as a value" in shown  # the views were read (controls)
    assert scan_text(shown, {**planted, **typed}) == {}
    found_at = scan_airflow_db(standalone["home"] / "airflow.db", {**planted, **typed})
    assert {k: v for k, v in found_at.items() if k in planted and v} == {}, found_at
    # A secret typed into the conf is stored by Airflow before any task runs: in the run's conf, and over REST
    # also in its audit log of the trigger request (log.extra). benchcamp refuses it there; nothing else holds it.
    assert {k: sorted(set(v)) for k, v in found_at.items() if k in typed} == {
        k: ["dag_run.conf", "log.extra"] for k in typed}, found_at
    # the refused trigger of the form created no run: the form's and the REST one are all there is
    _, runs = _call("GET", f"{base}/api/v2/dags/benchcamp_campaign/dagRuns", token)
    assert runs["total_entries"] == 2, runs

    assert second.wait(timeout=240) == 0, (tmp_path / "second-campaign.log").read_text()[-3000:]
    if found is not None:
        _browse_mlflow(found, tmp_path / "mlflow.db", tmp_path)
