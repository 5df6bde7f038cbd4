"""Hardware and model profiles for the simulated engine's performance model.

Profiles are YAML data files (``gpus/<name>.yaml``, ``models/<name>.yaml``) with
their sources in comments, so calibrating an efficiency factor or adding a GPU is
a data change. ``load_gpu(name)`` / ``load_model(name)`` return frozen dataclasses;
unknown names and missing or unknown fields are errors that list the valid choices.
"""

from __future__ import annotations

from benchcamp.errors import ProfileError  # noqa: F401  (re-exported)

from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent




@dataclass(frozen=True)
class GpuProfile:
    name: str
    memory_gib: float
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float
    interconnect_gbps: float
    collective_latency_us: float
    compute_efficiency: float
    memory_efficiency: float
    step_overhead_ms: float
    host_link_gbps: float       # GPU <-> host memory, GB/s one way (PCIe, NVLink-C2C): the CPU KV tier's link

    def peak_flops(self, dtype: str) -> float:
        return (self.fp8_tflops if dtype == "fp8" else self.bf16_tflops) * 1e12


@dataclass(frozen=True)
class ModelProfile:
    name: str
    hf_names: tuple[str, ...]
    total_params_b: float
    active_params_b: float
    layers: int
    hidden: int
    vocab_size: int
    max_model_len: int
    dense_params_b: float
    embedding_params_b: float
    moe_layers: int
    num_experts: int
    experts_per_token: int
    expert_params_m: float
    weight_bytes: float
    compute_dtype: str
    kv_elems_per_token_layer: int
    kv_heads: int
    attn_flops_prefill_pair: float
    attn_flops_decode_pair: float
    activation_headroom_gib: float
    compute_efficiency_scale: float
    attention_efficiency_scale: float
    layer_overhead_us: float

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def weight_params(self) -> float:
        """All stored parameters (dense + embedding + every routed expert)."""
        return (self.dense_params_b + self.embedding_params_b) * 1e9 + self.routed_params

    @property
    def routed_params(self) -> float:
        return self.num_experts * self.expert_params_m * 1e6 * self.moe_layers


def available(kind: str) -> list[str]:
    return sorted(p.stem for p in (HERE / kind).glob("*.yaml"))


def _load(kind: str, name: str, cls: type) -> Any:
    path = HERE / kind / f"{name}.yaml"
    if not path.exists():
        raise ProfileError(f"unknown {kind[:-1]} profile {name!r}; choose one of: {', '.join(available(kind))}")
    data = yaml.safe_load(path.read_text()) or {}
    names = {f.name for f in fields(cls)}
    unknown, missing = set(data) - names, names - set(data)
    if unknown or missing:
        raise ProfileError(f"{path}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    if "hf_names" in data:
        data["hf_names"] = tuple(data["hf_names"])
    return cls(**data)


@lru_cache(maxsize=None)
def load_gpu(name: str) -> GpuProfile:
    return _load("gpus", name, GpuProfile)


@lru_cache(maxsize=None)
def load_model(name: str) -> ModelProfile:
    return _load("models", name, ModelProfile)


def model_profile_for(model: str) -> str:
    """The profile whose ``hf_names`` list ``model`` (or whose name it is); guess by keywords otherwise."""
    low = model.lower()
    for name in available("models"):
        prof = load_model(name)
        if low == name or low in (n.lower() for n in prof.hf_names):
            return name
    if "deepseek" in low:
        return "deepseek-v3"
    if "70b" in low:
        return "llama-3.1-70b"
    if "8b" in low:
        return "llama-3.1-8b"
    raise ProfileError(f"no performance profile for model {model!r}; pass --model-profile "
                       f"(engine.model_profile) = one of: {', '.join(available('models'))}")
