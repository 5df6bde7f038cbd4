"""The nightly guard on the real vLLM (CPU build, tiny model), through the nightly DAG: each night is a
dag.test() run of benchcamp_nightly (every task in the scheduler's order, in this process), which deploys
the real engine from params.real-cpu.yaml's settings, measures one point, logs to MLflow, judges the
night against the point's history and tears the engine down.

Four unchanged nights, then the engine's prefix cache turned off (measured by
bench/regression_guard_real.py on this build: tokens/s/GPU -84%, TTFT P90 +351%). The guard needs 3
earlier nights to judge, so night 4 is the unchanged series' judged night; the planted change must be
``suspected`` on its first night and ``regressed`` on its second, with exactly one notification naming the
flag that changed. Real MLflow store, results store and notifier (log target).

Night 1 also checks what a real engine's night must leave: the engine's log from vLLM itself, its
/metrics read, and nothing of its process tree after the stop_engine teardown."""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realengine"))
from realengine_support import PRESET, engine_processes, wait_gone  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

UNCHANGED, PLANTED = 4, 2
CAMPAIGN = "guarded-real"
# what prefix caching off moves on this build (bench/regression_guard_real.py): throughput, each user's rate, TTFT
SHIFTED = ("total_tokens_per_s_per_gpu", "p90_user_tokens_per_s", "ttft_p90_s")


def _dotted(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def night_conf(tmp: Path, planted: bool) -> dict:
    overrides = _dotted(yaml.safe_load(PRESET.read_text())) | {
        # the drain (not part of the window rule) lets the planted nights' long prefills finish; unchanged
        # nights' requests end within seconds of the window, so it costs them nothing
        "campaign.name": CAMPAIGN, "load.levels": [4], "load.warmup_s": 5, "load.duration_s": 30,
        "load.drain_s": 90, "load.min_requests": 3, "load.max_sched_lag_p99_ms": 2000, "load.max_client_cpu": 1.0,
        "workload.data": str(tmp / "agentic-tiny.parquet"), "results.store": str(tmp / "results"),
        "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db", "baselines.published": [],
        # the planted change: every turn of an agent prefills its whole context again
        "engine.enable_prefix_caching": not planted,
    }
    return {"overrides": overrides, "matrix": [{}], "notify": "log"}


def _execution(tmp: Path, dr) -> Path:
    from benchcamp.provision.base import safe_name

    return tmp / "results" / CAMPAIGN / safe_name(f"{dr.dag_id}.{dr.run_id}.m0")


def _first_night_left_nothing(run: Path) -> None:
    log = (run / "engine.log").read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in log and "device_config=cpu" in log
    point = json.loads((run / "c4" / "point.json").read_text())
    assert point["server_metrics_available"] and point["server_metrics_delta"]["vllm:generation_tokens"] > 0
    engines = Path(tempfile.gettempdir()) / "benchcamp-engines" / run.name
    assert not wait_gone(engines), "the stop_engine teardown left engine processes"
    assert sorted(p.name for p in engines.iterdir()) == ["engine-argv.json", "engine.log"]  # scratch removed
    assert not engine_processes(engines)


def test_a_planted_engine_change_ends_in_one_regression_and_one_notification(
    dagbag, tmp_path, mlflow_db, vllm_install, caplog
):
    dag = dagbag.dags["benchcamp_nightly"]
    notify_log = logging.getLogger("benchcamp.verdicts.notify")
    notify_log.addHandler(caplog.handler)  # Airflow's logging setup replaced the root's handlers
    states, statuses, opened, alarms = [], [], [], []
    try:
        with caplog.at_level(logging.ERROR, logger="benchcamp.verdicts.notify"):
            for night in range(UNCHANGED + PLANTED):
                dr = dag.test(run_conf=night_conf(tmp_path, planted=night >= UNCHANGED))
                run = _execution(tmp_path, dr)
                if night == 0:
                    _first_night_left_nothing(run)
                doc = json.loads((run / "report" / "verdicts.json").read_text())
                point = json.loads((run / "c4" / "summary.json").read_text())
                assert point["valid"], f"night {night + 1}: {point['reasons']}"
                guarded = [v for v in doc["verdicts"] if v["baseline_kind"] == "historical"]
                states.append(str(dr.state))
                statuses.append({v["metric"]: v["verdict"] for v in guarded if v["metric"] in SHIFTED})
                opened.append(sorted(v["metric"] for v in guarded if v["alarm"] == "opened"))
                # one record may reach caplog twice (this logger's handler and the root's): count messages
                alarms.append(len({r.getMessage() for r in caplog.records if "REGRESSION" in r.getMessage()}))
    finally:
        notify_log.removeHandler(caplog.handler)
    series = list(zip(states, statuses, opened, alarms, strict=True))
    # the unchanged nights: green, nothing confirmed, no notification; night 4 judged against 3 earlier nights
    assert states[:UNCHANGED] == ["success"] * UNCHANGED, series
    assert not {s for n in statuses[:UNCHANGED] for s in n.values()} & {"regressed", "improved"}, series
    assert "insufficient" not in statuses[UNCHANGED - 1].values() and alarms[UNCHANGED - 1] == 0, series
    # the planted change: suspected on its first night; on its second, regressed (on whichever of the metrics it
    # moved reaches p < 0.001 over 4 + 2 nights of this box's noise), one notification, exit 3
    first, second = statuses[UNCHANGED], statuses[UNCHANGED + 1]
    assert "suspected" in first.values() and not set(first.values()) & {"regressed", "improved"}, series
    assert states[UNCHANGED] == "success" and alarms[UNCHANGED] == 0, series
    assert "regressed" in second.values() and opened[-1], series
    assert states[-1] == "failed" and alarms[-1] == 1, series
    text = next(r.getMessage() for r in caplog.records if "REGRESSION" in r.getMessage())
    assert "engine.enable_prefix_caching true -> false" in text.lower() and "began on night" in text, text
