"""The whole configuration (:class:`Config`: every section, the checks across sections, the fingerprint) and
the path rules the fingerprint hashes by."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from benchcamp.config.sections import (
    DEFAULT_ENGINE_PROFILE,
    DEFAULT_ENGINE_PROFILE_BY_GPU,
    DEFAULT_NESTED_NOT_FINGERPRINTED,
    LEVEL_MAX,
    NON_FINGERPRINT_KEYS,
    NON_FINGERPRINT_SECTIONS,
    PROJECT_DIR_ENV,
    PROJECT_RELATIVE_KEYS,
    UNSET_NOT_FINGERPRINTED,
    UNSET_SECTIONS_NOT_FINGERPRINTED,
    Baselines,
    Campaign,
    Engine,
    Hardware,
    Load,
    Pricing,
    Provider,
    Regression,
    Results,
    Section,
    Slo,
    Tracking,
    Workload,
)
from benchcamp.topology.model import Topology


class Config(Section):
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
    # The deployment's roles (benchcamp.topology): unset = one unified engine of the engine + hardware sections;
    # set, its roles' TP/DP/EP, max_num_seqs, batched tokens and KV tier replace the engine section's.
    topology: Topology | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        e, h = self.engine, self.hardware
        used = e.tensor_parallel_size * e.data_parallel_size
        if self.topology is not None:
            pass  # the roles size the deployment: benchcamp.topology.validate.check_gpus (in from_dict)
        elif used != h.gpu_count:
            raise ValueError(
                f"engine.tensor_parallel_size={e.tensor_parallel_size} x engine.data_parallel_size="
                f"{e.data_parallel_size} = {used} GPUs does not match hardware.gpu_count={h.gpu_count}; "
                "set them so that tp x dp = gpu_count"
            )
        local = e.data_parallel_size_local
        if self.topology is None and local is not None and e.data_parallel_size % local:
            raise ValueError(
                f"engine.data_parallel_size_local={local} does not divide engine.data_parallel_size="
                f"{e.data_parallel_size}: each node runs the same number of ranks; set a divisor"
            )
        if self.load.mode == "closed" and any(lv < 1 or lv != int(lv) for lv in self.load.levels):
            raise ValueError("load.levels: closed-loop levels are session counts; use whole numbers >= 1")
        if not self.load.levels or any(lv <= 0 for lv in self.load.levels):
            raise ValueError("load.levels: give at least one level, each > 0")
        top, why = LEVEL_MAX[self.load.mode]
        if max(self.load.levels) > top:
            raise ValueError(f"load.levels={self.load.levels}: {why}; lower the level")
        if len(set(self.load.levels)) != len(self.load.levels):
            raise ValueError(
                f"load.levels={self.load.levels}: a level appears twice (its point would overwrite "
                "the other's records); list each level once"
            )
        ld = self.load
        if ld.capacity.start > ld.capacity.max:
            raise ValueError(
                f"load.capacity.start={ld.capacity.start} is above load.capacity.max={ld.capacity.max}; "
                "lower start or raise max"
            )
        if ld.mode == "capacity" and not ld.tiers:
            raise ValueError(
                "load.tiers: load.mode=capacity needs at least one tier {name, p90_user_tok_s, p90_ttft_s}"
            )
        if len({t.name for t in ld.tiers}) != len(ld.tiers):
            raise ValueError("load.tiers: two tiers share a name; give each tier its own name")
        if ld.clock == "virtual" and (self.engine.kind != "simulated" or self.provider.kind != "local"):
            raise ValueError(
                f"load.clock=virtual runs the simulated engine in-process; it needs engine.kind=simulated "
                f"and provider.kind=local (got {self.engine.kind}, {self.provider.kind}); "
                "set load.clock=wall for a real engine"
            )
        if ld.agentx is not None:
            if ld.mode not in ("closed", "capacity"):
                raise ValueError(
                    f"load.agentx: AgentX replays a closed loop of session trees; load.mode={ld.mode} cannot "
                    "take it; set load.mode to closed or capacity, or drop load.agentx"
                )
            if ld.agentx.warmup_per_lane and ld.warmup_s <= 0:
                raise ValueError(
                    "load.warmup_s=0: load.agentx's warm-up primers go out at t=0 and would count in the "
                    "window; set load.warmup_s > 0 (e.g. 10) or load.agentx.warmup_per_lane=false"
                )
            if ld.agentx.start_min_ratio > ld.agentx.start_max_ratio:
                raise ValueError(
                    "load.agentx.start_min_ratio is above load.agentx.start_max_ratio; lower it or raise the max"
                )
            if ld.agentx.context == "live" and ld.api != "chat":
                raise ValueError(
                    "load.agentx.context=live puts the server's answer text in each next turn's messages; token "
                    f"ids carry none (load.api={ld.api}): set load.api=chat or load.agentx.context=recorded"
                )
        if ld.steady.start_min_ratio > ld.steady.start_max_ratio:
            raise ValueError(
                "load.steady.start_min_ratio is above load.steady.start_max_ratio; lower it or raise the max"
            )
        if self.provider.kind == "endpoint" and not self.provider.endpoint.url:
            raise ValueError(
                "provider.endpoint.url: required when provider.kind=endpoint; set it to the server's base URL"
            )
        return self

    # -- derived values ---------------------------------------------------
    @property
    def experiment_name(self) -> str:
        return self.tracking.experiment or self.campaign.name

    @property
    def served_model_name(self) -> str:
        return self.engine.served_model_name or self.engine.model

    @property
    def engine_profile(self) -> str:
        """The simulated engine's engine profile: engine.engine_profile, else the hardware's default
        (vllm-cpu for vLLM's CPU build on hardware.gpu=cpu, vllm on a GPU)."""
        return self.engine.engine_profile or default_engine_profile(self.hardware.gpu)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def fingerprint(self) -> str:
        data = {k: v for k, v in self.to_dict().items() if k not in NON_FINGERPRINT_SECTIONS}
        for section, key in NON_FINGERPRINT_KEYS:
            data[section].pop(key, None)
        for section, key, unset in UNSET_NOT_FINGERPRINTED:
            if data[section][key] == unset:
                del data[section][key]
        for section, unset in UNSET_SECTIONS_NOT_FINGERPRINTED:
            if data.get(section, unset) == unset:
                data.pop(section, None)
        for section, sub, key, default in DEFAULT_NESTED_NOT_FINGERPRINTED:
            inner = data.get(section, {}).get(sub)
            if isinstance(inner, dict) and inner.get(key) == default:
                del inner[key]
        for section, key in PROJECT_RELATIVE_KEYS:
            data[section][key] = project_relative(data[section][key])
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:16]

    def flat(self) -> dict[str, Any]:
        """Dotted keys -> scalar values (lists as JSON), e.g. for MLflow params."""
        return flatten(self.to_dict())


def project_dirs() -> list[Path]:
    """The folders a project-relative path is relative to: $BENCHCAMP_PROJECT_DIR (the DAGs'), the checkout
    this package runs from, the working directory (the CLI's)."""
    dirs = [Path(d) for d in (os.environ.get(PROJECT_DIR_ENV), Path(__file__).resolve().parents[2]) if d]
    return [*dirs, Path.cwd()]


def project_relative(path: str) -> str:
    """An absolute path inside the project -> the path relative to it (``workloads/x.yaml``), as params.yaml
    writes it; a relative path, a URL or a path outside the project as it is."""
    if "://" in path or not os.path.isabs(path):
        return path
    p = Path(os.path.normpath(path))
    for base in project_dirs():
        for root in dict.fromkeys((Path(os.path.normpath(base.absolute())), base.resolve())):
            if p.is_relative_to(root):
                return p.relative_to(root).as_posix()
    return path


def default_engine_profile(gpu: str) -> str:
    """The engine profile a simulated engine on ``gpu`` uses unless engine.engine_profile names one."""
    return DEFAULT_ENGINE_PROFILE_BY_GPU.get(gpu, DEFAULT_ENGINE_PROFILE)


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
