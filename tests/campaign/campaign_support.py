"""Short campaigns (helpers for tests/campaign) for the step and driver tests: the local provider, the simulated
engine as a real subprocess over loopback HTTP, tiny loads, a workload built from the
repository's spec into tmp_path, and every store (results, MLflow) under tmp_path."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The single-engine wall-clock HTTP campaign (one simulated engine deployed as a subprocess, over loopback): the
# base of the tests that run `benchcamp run` end to end over loopback HTTP.
HTTP_PARAMS = ROOT / "tests" / "params-http.yaml"


def tiny_sets(tmp: Path, **extra) -> list[str]:
    """--set overrides of a campaign that measures one point of 2 sessions in a few seconds."""
    sets = {
        "campaign.name": "tiny", "engine.model": "meta-llama/Llama-3.1-8B-Instruct",
        "engine.model_profile": "llama-3.1-8b", "engine.data_parallel_size": 1, "hardware.gpu_count": 1,
        "load.levels": "[2]", "load.warmup_s": 0.5, "load.duration_s": 3, "load.drain_s": 3,
        "load.min_requests": 1, "load.workers": 1,
        # 2 shared cores: a busy client still counts as valid (validity has its own tests)
        "load.max_error_rate": 1.0, "load.max_sched_lag_p99_ms": 10000, "load.max_client_cpu": 1.0,
        "load.max_incomplete_rate": 1.0,
        "workload.spec": str(ROOT / "workloads" / "agentic-coding.yaml"), "workload.data": str(tmp / "wl.parquet"),
        "results.store": str(tmp / "results"), "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db",
        "baselines.published": "[]",
    } | extra
    return [f"{k}={v}" for k, v in sets.items()]


def tiny_config(tmp: Path, **extra):
    from benchcamp.config import load_config
    return load_config(None, [s for s in tiny_sets(tmp, **extra)])
