"""The trigger form of the campaign DAGs and the matrix it resolves to, derived from the config schema.

Each form field maps to one dotted config key. Its type, enum and bounds come
from the schema (``benchcamp.config.Config``, the validator of params.yaml),
its default from params.yaml (else the schema's default), the model, GPU and
engine profile choices from the profile files (benchcamp/profiles/*/*.yaml,
and the folders of BENCHCAMP_PROFILE_PATH, searched as the simulator searches them) and
the pricing choices from benchcamp/data/pricing.yaml: nothing is kept twice.
Only titles, help texts and form-only fields (matrix, overrides, notify) live
here. No airflow import (dags/ wraps each field in a Param); cheap on purpose
(yaml, pydantic): the DAG processor parses the DAGs often. Empty fields keep
params.yaml's value.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(os.environ.get("BENCHCAMP_PROJECT_DIR") or Path(__file__).resolve().parents[2])
PARAMS_FILE = Path(os.environ.get("BENCHCAMP_PARAMS") or PROJECT_DIR / "params.yaml")
# benchcamp's data files, found without importing it (parsing must stay cheap)
_SPEC = importlib.util.find_spec("benchcamp")
PACKAGE_DIR = Path(next(iter((_SPEC and _SPEC.submodule_search_locations) or [])))

# form field -> (dotted config key, section, title, help)
FIELDS: dict[str, tuple[str, str, str, str]] = {
    "provider": (
        "provider.kind",
        "Where",
        "Provider",
        "Where the engine runs: local subprocess, an EC2 GPU node, or an existing endpoint.",
    ),
    "endpoint_url": (
        "provider.endpoint.url",
        "Where",
        "Endpoint URL",
        (
            "Base URL when provider=endpoint (without /v1), with no password in it; the key comes from the "
            "Airflow connection in params.yaml (provider.endpoint.airflow_conn_id)."
        ),
    ),
    "engine_kind": (
        "engine.kind",
        "Engine",
        "Engine",
        "vllm on a GPU node; simulated = benchcamp's drop-in engine (no GPU needed).",
    ),
    "engine_version": (
        "engine.version",
        "Engine",
        "vLLM version",
        "Pinned vLLM release (container tag v<version> or pip vllm==<version>).",
    ),
    "model": ("engine.model", "Engine", "Model", "Hugging Face model id served by vLLM."),
    "hf_token_ref": (
        "engine.hf_token_ref",
        "Engine",
        "Hugging Face token (reference)",
        "Where the token lives, never the token: airflow-variable:KEY or airflow-conn:ID (Airflow "
        "variables, connections or a secrets backend), env:NAME on the workers, or file:/path (mode 600). "
        "A secret typed anywhere in this form is refused: Airflow would store it.",
    ),
    "model_profile": (
        "engine.model_profile",
        "Engine",
        "Model profile",
        "Performance profile of the model for the simulated engine.",
    ),
    "engine_profile": (
        "engine.engine_profile",
        "Engine",
        "Engine profile",
        "Engine profile of the simulated engine (front end and step overheads), e.g. a calibrated one; "
        "empty: vllm-cpu on the cpu GPU profile, else vllm.",
    ),
    "gpu": (
        "hardware.gpu",
        "Hardware",
        "GPU type",
        "GPU model of the node: a GPU profile (calibrated ones from BENCHCAMP_PROFILE_PATH too).",
    ),
    "gpu_count": ("hardware.gpu_count", "Hardware", "GPUs", "GPUs in the node (= TP x DP)."),
    "tensor_parallel_size": ("engine.tensor_parallel_size", "Engine", "Tensor parallel", "--tensor-parallel-size"),
    "data_parallel_size": ("engine.data_parallel_size", "Engine", "Data parallel", "--data-parallel-size"),
    "enable_expert_parallel": (
        "engine.enable_expert_parallel",
        "Engine",
        "Expert parallel",
        "--enable-expert-parallel (MoE models).",
    ),
    "max_num_seqs": (
        "engine.max_num_seqs",
        "Engine",
        "Max sequences",
        "--max-num-seqs: concurrent sequences per engine.",
    ),
    "max_num_batched_tokens": (
        "engine.max_num_batched_tokens",
        "Engine",
        "Max batched tokens",
        "--max-num-batched-tokens: tokens per scheduler step.",
    ),
    "workload": ("workload.name", "Load", "Workload", "Workload spec under workloads/ (DVC-tracked)."),
    "load_mode": (
        "load.mode",
        "Load",
        "Load mode",
        "closed: concurrent sessions; open: session arrivals/s; trace: time scale; capacity: the most "
        "concurrent agents that meet each service tier (load.tiers in params.yaml).",
    ),
    "clock": (
        "load.clock",
        "Load",
        "Clock",
        "wall: real time over HTTP; virtual: the simulated engine in virtual time (seconds per campaign).",
    ),
    "levels": (
        "load.levels",
        "Load",
        "Sweep levels",
        "One sweep point per level (sessions, sessions/s or time scale).",
    ),
    "warmup_s": ("load.warmup_s", "Load", "Warm-up (s)", "Excluded from the measurement window."),
    "duration_s": ("load.duration_s", "Load", "Duration (s)", "Measurement window per point."),
    "pricing_profile": ("pricing.profile", "Results", "Pricing profile", "API prices used for revenue per GPU-hour."),
    "baseline_run_id": (
        "baselines.run_id",
        "Results",
        "Baseline run",
        "MLflow run id to compare with (empty: marked baseline + recent history).",
    ),
}

# What the form needs beyond the schema (a form field can be stricter than the file, never looser).
FORM_ONLY: dict[str, dict[str, Any]] = {
    "engine_version": {"pattern": r"^\d+\.\d+\.\d+([a-z0-9.+-]*)$"},
    "model": {"minLength": 1},
    "levels": {"minItems": 1, "maxItems": 32, "items": {"type": "number", "exclusiveMinimum": 0}},
    # Optional text fields take null: the UI treats an empty string as a missing required value.
    "endpoint_url": {"type": ["null", "string"]},
    "baseline_run_id": {"type": ["null", "string"]},
    "hf_token_ref": {
        "type": ["null", "string"],
        "pattern": r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/.+|airflow-variable:[A-Za-z0-9_.\-/]+|airflow-conn:[A-Za-z0-9_.\-/]+)?$",
    },
    # Free text with the profile files' names as proposals (an empty field keeps the derived default).
    "engine_profile": {"type": ["null", "string"]},
}
# Form fields whose profile names are proposals (Airflow's `examples`), not a closed enum.
_PROPOSALS = ("engine_profile",)
PROFILE_PATH_ENV = "BENCHCAMP_PROFILE_PATH"  # = benchcamp.profiles.PROFILE_PATH_ENV
_SCHEMA_KEYS = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)


@lru_cache(maxsize=1)
def _config_schema() -> dict[str, Any]:
    from benchcamp.config import Config

    return Config.model_json_schema()


def field_schema(dotted: str) -> dict[str, Any]:
    """The JSON schema of one config field (``engine.max_num_seqs``), references resolved."""
    root = _config_schema()
    node: dict[str, Any] = root
    for part in dotted.split("."):
        node = node["properties"][part]
        if "$ref" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _from_file(dotted: str) -> Any:
    try:
        node: Any = yaml.safe_load(PARAMS_FILE.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # the form still renders; resolve_config reports the real error
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _choices(folder: Path, suffix: str) -> list[str]:
    return sorted(p.name[: -len(suffix)] for p in folder.glob(f"*{suffix}")) if folder.is_dir() else []


def _profiles(kind: str) -> list[str]:
    """Profile names of ``kind`` (gpus, models, engines) where the simulator looks for them:
    $BENCHCAMP_PROFILE_PATH's folders, then the package's (benchcamp.profiles.available,
    without importing the engine)."""
    folders = [Path(d).expanduser() for d in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if d]
    folders.append(PACKAGE_DIR / "profiles")
    return sorted({name for f in folders for name in _choices(f / kind, ".yaml")})


def _pricing_profiles() -> list[str]:
    try:
        data = yaml.safe_load((PACKAGE_DIR / "data" / "pricing.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    profiles = data.get("profiles", data) if isinstance(data, dict) else {}
    if isinstance(profiles, dict):
        return sorted(profiles)
    if isinstance(profiles, list):
        return sorted(str(p["name"]) for p in profiles if isinstance(p, dict) and p.get("name"))
    return []


def _enums() -> dict[str, list[str]]:
    """Choices that live in files, not in the schema."""
    return {
        "model_profile": _profiles("models"),
        "gpu": _profiles("gpus"),
        "engine_profile": _profiles("engines"),
        "workload": _choices(PROJECT_DIR / "workloads", ".yaml"),
        "pricing_profile": _pricing_profiles(),
    }


def form_fields() -> dict[str, dict[str, Any]]:
    """Each form field as keyword arguments of an Airflow ``Param`` (default first)."""
    enums = _enums()
    fields: dict[str, dict[str, Any]] = {}
    for name, (dotted, section, title, description) in FIELDS.items():
        schema = field_schema(dotted)
        spec = {k: v for k, v in schema.items() if k in _SCHEMA_KEYS}
        if enums.get(name):
            spec["examples" if name in _PROPOSALS else "enum"] = enums[name]
        spec |= FORM_ONLY.get(name, {})
        default = _from_file(dotted)
        if default is None or default == "":
            default = schema.get("default")
        if default == "" or (default is None and spec.get("type") != ["null", "string"]):
            default = spec["enum"][0] if spec.get("enum") else None
        if spec.get("type") == "number" and isinstance(default, int):
            default = float(default)
        fields[name] = {"default": default, "title": title, "description": description, "section": section, **spec}
    fields |= {
        "matrix": {
            "default": [{}],
            "type": "array",
            "title": "Engine matrix",
            "section": "Matrix",
            "description": "One node + sweep per entry; each entry is a dict of dotted overrides applied "
            'on top of the fields above, e.g. [{}, {"engine.max_num_seqs": 128}].',
            "items": {"type": "object"},
            "minItems": 1,
            "maxItems": 16,
        },
        "overrides": {
            "default": {},
            "type": "object",
            "title": "Extra overrides",
            "section": "Matrix",
            "description": 'Any other config key as dotted overrides, e.g. {"load.max_requests": 200}.',
        },
        "notify": {
            "default": "log",
            "type": "string",
            "title": "Notify on failure",
            "section": "Results",
            "description": "log, email:<address>, or slack:<airflow connection id holding the webhook URL>.",
            "pattern": r"^(log|email:.+@.+|slack:[A-Za-z0-9_.-]+)$",
        },
    }
    return fields


def form_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """The trigger form's values as dotted overrides (empty values keep params.yaml's)."""
    out: dict[str, Any] = {}
    for name, (dotted, *_) in FIELDS.items():
        value = params.get(name)
        if value is None or value == "":
            continue
        if name == "workload":
            out.update(
                {
                    "workload.name": value,
                    "workload.spec": f"workloads/{value}.yaml",
                    "workload.data": f"workloads/data/{value}.parquet",
                }
            )
        else:
            out[dotted] = value
    out.update(params.get("overrides") or {})
    return out


def _abs(path: str) -> str:
    return path if "://" in path or Path(path).is_absolute() else str(PROJECT_DIR / path)


def resolve_items(
    params: dict[str, Any], dag_id: str, run_id: str, params_file: str | Path = PARAMS_FILE
) -> list[dict[str, Any]]:
    """params.yaml + form + each matrix entry -> one resolved config per engine configuration,
    with its execution id (stable across retries) and store layout."""
    from benchcamp.campaign.layout import StoreLayout
    from benchcamp.config import ConfigError, load_config
    from benchcamp.provision.base import safe_name

    matrix = params.get("matrix") or [{}]
    if not isinstance(matrix, list) or not all(isinstance(m, dict) for m in matrix):
        raise ConfigError('matrix: expected a list of override dicts, e.g. [{}, {"engine.max_num_seqs": 128}]')
    items = []
    for i, entry in enumerate(matrix):
        try:
            cfg = load_config(params_file, {**form_overrides(params), **entry})
        except ConfigError as exc:
            raise ConfigError(f"matrix[{i}] {entry or '(base)'}: {exc}") from None
        data = cfg.to_dict()
        # Workers may run in another directory: anchor relative paths at the project.
        for section, key in (("workload", "spec"), ("workload", "data"), ("results", "store")):
            data[section][key] = _abs(data[section][key])
        uri = data["tracking"]["mlflow_uri"]
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            data["tracking"]["mlflow_uri"] = "sqlite:///" + _abs(uri[len("sqlite:///") :])
        execution_id = safe_name(f"{dag_id}.{run_id}.m{i}")
        layout = StoreLayout.for_execution(cfg.campaign.name, execution_id)
        items.append(
            {
                "index": i,
                "execution_id": execution_id,
                "config": data,
                "fingerprint": cfg.fingerprint(),
                "overrides": entry,
                "layout": layout.to_dict(),
            }
        )
    return items
