"""Infeasible campaigns are refused before any node is provisioned, in one line with the form's labels and a fix
that is true (the fix is applied and passes the same checks); the form's first-run preset passes them all and
its params.yaml preset is the file's campaign. On the repository's params.yaml and workloads, as a user meets
them; no engine is started (seconds)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchcamp.campaign import form
from benchcamp.campaign.feasible import check_workload
from benchcamp.config import ConfigError, load_config
from benchcamp.workload import ensure_workload

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "params.yaml"


@pytest.fixture
def defaults(monkeypatch):
    """The manual form as it opens on the repository's params.yaml."""
    monkeypatch.setattr(form, "PARAMS_FILE", PARAMS)  # the Airflow tests point it at tests/params-http.yaml
    return {k: spec["default"] for k, spec in form.form_fields().items()}


def _refused(values: dict) -> str:
    with pytest.raises(ConfigError) as err:
        form.resolve_items(values, "benchcamp_campaign", "manual__x", PARAMS)
    line = str(err.value)
    assert "\n" not in line and "invalid configuration in" not in line, line
    return line


def test_tp_times_dp_not_the_gpus_is_refused_in_the_form_s_labels(defaults):
    line = _refused(dict(defaults, tensor_parallel_size=3, data_parallel_size=8, gpu_count=8))
    assert "Tensor parallel (engine.tensor_parallel_size)=3" in line and "GPUs (hardware.gpu_count)=8" in line
    assert not line.startswith("matrix[")  # one engine configuration: no matrix index to read past


def test_weights_that_do_not_fit_are_refused_with_a_layout_that_does(defaults):
    rack = dict(defaults, model="deepseek-ai/DeepSeek-V4.1-Flash", model_profile="deepseek-v4.1-flash",
                enable_expert_parallel=True, gpu="gb300", gpu_count=1, tensor_parallel_size=1, data_parallel_size=1)
    line = _refused(rack)
    assert "does not fit in GPU type (hardware.gpu) gb300's memory" in line and "on one GPU it shares nothing" in line
    fix = re.search(r"it fits on (\d+) GPUs: set GPUs \(hardware.gpu_count\)=(\d+), Tensor parallel "
                    r"\(engine.tensor_parallel_size\)=(\d+), Data parallel \(engine.data_parallel_size\)=(\d+)", line)
    assert fix, line
    gpus, tp, dp = int(fix[2]), int(fix[3]), int(fix[4])
    assert gpus > 1 and tp * dp == gpus
    # the fix is true: typed into the form, the same campaign resolves
    [item] = form.resolve_items(dict(rack, gpu_count=gpus, tensor_parallel_size=tp, data_parallel_size=dp),
                                "benchcamp_campaign", "manual__x", PARAMS)
    assert item.config["hardware"]["gpu_count"] == gpus


def test_a_model_id_outside_the_profiles_is_refused_with_the_ones_there_are(defaults):
    line = _refused(dict(defaults, model="nonsense/model"))
    assert "Model (engine.model)='nonsense/model' is in no model profile" in line
    assert "meta-llama/Llama-3.1-8B-Instruct" in line
    line = _refused(dict(defaults, model_profile="deepseek-v3"))  # Llama's id served with DeepSeek's performance
    assert "set Model profile (engine.model_profile)=llama-3.1-8b" in line


def _cfg(values: dict):
    [item] = form.resolve_items(values, "benchcamp_campaign", "manual__x", PARAMS)
    from benchcamp.config import from_dict

    cfg = from_dict(item.config, "test")
    return cfg, ensure_workload(cfg.workload)[0]


def test_a_context_longer_than_the_model_s_is_refused_before_provisioning(defaults):
    cfg, workload = _cfg(dict(defaults, workload="agentx-like"))  # Llama-3.1-8B's 131,072 tokens
    with pytest.raises(ConfigError, match=r"workload.name=agentx-like: its longest request needs [\d,]+ tokens"):
        check_workload(cfg, workload)


def test_a_window_too_short_for_min_requests_is_refused_with_a_duration_that_could_hold_them(defaults):
    cfg, workload = _cfg(dict(defaults, levels=[4], warmup_s=0.5, duration_s=4.0))
    with pytest.raises(ConfigError) as err:
        check_workload(cfg, workload)
    line = str(err.value)
    assert "fewer than load.min_requests=20" in line, line
    need = int(re.search(r"set load.duration_s to at least (\d+)", line)[1])
    cfg, workload = _cfg(dict(defaults, levels=[4], warmup_s=0.5, duration_s=float(need)))
    check_workload(cfg, workload)  # the duration named passes the same check


def test_the_first_run_preset_passes_every_check_and_params_yaml_is_one_choice_away(defaults):
    assert defaults["preset"] == "first-run" and defaults["gpu_count"] == 1
    cfg, workload = _cfg(defaults)
    check_workload(cfg, workload)
    assert cfg.topology is None and cfg.load.clock == "wall"
    [item] = form.resolve_items(dict(defaults, preset="params.yaml"), "benchcamp_campaign", "manual__x", PARAMS)
    assert item.fingerprint == load_config(PARAMS).fingerprint()  # the rack-scale campaign, as the file has it
