"""The campaign configuration: one typed, validated schema for params.yaml.

Everything downstream receives a resolved :class:`Config`; nothing reads
params.yaml twice. Unknown keys and wrong types are errors that name the key and
the fix. ``--set a.b=value`` overrides are parsed as YAML scalars/lists.

The fingerprint is the sha256 of the canonical JSON of the resolved config,
without the sections that do not change what is measured (``tracking``,
``results``): logging to another MLflow server is the same benchmark.
"""

from __future__ import annotations

from benchcamp.errors import ConfigError  # noqa: F401  (re-exported)

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_PARAMS = "params.yaml"
# Sections that describe where results go, not what is measured.
NON_FINGERPRINT_SECTIONS = ("tracking", "results")




class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Campaign(_Section):
    name: str = Field("agentic-smoke", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""


class LocalProvider(_Section):
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")
    startup_timeout_s: float = Field(120.0, gt=0)


class Ec2Provider(_Section):
    region: str = "us-east-1"
    instance_types: list[str] = Field(default_factory=lambda: ["p5en.48xlarge", "p5e.48xlarge"])
    availability_zones: list[str] = Field(default_factory=list)
    ami_id: str = ""
    subnet_ids: list[str] = Field(default_factory=list)
    vpc_id: str = ""
    key_name: str = ""
    orchestrator_cidr: str = Field("", description="CIDR allowed to reach the engine port; empty = this machine's address /32")
    associate_public_ip: bool = False
    install: Literal["container", "pip"] = "container"
    container_image: str = "vllm/vllm-openai"
    owner: str = "benchcamp"
    ttl_hours: float = Field(6.0, gt=0)
    engine_port: int = Field(8000, ge=1, le=65535)
    startup_timeout_s: float = Field(1800.0, gt=0)


class EndpointProvider(_Section):
    url: str = ""
    api_key_env: str = "BENCHCAMP_API_KEY"
    airflow_conn_id: str = ""


class Provider(_Section):
    kind: Literal["local", "ec2", "endpoint"] = "local"
    local: LocalProvider = Field(default_factory=LocalProvider)
    ec2: Ec2Provider = Field(default_factory=Ec2Provider)
    endpoint: EndpointProvider = Field(default_factory=EndpointProvider)


class Engine(_Section):
    kind: Literal["vllm", "simulated"] = "simulated"
    version: str = "0.11.0"
    model: str = "deepseek-ai/DeepSeek-V3"
    served_model_name: str = ""
    # Which performance profile (benchcamp/engine/profiles/models/*.yaml) the
    # simulated engine uses for `model`.
    model_profile: str = "deepseek-v3"
    tensor_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(8, ge=1)
    enable_expert_parallel: bool = True
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    block_size: int = Field(16, ge=1)
    enable_prefix_caching: bool = True
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"] = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    kv_offloading_size_gib: float = Field(0.0, ge=0, description="CPU KV tier per engine (vLLM --kv-offloading-size); 0 = off")
    extra_args: list[str] = Field(default_factory=list)


class Hardware(_Section):
    gpu: Literal["h100-sxm", "h200", "b200", "mi300x"] = "h200"
    gpu_count: int = Field(8, ge=1)
    usd_per_gpu_hour: float = Field(3.5, ge=0)


class Workload(_Section):
    name: str = "agentic-coding"
    spec: str = "workloads/agentic-coding.yaml"
    data: str = "workloads/data/agentic-coding.parquet"


class Load(_Section):
    mode: Literal["closed", "open", "trace"] = "closed"
    # closed: concurrent sessions; open: session arrivals per second; trace: time scale.
    levels: list[float] = Field(default_factory=lambda: [8, 32])
    arrival: Literal["poisson", "gamma"] = "poisson"
    gamma_shape: float = Field(1.0, gt=0)
    warmup_s: float = Field(10.0, ge=0)
    duration_s: float = Field(40.0, gt=0)
    max_requests: int | None = Field(None, ge=1, description="end the window after this many requests")
    drain_s: float = Field(30.0, ge=0)
    request_timeout_s: float = Field(300.0, gt=0)
    workers: int = Field(0, ge=0, description="client processes; 0 = one per core less one (at least 1)")
    min_requests: int = Field(20, ge=1)
    max_error_rate: float = Field(0.01, ge=0, le=1)
    max_incomplete_rate: float = Field(0.05, ge=0, le=1, description="requests still running when the drain ends")
    max_sched_lag_p99_ms: float = Field(50.0, gt=0)
    max_client_cpu: float = Field(0.9, gt=0, le=1)
    api: Literal["completions", "chat"] = "completions"
    seed: int = 0


class Prices(_Section):
    cached_input: float = Field(ge=0)
    uncached_input: float = Field(ge=0)
    output: float = Field(ge=0)


class Pricing(_Section):
    profile: str = "deepseek-v3-offpeak"
    # Set to override the profile's prices ($ per million tokens).
    usd_per_mtok: Prices | None = None


class Slo(_Section):
    ttft_s: float = Field(10.0, gt=0)
    tpot_s: float = Field(0.05, gt=0)


class Baselines(_Section):
    published: list[str] = Field(default_factory=lambda: ["agentx-vllm-deepseek"])
    history_runs: int = Field(5, ge=0)
    run_id: str = ""


class Regression(_Section):
    relative_threshold: float = Field(0.05, ge=0)
    per_metric: dict[str, float] = Field(default_factory=dict)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    bootstrap_samples: int = Field(1000, ge=100)


class Tracking(_Section):
    mlflow_uri: str = "sqlite:///mlflow.db"
    experiment: str = ""


class Results(_Section):
    store: str = "results"


class Config(_Section):
    campaign: Campaign = Field(default_factory=Campaign)
    provider: Provider = Field(default_factory=Provider)
    engine: Engine = Field(default_factory=Engine)
    hardware: Hardware = Field(default_factory=Hardware)
    workload: Workload = Field(default_factory=Workload)
    load: Load = Field(default_factory=Load)
    pricing: Pricing = Field(default_factory=Pricing)
    slo: Slo = Field(default_factory=Slo)
    baselines: Baselines = Field(default_factory=Baselines)
    regression: Regression = Field(default_factory=Regression)
    tracking: Tracking = Field(default_factory=Tracking)
    results: Results = Field(default_factory=Results)

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        e, h = self.engine, self.hardware
        used = e.tensor_parallel_size * e.data_parallel_size
        if used != h.gpu_count:
            raise ValueError(
                f"engine.tensor_parallel_size={e.tensor_parallel_size} x engine.data_parallel_size="
                f"{e.data_parallel_size} = {used} GPUs does not match hardware.gpu_count={h.gpu_count}; "
                "set them so that tp x dp = gpu_count"
            )
        if self.load.mode == "closed" and any(lv < 1 or lv != int(lv) for lv in self.load.levels):
            raise ValueError("load.levels: closed-loop levels are session counts; use whole numbers >= 1")
        if not self.load.levels or any(lv <= 0 for lv in self.load.levels):
            raise ValueError("load.levels: give at least one level, each > 0")
        if len(set(self.load.levels)) != len(self.load.levels):
            raise ValueError(f"load.levels={self.load.levels}: a level appears twice (its point would overwrite "
                             "the other's records); list each level once")
        if self.provider.kind == "endpoint" and not self.provider.endpoint.url:
            raise ValueError("provider.endpoint.url: required when provider.kind=endpoint; set it to the server's base URL")
        return self

    # -- derived values ---------------------------------------------------
    @property
    def experiment_name(self) -> str:
        return self.tracking.experiment or self.campaign.name

    @property
    def served_model_name(self) -> str:
        return self.engine.served_model_name or self.engine.model

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def fingerprint(self) -> str:
        data = {k: v for k, v in self.to_dict().items() if k not in NON_FINGERPRINT_SECTIONS}
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:16]

    def flat(self) -> dict[str, Any]:
        """Dotted keys -> scalar values (lists as JSON), e.g. for MLflow params."""
        return flatten(self.to_dict())


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, dict)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set engine.max_num_seqs=256")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key must be dotted section.field, e.g. engine.max_num_seqs")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from exc
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted overrides applied.

    Paths are checked against the schema so a typo names the valid keys.
    """
    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else (
        (".".join(p), v) for p, v in map(parse_override, overrides))
    for dotted, value in items:
        path = dotted.split(".")
        _check_path(path)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{dotted}: {part} is not a section")
        node[path[-1]] = value
    return data


def _check_path(path: list[str]) -> None:
    model: Any = Config
    for i, part in enumerate(path):
        fields = getattr(model, "model_fields", None)
        if fields is None:
            # a free-form dict field (e.g. regression.per_metric): anything goes below
            return
        if part not in fields:
            where = ".".join(path[:i]) or "the top level"
            raise ConfigError(
                f"{'.'.join(path)}: unknown key {part!r} in {where}; valid keys: {', '.join(sorted(fields))}"
            )
        model = _model_of(fields[part].annotation)


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = ".".join(str(p) for p in err["loc"][:-1])
            lines.append(f"  {loc}: unknown key; remove it or check the spelling"
                         f"{' (see the ' + parent + ' section in params.yaml)' if parent else ''}")
        elif kind == "value_error":
            lines.append(f"  {str(err['msg']).removeprefix('Value error, ')}")
        else:
            lines.append(f"  {loc}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def from_dict(data: dict[str, Any], source: str = "config") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got {type(data).__name__}")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    _check_names(cfg, source)
    return cfg


def _check_names(cfg: Config, source: str) -> None:
    """Names that point into the shipped data files: a typo fails now, not after the sweep."""
    from benchcamp.baselines import list_published
    from benchcamp.pricing import list_profiles

    if cfg.pricing.usd_per_mtok is None and cfg.pricing.profile not in list_profiles():
        raise ConfigError(f"{source}: pricing.profile={cfg.pricing.profile!r} is unknown; use one of "
                          f"{', '.join(list_profiles())}, or set pricing.usd_per_mtok")
    unknown = [n for n in cfg.baselines.published if n not in list_published()]
    if unknown:
        raise ConfigError(f"{source}: baselines.published: {', '.join(unknown)} unknown; published baselines "
                          f"are {', '.join(list_published())} (benchcamp/data/baselines.yaml)")


def read_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        return {}
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    return data


def load_config(path: str | Path | None = DEFAULT_PARAMS,
                overrides: list[str] | dict[str, Any] | None = None) -> Config:
    """params.yaml (missing file = embedded defaults) + overrides -> Config."""
    data = read_params(path) if path else {}
    if overrides:
        data = apply_overrides(data, overrides)
    return from_dict(data, str(path or "defaults"))


def show(cfg: Config) -> str:
    body = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    return f"{body}# fingerprint: {cfg.fingerprint()}\n"
