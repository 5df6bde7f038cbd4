"""The trigger form of the campaign DAG: Params built from params.yaml at parse time.

Cheap on purpose (yaml + airflow.sdk.Param only): the DAG processor parses
this file often. Each form field maps to one dotted config key; empty fields
keep params.yaml's value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from airflow.sdk import Param

PROJECT_DIR = Path(os.environ.get("BENCHCAMP_PROJECT_DIR") or Path(__file__).resolve().parents[1])
PARAMS_FILE = Path(os.environ.get("BENCHCAMP_PARAMS") or PROJECT_DIR / "params.yaml")

# form field -> dotted config key
FIELDS: dict[str, str] = {
    "provider": "provider.kind",
    "endpoint_url": "provider.endpoint.url",
    "engine_kind": "engine.kind",
    "engine_version": "engine.version",
    "model": "engine.model",
    "model_profile": "engine.model_profile",
    "gpu": "hardware.gpu",
    "gpu_count": "hardware.gpu_count",
    "tensor_parallel_size": "engine.tensor_parallel_size",
    "data_parallel_size": "engine.data_parallel_size",
    "enable_expert_parallel": "engine.enable_expert_parallel",
    "max_num_seqs": "engine.max_num_seqs",
    "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "workload": "workload.name",
    "load_mode": "load.mode",
    "levels": "load.levels",
    "warmup_s": "load.warmup_s",
    "duration_s": "load.duration_s",
    "pricing_profile": "pricing.profile",
    "baseline_run_id": "baselines.run_id",
}


def _defaults() -> dict[str, Any]:
    try:
        data = yaml.safe_load(PARAMS_FILE.read_text()) or {}
    except (OSError, yaml.YAMLError):
        data = {}  # the form still renders; resolve_config reports the real error
    out = {}
    for name, dotted in FIELDS.items():
        node: Any = data
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[name] = node
    return out


def _choices(folder: str, suffix: str) -> list[str]:
    return sorted(p.name[: -len(suffix)] for p in (PROJECT_DIR / folder).glob(f"*{suffix}")) if (PROJECT_DIR / folder).is_dir() else []


def campaign_params() -> dict[str, Param]:
    d = _defaults()
    workloads = _choices("workloads", ".yaml") or [d["workload"] or "agentic-coding"]
    profiles = _choices("benchcamp/engine/profiles/models", ".yaml") or [d["model_profile"] or "deepseek-v3"]
    pricing = _pricing_profiles() or [d["pricing_profile"] or "deepseek-v3-offpeak"]

    def p(default, type_, title, description, section, **kw) -> Param:
        return Param(default, type=type_, title=title, description=description, section=section, **kw)

    return {
        "provider": p(d["provider"] or "local", "string", "Provider",
                      "Where the engine runs: local subprocess, an EC2 GPU node, or an existing endpoint.",
                      "Where", enum=["local", "ec2", "endpoint"]),
        # Optional text fields take null: the UI treats an empty string as a missing required value.
        "endpoint_url": p(d["endpoint_url"] or None, ["null", "string"], "Endpoint URL",
                          "Base URL when provider=endpoint (without /v1); the key comes from the Airflow "
                          "connection in params.yaml (provider.endpoint.airflow_conn_id).", "Where"),
        "engine_kind": p(d["engine_kind"] or "simulated", "string", "Engine",
                         "vllm on a GPU node; simulated = benchcamp's drop-in engine (no GPU needed).",
                         "Engine", enum=["vllm", "simulated"]),
        "engine_version": p(str(d["engine_version"] or "0.11.0"), "string", "vLLM version",
                            "Pinned vLLM release (container tag v<version> or pip vllm==<version>).", "Engine",
                            pattern=r"^\d+\.\d+\.\d+([a-z0-9.+-]*)$"),
        "model": p(d["model"] or "deepseek-ai/DeepSeek-V3", "string", "Model",
                   "Hugging Face model id served by vLLM.", "Engine", minLength=1),
        "model_profile": p(d["model_profile"] or "deepseek-v3", "string", "Model profile",
                           "Performance profile of the model for the simulated engine.", "Engine", enum=profiles),
        "gpu": p(d["gpu"] or "h200", "string", "GPU type", "GPU model of the node.", "Hardware",
                 enum=["h100-sxm", "h200", "b200", "mi300x"]),
        "gpu_count": p(int(d["gpu_count"] or 8), "integer", "GPUs", "GPUs in the node (= TP x DP).", "Hardware",
                       minimum=1, maximum=64),
        "tensor_parallel_size": p(int(d["tensor_parallel_size"] or 1), "integer", "Tensor parallel",
                                  "--tensor-parallel-size", "Engine", minimum=1, maximum=64),
        "data_parallel_size": p(int(d["data_parallel_size"] or 1), "integer", "Data parallel",
                                "--data-parallel-size", "Engine", minimum=1, maximum=64),
        "enable_expert_parallel": p(bool(d["enable_expert_parallel"]), "boolean", "Expert parallel",
                                    "--enable-expert-parallel (MoE models).", "Engine"),
        "max_num_seqs": p(int(d["max_num_seqs"] or 256), "integer", "Max sequences",
                          "--max-num-seqs: concurrent sequences per engine.", "Engine", minimum=1, maximum=65536),
        "max_num_batched_tokens": p(int(d["max_num_batched_tokens"] or 8192), "integer", "Max batched tokens",
                                    "--max-num-batched-tokens: tokens per scheduler step.", "Engine",
                                    minimum=1, maximum=1048576),
        "workload": p(d["workload"] or workloads[0], "string", "Workload",
                      "Workload spec under workloads/ (DVC-tracked).", "Load", enum=workloads),
        "load_mode": p(d["load_mode"] or "closed", "string", "Load mode",
                       "closed: concurrent sessions; open: session arrivals/s; trace: time scale.", "Load",
                       enum=["closed", "open", "trace"]),
        "levels": p(list(d["levels"] or [8, 32]), "array", "Sweep levels",
                    "One sweep point per level (sessions, sessions/s or time scale).", "Load",
                    items={"type": "number", "exclusiveMinimum": 0}, minItems=1, maxItems=32),
        "warmup_s": p(float(d["warmup_s"] if d["warmup_s"] is not None else 10), "number", "Warm-up (s)",
                      "Excluded from the measurement window.", "Load", minimum=0, maximum=3600),
        "duration_s": p(float(d["duration_s"] or 40), "number", "Duration (s)",
                        "Measurement window per point.", "Load", exclusiveMinimum=0, maximum=86400),
        "pricing_profile": p(d["pricing_profile"] or pricing[0], "string", "Pricing profile",
                             "API prices used for revenue per GPU-hour.", "Results", enum=pricing),
        "baseline_run_id": p(d["baseline_run_id"] or None, ["null", "string"], "Baseline run",
                             "MLflow run id to compare with (empty: marked baseline + recent history).", "Results"),
        "matrix": p([{}], "array", "Engine matrix",
                    "One node + sweep per entry; each entry is a dict of dotted overrides applied on top of "
                    "the fields above, e.g. [{}, {\"engine.max_num_seqs\": 128}].", "Matrix",
                    items={"type": "object"}, minItems=1, maxItems=16),
        "overrides": p({}, "object", "Extra overrides",
                       "Any other config key as dotted overrides, e.g. {\"load.max_requests\": 200}.", "Matrix"),
        "notify": p("log", "string", "Notify on failure",
                    "log, email:<address>, or slack:<airflow connection id holding the webhook URL>.", "Results",
                    pattern=r"^(log|email:.+@.+|slack:[A-Za-z0-9_.-]+)$"),
    }


def _pricing_profiles() -> list[str]:
    f = PROJECT_DIR / "benchcamp" / "data" / "pricing.yaml"
    try:
        data = yaml.safe_load(f.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    profiles = data.get("profiles", data) if isinstance(data, dict) else {}
    if isinstance(profiles, dict):
        return sorted(profiles)
    if isinstance(profiles, list):
        return sorted(p.get("name") for p in profiles if isinstance(p, dict) and p.get("name"))
    return []
