"""The simulated engine's settings: the `vllm serve` flags that shape its behaviour
plus the hardware it pretends to run on (``gpu``, ``num_gpus``).

Defaults follow vLLM (block_size 16, prefix caching on, gpu_memory_utilization
0.9, max_num_seqs 256, max_num_batched_tokens 8192). ``validate`` checks what vLLM
checks at start-up, with messages that name the flag and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from benchcamp.config import KV_CACHE_DTYPES
from benchcamp.profiles import (
    EngineProfile,
    GpuProfile,
    ModelProfile,
    load_engine,
    load_gpu,
    load_model,
    model_profile_for,
)

# Bytes per element of the sub-byte KV formats; fp8/int8 formats are 1, the rest 2.
_KV_BYTES = {
    "nvfp4": 0.5,
    "nvfp4_ds_mla": 0.5,
    "nvfp4_4over6": 0.5,
    "int4_per_token_head": 0.5,
    "turboquant_k8v4": 0.75,
    "turboquant_4bit_nc": 0.5,
    "turboquant_k3v4_nc": 0.4375,
    "turboquant_3bit_nc": 0.375,
}

if TYPE_CHECKING:
    from benchcamp.config import Config


@dataclass
class EngineSettings:
    model: str = "deepseek-ai/DeepSeek-V3"
    served_model_name: str = ""
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    block_size: int = 16
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    kv_offloading_size: float = 0.0  # GiB of CPU memory for KV blocks per engine (summed over its TP ranks); 0 = off
    num_gpu_blocks_override: int | None = None  # vllm --num-gpu-blocks-override: KV blocks, null block included
    gpu: str = "h200"
    num_gpus: int | None = None  # None = tensor_parallel_size x data_parallel_size
    model_profile: str = ""  # "" = derived from `model`
    engine_profile: str = "vllm"  # front end and step overheads (profiles/engines/)
    async_scheduling: bool = False  # vllm --async-scheduling: CPU work overlaps the GPU step
    num_scheduler_steps: int = 1  # vLLM 0.6 --num-scheduler-steps: admit new requests every N steps
    # vLLM --long-prefill-token-threshold: a prefill chunk's cap while another request runs or waits (0 = off)
    long_prefill_token_threshold: int = 0
    # vLLM --scheduler-reserve-full-isl (on by default): admit a request only if its whole sequence's KV fits
    scheduler_reserve_full_isl: bool = True
    kv_connector: str = ""  # --kv-transfer-config's kv_connector ("" = none): benchcamp.sim.engine.kv_connector
    # The link a KV connector pulls blocks over, per GPU: GB/s one way, and a fixed latency per transfer.
    # Default: one 400 Gb/s RDMA NIC per GPU (InfiniBand NDR / ConnectX-7, 400 Gb/s = 50 GB/s), no latency.
    kv_link_gbps: float = 50.0
    kv_link_latency_us: float = 0.0
    # vLLM --speculative-config: K draft tokens per decode step, A tokens emitted per step (1..K+1); 0 = off
    speculative_tokens: int = 0
    acceptance_length: float = 0.0
    enable_dbo: bool = False  # vLLM --enable-dbo: the all-to-all overlaps compute (benchcamp.sim.engine.perfmodel)
    # vLLM --engram-config (models with Engram tables: DeepSeek-V4.1): cpu_offload (vLLM's default: the tables in
    # pinned host memory), dp_shared_memory (one host copy per node), embedding_across_dp (shard over TP x DP)
    engram_cpu_offload: bool = True
    engram_dp_shared_memory: bool = False
    engram_across_dp: bool = False

    @classmethod
    def from_config(cls, cfg: Config, **overrides: Any) -> EngineSettings:
        e, h = cfg.engine, cfg.hardware
        s = cls(
            model=e.model,
            served_model_name=e.served_model_name,
            tensor_parallel_size=e.tensor_parallel_size,
            data_parallel_size=e.data_parallel_size,
            enable_expert_parallel=e.enable_expert_parallel,
            max_num_seqs=e.max_num_seqs,
            max_num_batched_tokens=e.max_num_batched_tokens,
            max_model_len=e.max_model_len,
            block_size=e.block_size,
            enable_prefix_caching=e.enable_prefix_caching,
            kv_cache_dtype=e.kv_cache_dtype,
            gpu_memory_utilization=e.gpu_memory_utilization,
            kv_offloading_size=e.kv_offloading_size_gib,
            num_gpu_blocks_override=e.num_gpu_blocks_override,
            long_prefill_token_threshold=e.long_prefill_token_threshold,
            gpu=h.gpu,
            num_gpus=h.gpu_count,
            model_profile=e.model_profile,
            engine_profile=cfg.engine_profile,
        )
        return replace(s, **engram_of(e.extra_args, "engine.extra_args"), **overrides)

    @property
    def name(self) -> str:
        return self.served_model_name or self.model

    @property
    def gpus(self) -> int:
        return self.num_gpus or self.tensor_parallel_size * self.data_parallel_size

    @property
    def profile_name(self) -> str:
        return self.model_profile or model_profile_for(self.model)

    def gpu_profile(self) -> GpuProfile:
        return load_gpu(self.gpu)

    def model_spec(self) -> ModelProfile:
        return load_model(self.profile_name)

    def engine_spec(self) -> EngineProfile:
        return load_engine(self.engine_profile)

    @property
    def kv_dtype_bytes(self) -> float:
        """Bytes per KV element (block scales ignored)."""
        return _KV_BYTES.get(
            self.kv_cache_dtype, 1.0 if "fp8" in self.kv_cache_dtype or "int8" in self.kv_cache_dtype else 2.0
        )

    def validate(self) -> EngineSettings:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(msg)

        need(self.tensor_parallel_size >= 1, "--tensor-parallel-size must be >= 1")
        need(self.data_parallel_size >= 1, "--data-parallel-size must be >= 1")
        need(
            self.tensor_parallel_size * self.data_parallel_size == self.gpus,
            f"--tensor-parallel-size {self.tensor_parallel_size} x --data-parallel-size "
            f"{self.data_parallel_size} does not match --num-gpus {self.gpus}; make tp x dp = num_gpus",
        )
        need(self.max_num_seqs >= 1, "--max-num-seqs must be >= 1")
        need(
            self.max_num_batched_tokens >= self.max_num_seqs,
            f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be >= --max-num-seqs "
            f"({self.max_num_seqs}), as vLLM requires; raise it or lower --max-num-seqs",
        )
        need(self.block_size >= 1, "--block-size must be >= 1")
        need(
            0 <= self.long_prefill_token_threshold <= (self.max_model_len or self.long_prefill_token_threshold),
            f"--long-prefill-token-threshold ({self.long_prefill_token_threshold}) must be in 0..--max-model-len "
            f"({self.max_model_len}), as vLLM requires",
        )
        need(self.kv_link_gbps > 0, f"--kv-link-gbps {self.kv_link_gbps}: GB/s, must be > 0")
        need(self.kv_link_latency_us >= 0, f"--kv-link-latency-us {self.kv_link_latency_us}: must be >= 0")
        need(
            self.num_scheduler_steps >= 1,
            f"--num-scheduler-steps {self.num_scheduler_steps}: must be >= 1 (1 = schedule every step)",
        )
        need(0 < self.gpu_memory_utilization <= 1, "--gpu-memory-utilization must be in (0, 1]")
        need(
            self.kv_cache_dtype in KV_CACHE_DTYPES,
            f"--kv-cache-dtype {self.kv_cache_dtype!r}: use one of vLLM's {', '.join(KV_CACHE_DTYPES)}",
        )
        need(self.max_model_len is None or self.max_model_len >= 1, "--max-model-len must be >= 1")
        if self.speculative_tokens and not self.acceptance_length:  # not forced: the draft head's published rate
            rate = self.model_spec().draft_acceptance_rate
            need(
                rate > 0,
                f"--speculative-config: model profile {self.profile_name} has no draft_acceptance_rate; force one with "
                '"rejection_sample_method":"synthetic","synthetic_acceptance_length":A',
            )
            from benchcamp.topology.validate import acceptance_length

            self.acceptance_length = acceptance_length(self.speculative_tokens, rate)
        need(
            not self.speculative_tokens or 1 <= self.acceptance_length <= self.speculative_tokens + 1,
            f"speculative acceptance length {self.acceptance_length}: must be in 1..K+1 = "
            f"{self.speculative_tokens + 1} tokens per step",
        )
        need(
            self.kv_offloading_size >= 0,
            f"--kv-offloading-size {self.kv_offloading_size}: GiB of CPU memory, must be >= 0 (0 = no CPU tier)",
        )
        need(
            self.num_gpu_blocks_override is None or self.num_gpu_blocks_override >= 2,
            f"--num-gpu-blocks-override {self.num_gpu_blocks_override}: must be >= 2 (one block is vLLM's null block)",
        )
        need(
            not self.engram_dp_shared_memory or self.data_parallel_size > 1,
            "--engram-config: dp_shared_memory requires --data-parallel-size > 1 (vLLM); drop it or raise DP",
        )
        self.gpu_profile()
        self.model_spec()
        self.engine_spec()
        return self


def engram_of(argv: list[str], where: str) -> dict[str, Any]:
    """``EngineSettings`` keyword arguments of an ``--engram-config`` among vLLM flags (``where`` names them in the
    one-line error of a bad one)."""
    from benchcamp.errors import ConfigError
    from benchcamp.sim.engine.cli_args import engram_from_argv

    try:
        return engram_from_argv(list(argv))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
