"""Hardware, model and engine profiles for the simulated engine's performance model.

Profiles are YAML data files (``gpus/<name>.yaml``, ``models/<name>.yaml``,
``engines/<name>.yaml``) with their sources in comments, so calibrating an
efficiency factor or adding a GPU is a data change. ``load_gpu`` / ``load_model``
/ ``load_engine`` return frozen dataclasses; unknown names, unknown fields and
missing required fields (those without a default) are errors that list the valid choices.

User profiles (``benchcamp calibrate`` writes them): ``BENCHCAMP_PROFILE_PATH``, folders separated by
``os.pathsep``, each with the same ``gpus/ models/ engines/`` layout, is searched before the package's
own profiles, so a calibrated ``gpus/cpu-calibrated.yaml`` is selected by name like a shipped one.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from benchcamp.errors import ConfigError, ProfileError  # noqa: F401  (ProfileError re-exported)

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
    # Power (benchcamp.metrics power section): board TDP/TBP from the datasheet, and the
    # node's draw per GPU over the boards' (CPUs, NICs, fans, PSU losses); sources in the YAML.
    board_power_w: float
    node_overhead_factor: float
    host_link_gbps: float  # GPU <-> host memory, GB/s one way (PCIe, NVLink-C2C): the CPU KV tier's link
    # Multiplies a model's per-layer step overhead (kernel launch and sync gaps): a GPU
    # generation property (faster launch, larger L2, shorter NVLink syncs). 1.0 = Hopper.
    layer_overhead_scale: float = 1.0
    # Multiplies the cost of launching a step's kernels one by one from the CPU (batches an engine runs
    # without CUDA graphs): a host and driver property, not the GPU generation's. 1.0 = CUDA.
    launch_overhead_scale: float = 1.0
    # A fixed KV cache size per device in GiB, whatever gpu_memory_utilization says (vLLM's CPU backend:
    # VLLM_CPU_KVCACHE_SPACE); 0 = memory_gib x utilization - weights - headroom, as on GPUs.
    kv_cache_gib: float = 0.0
    # Scale-up and scale-out (benchcamp.topology): GPUs joined by NVLink (8 on an HGX board, 72 in an NVL72 rack),
    # and each GPU's RDMA NIC to other nodes (GB/s one way, and a latency per transfer or collective). Wide EP
    # beyond the NVLink domain and prefill -> decode KV transfers between domains go over RDMA.
    nvlink_domain_gpus: int = 8
    rdma_gbps: float = 50.0  # one 400 Gb/s ConnectX-7 per GPU
    rdma_latency_us: float = 10.0
    # Host memory per GPU for the CPU KV tier (GiB; 0 = not stated). Grace on GB200/GB300: its LPDDR5X.
    host_memory_gib: float = 0.0
    # Efficiency of FP8 GEMMs against fp8_tflops where it differs from BF16's (measured kernel tables:
    # benchcamp calibrate --kernel-tables); 0 = compute_efficiency.
    fp8_compute_efficiency: float = 0.0

    def peak_flops(self, dtype: str) -> float:
        return (self.fp8_tflops if dtype == "fp8" else self.bf16_tflops) * 1e12

    def efficiency(self, dtype: str) -> float:
        """The GEMM efficiency at ``dtype``'s peak (fp8_compute_efficiency for FP8 where set)."""
        return (
            self.fp8_compute_efficiency if dtype == "fp8" and self.fp8_compute_efficiency else self.compute_efficiency
        )


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
    kv_elems_per_token_layer: float
    kv_heads: int
    attn_flops_prefill_pair: float
    attn_flops_decode_pair: float
    activation_headroom_gib: float
    compute_efficiency_scale: float
    attention_efficiency_scale: float
    layer_overhead_us: float
    # Bytes per routed-expert parameter when the experts are stored in another format than
    # the rest (gpt-oss: MXFP4 experts, BF16 attention); 0 = weight_bytes.
    expert_weight_bytes: float = 0.0

    @property
    def expert_bytes_per_param(self) -> float:
        return self.expert_weight_bytes or self.weight_bytes

    # KV elements READ per context token when sparse/compressed attention reads less than it
    # stores (DeepSeek-V4's CSA/HCA); None: reads = stores.
    kv_read_elems_per_token_layer: float | None = None
    # Speculative decoding heads trained with the checkpoint (benchcamp.topology.validate): MTP layers (config.json
    # num_nextn_predict_layers), the methods vLLM runs from the checkpoint alone ("mtp", "dspark"), and the
    # probability that one draft token is accepted (published figure, sources in the YAML; 0 = none published).
    mtp_layers: int = 0
    # Linear layers' efficiency scale for prefill tokens under expert parallel (large grouped GEMMs); 0 = the
    # compute_efficiency_scale (benchcamp.sim.engine.perfmodel).
    prefill_compute_efficiency_scale: float = 0.0
    # Fraction of the layers a prompt token runs (DeepSeek-V4.1's prefill runs its encoder half only); 1 = all.
    prefill_layer_fraction: float = 1.0
    speculative_methods: tuple[str, ...] = ()
    draft_acceptance_rate: float = 0.0
    # n-gram lookup tables (DeepSeek-V4.1's Engram): billions of FP8 parameters, looked up not multiplied, with one
    # UE8M0 scale byte per engram_scale_block values; the layers that look them up (engram_layer_ids), the rows one
    # token reads per layer (engram_hash_heads = (max n-gram - 1) x heads, TP-sharded by head) of engram_head_dim
    # values. Where they live (HBM or pinned host memory) is vLLM's --engram-config (benchcamp.sim.engine.perfmodel).
    engram_params_b: float = 0.0
    engram_layer_ids: tuple[int, ...] = ()
    engram_hash_heads: int = 0
    engram_head_dim: int = 0
    engram_scale_block: int = 32
    # The per-layer gap of a graphed decode step measured for this model on one engine and GPU, as a multiple of
    # layer_overhead_us: (engine, GPU profile, scale) triples that replace the GPU's layer_overhead_scale for that
    # engine (benchcamp.calibrate.layer_gap, from measured per-operation tables); written in YAML as
    # {engine: {gpu: scale}}.
    layer_overhead_scales: tuple[tuple[str, str, float], ...] = ()

    def layer_overhead_scale(self, engine: str, gpu: str, default: float) -> float:
        """The per-layer gap scale of this model on ``engine`` and ``gpu``: the measured one, else ``default``."""
        for eng, name, scale in self.layer_overhead_scales:
            if eng == engine and name == gpu:
                return scale
        return default

    @property
    def engram_table_bytes(self) -> float:
        """Bytes of one full set of Engram tables: FP8 rows + their scales (vLLM's engram_table_bytes)."""
        return self.engram_params_b * 1e9 * (1 + 1 / self.engram_scale_block)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def weight_params(self) -> float:
        """All stored parameters (dense + embedding + Engram tables + every routed expert)."""
        return (self.dense_params_b + self.embedding_params_b + self.engram_params_b) * 1e9 + self.routed_params

    @property
    def routed_params(self) -> float:
        return self.num_experts * self.expert_params_m * 1e6 * self.moe_layers


@dataclass(frozen=True)
class EngineProfile:
    """What one serving engine adds to the GPU and model: its front end and step overhead."""

    name: str
    frontend_ms: float  # latency per request that does not occupy the front end's loop (HTTP, hand-off)
    frontend_us_per_token: float  # front-end loop work per prompt token of a token-id prompt (no tokenizer)
    frontend_jitter_sigma: float  # log-normal sigma of the seeded per-request jitter of the front-end costs
    step_overhead_scale: float  # multiplies the GPU's step_overhead_ms (scheduler + sampling per step)
    layer_overhead_scale: float  # multiplies the model's layer_overhead_us
    cuda_graph_max_batch: int  # decode batches up to this size replay a captured graph
    eager_layer_overhead_scale: float  # per-layer overhead multiplier for larger batches (piecewise / eager)
    seq_overhead_us: float = 0.0  # CPU per scheduled sequence per step (hidden by async scheduling)
    # The front end as one FIFO server (benchcamp.sim.engine.frontend): serial work per request (parsing,
    # chat template, hand-off) and per streamed token (detokenize, SSE chunk).
    frontend_request_us: float = 0.0
    frontend_chunk_us: float = 0.0
    frontend_step_us: float = 0.0  # loop work per engine step that streams tokens (the output handler)
    # Per prompt token of text prompts and chat messages: on the loop, and on the renderer thread (tokenizer)
    frontend_text_us_per_token: float = 0.0
    frontend_chat_us_per_token: float = 0.0
    frontend_tokenize_us_per_token: float = 0.0
    frontend_chat_tokenize_us_per_token: float = 0.0


PROFILE_PATH_ENV = "BENCHCAMP_PROFILE_PATH"


def search_path() -> list[Path]:
    """The profile folders, first match wins: $BENCHCAMP_PROFILE_PATH's, then the package's."""
    user = [Path(d).expanduser() for d in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if d]
    return [*user, HERE]


def profile_file(kind: str, name: str) -> Path | None:
    for folder in search_path():
        path = folder / kind / f"{name}.yaml"
        if path.exists():
            return path
    return None


def available(kind: str) -> list[str]:
    return sorted({p.stem for folder in search_path() for p in (folder / kind).glob("*.yaml")})


def _load(kind: str, name: str, cls: type) -> Any:
    path = profile_file(kind, name) if "/" not in name and name not in ("", ".", "..") else None
    if path is None:
        raise ProfileError(f"unknown {kind[:-1]} profile {name!r}; choose one of: {', '.join(available(kind))}")
    data = yaml.safe_load(path.read_text()) or {}
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    unknown, missing = set(data) - names, required - set(data)
    if unknown or missing:
        raise ProfileError(f"{path}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    for key in ("hf_names", "speculative_methods", "engram_layer_ids"):
        if key in data:
            data[key] = tuple(data[key])
    if "layer_overhead_scales" in data:
        scales = data["layer_overhead_scales"]
        if not isinstance(scales, dict) or not all(isinstance(v, dict) for v in scales.values()):
            raise ProfileError(f"{path}: layer_overhead_scales must map engine -> {{gpu: scale}}")
        data["layer_overhead_scales"] = tuple(
            (str(eng), str(gpu), float(v)) for eng, by_gpu in scales.items() for gpu, v in by_gpu.items()
        )
    return cls(**data)


@cache
def load_gpu(name: str) -> GpuProfile:
    return _load("gpus", name, GpuProfile)


@cache
def load_model(name: str) -> ModelProfile:
    return _load("models", name, ModelProfile)


@cache
def load_engine(name: str) -> EngineProfile:
    return _load("engines", name, EngineProfile)


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
    raise ProfileError(
        f"no performance profile for model {model!r}; pass --model-profile "
        f"(engine.model_profile) = one of: {', '.join(available('models'))}"
    )


def check_profile(kind: str, key: str, name: str) -> None:
    """``name`` is a profile of ``kind`` (gpus, engines) that the simulator can load: a package profile or one in
    a BENCHCAMP_PROFILE_PATH folder. Else a ConfigError naming ``key``, the profiles there are, and the fix."""
    choices = available(kind)
    if name in choices:
        return
    what = {"gpus": "GPU", "engines": "engine"}.get(kind, kind[:-1])
    writes = "writes one" if kind == "gpus" else "writes one when it fits engine factors"
    raise ConfigError(
        f"{key}={name}: unknown {what} profile; available: {', '.join(choices)}; or point {PROFILE_PATH_ENV} "
        f"at a folder with {kind}/{name}.yaml (benchcamp calibrate --out {writes})"
    )
