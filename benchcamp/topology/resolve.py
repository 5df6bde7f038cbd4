"""The topology a config deploys: its ``topology:`` section, else the one-role unified topology of today's flat
``engine`` + ``hardware`` sections."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchcamp.topology.model import Role, Topology

if TYPE_CHECKING:
    from benchcamp.config import Config


def topology_of(cfg: Config) -> Topology:
    """``cfg.topology`` when set; else one unified engine of engine.tensor_parallel_size x data_parallel_size on
    hardware.gpu_count GPUs (data_parallel_size_local ranks per node when set: vLLM's multi-node launch)."""
    if cfg.topology is not None:
        return cfg.topology
    e = cfg.engine
    local = e.data_parallel_size_local or e.data_parallel_size
    role = Role(
        instances=1,
        nodes_per_instance=e.data_parallel_size // local,
        gpus_per_node=local * e.tensor_parallel_size,
        tensor_parallel_size=e.tensor_parallel_size,
        data_parallel_size=e.data_parallel_size,
        data_parallel_size_local=e.data_parallel_size_local,
        enable_expert_parallel=e.enable_expert_parallel,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        kv_offloading_size_gib=e.kv_offloading_size_gib,
        gpu=cfg.hardware.gpu,
        extra_args=list(e.extra_args),
    )
    return Topology(unified=role)
