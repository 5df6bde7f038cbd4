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
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from benchcamp.campaign.handoff import MatrixItem

PROJECT_DIR = Path(os.environ.get("BENCHCAMP_PROJECT_DIR") or Path(__file__).resolve().parents[2])
PARAMS_FILE = Path(os.environ.get("BENCHCAMP_PARAMS") or PROJECT_DIR / "params.yaml")
# benchcamp's data files, found without importing it (parsing must stay cheap)
_SPEC = importlib.util.find_spec("benchcamp")
PACKAGE_DIR = Path(next(iter((_SPEC and _SPEC.submodule_search_locations) or [])))

# form field -> (dotted config key, section, title, help)
FIELDS: dict[str, tuple[str, str, str, str]] = {
    "campaign_name": (
        "campaign.name",
        "Campaign",
        "Campaign name",
        "Names the MLflow experiment and the results folder: letters, digits, . _ - (at most 64).",
    ),
    "description": (
        "campaign.description",
        "Campaign",
        "Description",
        "Shown in MLflow and the report. Empty: params.yaml's when the form measures what params.yaml does "
        "(same model, GPU type and count, topology), else one made from the form (model on N x GPU).",
    ),
    "provider": (
        "provider.kind",
        "Where",
        "Provider",
        "Where the engine runs: local subprocess, an EC2 GPU node, a Slurm job (provider.slurm in params.yaml), "
        "or an existing endpoint.",
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
    "gpu_count": (
        "hardware.gpu_count",
        "Hardware",
        "GPUs",
        "GPUs in all: with Topology none, the one engine's TP x DP; with a topology, its total (params.yaml's "
        "topology says how many). A whole number >= 1.",
    ),
    "tensor_parallel_size": (
        "engine.tensor_parallel_size",
        "Hardware",
        "Tensor parallel",
        "--tensor-parallel-size of the one engine (Topology none); empty: params.yaml's. With a topology each "
        "role sets its own: leave it empty.",
    ),
    "data_parallel_size": (
        "engine.data_parallel_size",
        "Hardware",
        "Data parallel",
        "--data-parallel-size of the one engine (Topology none; TP x DP = GPUs); empty: params.yaml's. With a "
        "topology leave it empty.",
    ),
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
    "benchmark_report": (
        "tracking.benchmark_report",
        "Results",
        "Benchmark Report",
        "Also write each point as llm-d's Benchmark Report v0.2.1 at the track step: the execution's "
        "benchmark_report/ folder and the MLflow run's artifacts.",
    ),
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
        "One sweep point per level: positive numbers, each once (closed: whole session counts).",
    ),
    "warmup_s": ("load.warmup_s", "Load", "Warm-up (s)", "Excluded from the measurement window."),
    "duration_s": ("load.duration_s", "Load", "Duration (s)", "Measurement window per point."),
    "trials": (
        "load.trials",
        "Load",
        "Trials per point",
        "Each point measured this many times, interleaved across points (c4 c8 c4 c8 ...); the point's figure is "
        "the mean over its trials with a confidence interval (regression.confidence).",
    ),
    "pricing_profile": ("pricing.profile", "Results", "Pricing profile", "API prices used for revenue per GPU-hour."),
    "baseline_run_id": (
        "baselines.run_id",
        "Results",
        "Baseline run",
        "MLflow run id to compare with (empty: marked baseline + recent history).",
    ),
}

_LABELS = {dotted: title for dotted, _section, title, _help in FIELDS.values()} | {
    "topology": "Topology",
    "load.levels": "Sweep levels",
}


def label(dotted: str) -> str:
    """A config key as the form shows it: ``Tensor parallel (engine.tensor_parallel_size)``; a key the form has no
    field for as it is (it goes in Extra overrides)."""
    return f"{_LABELS[dotted]} ({dotted})" if dotted in _LABELS else dotted


def labelled(message: str) -> str:
    """A config error in the form's words: each key the form has a field for as :func:`label` shows it, without
    the params file's preamble (the form's values are the overrides)."""
    import re

    message = re.sub(r"invalid configuration in \S+ with (--set )?overrides:\s*", "", message)
    keys = sorted(_LABELS, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.(])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w(])")
    return pattern.sub(lambda m: label(m.group(1)), message)


# What the form needs beyond the schema (a form field can be stricter than the file, never looser).
FORM_ONLY: dict[str, dict[str, Any]] = {
    "description": {"type": ["null", "string"]},
    # empty: params.yaml's engine values (Topology none); with a topology each role sets its own
    "tensor_parallel_size": {"type": ["null", "integer"]},
    "data_parallel_size": {"type": ["null", "integer"]},
    "engine_version": {"pattern": r"^\d+\.\d+\.\d+([a-z0-9.+-]*)$"},
    "model": {"minLength": 1},
    "levels": {"minItems": 1, "maxItems": 32, "items": {"type": "number", "exclusiveMinimum": 0}},
    # Optional text fields take null: the UI treats an empty string as a missing required value.
    "endpoint_url": {"type": ["null", "string"]},
    "baseline_run_id": {"type": ["null", "string"]},
    # a reference, never the token: refused by the trigger (HTTP 400) before Airflow stores a run's conf
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
# The Topology field: none = one engine of TP x DP GPUs; params.yaml = the params file's topology section.
TOPOLOGY_NONE, TOPOLOGY_FILE = "none", "params.yaml"
# Not minimum/maximum: Airflow's form clamps a number input to them without a word (GPUs -1 became 1).
# A whole-number bound becomes the exclusive one (refused by the trigger, before a run exists, with
# "Invalid input for param <name>: ..."); a decimal bound is left to resolve_config (one line naming the
# field and the bound). _bounds does both.
_SCHEMA_KEYS = (
    "type",
    "enum",
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


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's minimum/maximum as exclusive bounds the form does not clamp to (whole numbers only)."""
    out: dict[str, Any] = {}
    whole = schema.get("type") == "integer"
    if whole and isinstance(schema.get("minimum"), int):
        out["exclusiveMinimum"] = schema["minimum"] - 1
    if whole and isinstance(schema.get("maximum"), int):
        out["exclusiveMaximum"] = schema["maximum"] + 1
    return out


def field_schema(dotted: str) -> dict[str, Any]:
    """The JSON schema of one config field (``engine.max_num_seqs``), references resolved."""
    root = _config_schema()
    node: dict[str, Any] = root
    for part in dotted.split("."):
        node = node["properties"][part]
        if "$ref" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _from_file(dotted: str, params_file: str | Path | None = None) -> Any:
    """``dotted``'s value in the params file (``params_file``, default PARAMS_FILE), or None."""
    try:
        node: Any = yaml.safe_load(Path(params_file or PARAMS_FILE).read_text()) or {}
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


# The Preset field: a named set of values under the form's fields (benchcamp/data/presets.yaml); PRESET_FILE is
# params.yaml's campaign as it is.
FIRST_RUN, PRESET_FILE = "first-run", "params.yaml"


@lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    """name -> {"title", "set": {dotted key: value}} from benchcamp/data/presets.yaml."""
    data = yaml.safe_load((PACKAGE_DIR / "data" / "presets.yaml").read_text()) or {}
    return {str(k): v for k, v in data.items()}


def preset_field() -> dict[str, Any]:
    shown = {name: spec["title"] for name, spec in presets().items()}
    shown[PRESET_FILE] = f"params.yaml's campaign as it is: {_from_file('campaign.description') or 'see the file'}"
    return {
        "default": FIRST_RUN,
        "type": "string",
        "enum": [*presets(), PRESET_FILE],
        "values_display": shown,
        "title": "Preset",
        "section": "Campaign",
        "description": "What the fields below start from. first-run: a small campaign (one sweep point of a 20 s "
        "window). params.yaml: the params file's campaign (in this repository the rack-scale one: its model, GPUs, "
        "topology and sweep); a field you change from its default here still applies.",
    }


def _enums() -> dict[str, list[str]]:
    """Choices that live in files, not in the schema."""
    return {
        "model_profile": _profiles("models"),
        "gpu": _profiles("gpus"),
        "engine_profile": _profiles("engines"),
        "workload": _choices(PROJECT_DIR / "workloads", ".yaml"),
        "pricing_profile": _pricing_profiles(),
    }


def _file_topology(params_file: str | Path | None = None) -> dict[str, Any] | None:
    topo = _from_file("topology", params_file)
    return topo if isinstance(topo, dict) and topo else None


def _topology_summary(topo: dict[str, Any]) -> str:
    """``prefill 1 x 24 GPUs, decode 2 x 24 GPUs``: the params file's topology in a few words."""
    parts = []
    for role, spec in topo.items():
        if isinstance(spec, dict) and role != "router":
            n, g = spec.get("instances", 1), spec.get("gpus_per_node", "?")
            parts.append(f"{role} {n} x {g} GPUs")
    return ", ".join(parts) or "see params.yaml"


def topology_field(default: str) -> dict[str, Any]:
    topo = _file_topology()
    choices = [TOPOLOGY_NONE] + ([TOPOLOGY_FILE] if topo else [])
    shown = {TOPOLOGY_NONE: "none: one engine of TP x DP GPUs"}
    if topo:
        shown[TOPOLOGY_FILE] = f"params.yaml's: {_topology_summary(topo)}"
    return {
        "default": default if default in choices else TOPOLOGY_NONE,
        "type": "string",
        "enum": choices,
        "values_display": shown,
        "title": "Topology",
        "section": "Hardware",
        "description": "none: one engine, GPUs = TP x DP. params.yaml: the params file's deployment (roles, "
        "instances, GPUs per role; GPUs must be its total, TP and DP empty). Another shape: the topology key "
        "in Extra overrides.",
    }


def form_fields(nightly: bool = False) -> dict[str, dict[str, Any]]:
    """Each form field as keyword arguments of an Airflow ``Param`` (default first), from one coherent
    configuration: the nightly's defaults are params.yaml's campaign as it is (its topology, if any); the
    manual form's are one engine (Topology none) with params.yaml's engine, GPUs = its TP x DP."""
    enums = _enums()
    topology = TOPOLOGY_FILE if nightly and _file_topology() else TOPOLOGY_NONE
    fields: dict[str, dict[str, Any]] = {}
    for name, (dotted, section, title, description) in FIELDS.items():
        schema = field_schema(dotted)
        spec = {k: v for k, v in schema.items() if k in _SCHEMA_KEYS} | _bounds(schema)
        if enums.get(name):
            spec["examples" if name in _PROPOSALS else "enum"] = enums[name]
        spec |= FORM_ONLY.get(name, {})
        default = _from_file(dotted)
        if not nightly and dotted in presets()[FIRST_RUN]["set"]:
            default = presets()[FIRST_RUN]["set"][dotted]  # the manual form opens on the first run
        if default is None or default == "":
            default = schema.get("default")
        if default == "" or (default is None and spec.get("type") != ["null", "string"]):
            default = spec["enum"][0] if spec.get("enum") else None
        if spec.get("type") == "number" and isinstance(default, int):
            default = float(default)
        fields[name] = {"default": default, "title": title, "description": description, "section": section, **spec}
        if name == "description" and not nightly:
            fields[name]["default"] = None  # made from the form's values unless it measures params.yaml's
    tp, dp = fields["tensor_parallel_size"], fields["data_parallel_size"]
    if topology == TOPOLOGY_FILE:  # each role sets its own: the one-engine fields stay empty
        tp["default"] = dp["default"] = None
    elif isinstance(tp["default"], int) and isinstance(dp["default"], int):
        fields["gpu_count"]["default"] = tp["default"] * dp["default"]  # one engine: GPUs = TP x DP
    fields["topology"] = topology_field(topology)
    if not nightly:  # the first field a person sees; the nightly runs params.yaml as it is
        fields = {"preset": preset_field(), **fields}
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


def form_overrides(params: dict[str, Any], params_file: str | Path | None = None) -> dict[str, Any]:
    """The trigger form's values as dotted overrides (empty values keep params.yaml's). Topology none drops
    the params file's topology (GPUs, TP and DP then describe the one engine); params.yaml keeps it and
    refuses TP/DP, which a topology's roles set; a topology in Extra overrides wins over both."""
    from benchcamp.errors import ConfigError

    out: dict[str, Any] = {}
    # No Preset field (the nightly, the API with a conf that names none): params.yaml as it is.
    preset = params.get("preset") or PRESET_FILE
    if preset != PRESET_FILE and preset not in presets():
        raise ConfigError(f"Preset {preset!r}: choose one of {', '.join([*presets(), PRESET_FILE])}")
    if preset == PRESET_FILE and "preset" in params:
        params = _changed(params, params_file)  # the fields still at the first run's defaults are params.yaml's
    elif preset != PRESET_FILE:
        out.update(presets()[preset]["set"])
        params = {"topology": TOPOLOGY_NONE, **params}
    # No Topology field at all (a caller without the form, e.g. the API with an empty conf): params.yaml as it is.
    topology = params.get("topology") or (TOPOLOGY_NONE if "topology" in params else TOPOLOGY_FILE)
    if topology not in (TOPOLOGY_NONE, TOPOLOGY_FILE):
        raise ConfigError(f"topology={topology!r}: choose {TOPOLOGY_NONE} or {TOPOLOGY_FILE}")
    if topology == TOPOLOGY_NONE:
        out["topology"] = None
    else:
        set_here = [n for n in ("tensor_parallel_size", "data_parallel_size") if params.get(n) not in (None, "")]
        if set_here and "topology" not in (params.get("overrides") or {}):
            raise ConfigError(
                f"{' and '.join(set_here)}: Topology params.yaml sets each role's parallelism; leave "
                f"{' and '.join(set_here)} empty, or set Topology to none for one engine of TP x DP GPUs"
            )
    for name, (dotted, *_) in FIELDS.items():
        value = params.get(name)
        if value is None or value == "":
            continue
        if name == "workload" and value == _from_file("workload.name", params_file) and preset == PRESET_FILE:
            continue  # params.yaml's workload: its own spec and data paths
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
    if params.get("description") in (None, "") and "campaign.description" not in (params.get("overrides") or {}):
        made = _description(params, topology, params_file)
        if made:
            out["campaign.description"] = made
    out.update(params.get("overrides") or {})
    return out


def _changed(params: dict[str, Any], params_file: str | Path | None = None) -> dict[str, Any]:
    """The form's values that differ from the manual form's defaults (the first run's): with Preset params.yaml
    those are the ones a person chose; the rest keep params.yaml's values (Topology its topology)."""
    defaults = {k: spec["default"] for k, spec in form_fields().items()}
    out = {k: v for k, v in params.items() if k not in FIELDS and k != "topology" or v != defaults.get(k)}
    if "topology" not in out and _file_topology(params_file) is None:
        out["topology"] = TOPOLOGY_NONE  # a file without a topology: one engine, TP and DP as typed
    return out


def _description(params: dict[str, Any], topology: str, params_file: str | Path | None = None) -> str | None:
    """None (params.yaml's description) when the form measures what the file does, else one made from it."""
    keys = ("engine.model", "hardware.gpu", "hardware.gpu_count")
    names = ("model", "gpu", "gpu_count")
    mine = [
        params.get(n) if params.get(n) not in (None, "") else _from_file(k, params_file) for n, k in zip(names, keys)
    ]
    same_topology = (topology == TOPOLOGY_FILE) == bool(_file_topology(params_file))
    if same_topology and mine == [_from_file(k, params_file) for k in keys]:
        return None
    model, gpu, count = mine
    shape = "params.yaml's topology" if topology == TOPOLOGY_FILE else "one engine"
    return f"{model} on {count} x {gpu} ({shape}), from the trigger form"


def _abs(path: str) -> str:
    return path if "://" in path or Path(path).is_absolute() else str(PROJECT_DIR / path)


def resolve_items(
    params: dict[str, Any], dag_id: str, run_id: str, params_file: str | Path | None = None
) -> list[MatrixItem]:
    """params.yaml (``params_file``, default PARAMS_FILE) + form + each matrix entry -> one resolved config
    per engine configuration, with its execution id (stable across retries) and store layout."""
    from benchcamp.campaign.handoff import MatrixItem
    from benchcamp.campaign.layout import StoreLayout
    from benchcamp.config import ConfigError, load_config
    from benchcamp.provision.base import safe_name

    matrix = params.get("matrix") or [{}]
    if not isinstance(matrix, list) or not all(isinstance(m, dict) for m in matrix):
        raise ConfigError('matrix: expected a list of override dicts, e.g. [{}, {"engine.max_num_seqs": 128}]')
    from benchcamp.campaign.feasible import check_layout, check_model

    items = []
    for i, entry in enumerate(matrix):
        try:
            cfg = load_config(params_file or PARAMS_FILE, {**form_overrides(params, params_file), **entry})
            check_model(cfg)  # before any node: a model the simulator has no profile for, a layout that cannot hold it
            check_layout(cfg)
        except ConfigError as exc:  # in the form's words; which matrix entry only when there are several
            where = f"matrix[{i}] {entry or '(base)'}: " if len(matrix) > 1 else ""
            raise ConfigError(where + labelled(str(exc))) from None
        data = cfg.to_dict()
        # Workers may run in another directory: anchor relative paths at the project.
        for section, key in (("workload", "spec"), ("workload", "data"), ("results", "store")):
            data[section][key] = _abs(data[section][key])
        uri = data["tracking"]["mlflow_uri"]
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            data["tracking"]["mlflow_uri"] = "sqlite:///" + _abs(uri[len("sqlite:///") :])
        execution_id = safe_name(f"{dag_id}.{run_id}.m{i}")
        layout = StoreLayout.for_execution(cfg.campaign.name, execution_id)
        items.append(MatrixItem(i, execution_id, data, cfg.fingerprint(), entry, layout))
    return items
