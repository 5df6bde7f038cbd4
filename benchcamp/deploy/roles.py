"""Deploy a topology (benchcamp.topology): every role's engines, node by node, and the router in front.

What runs, per role and instance (a leaf of argv: :func:`plan` builds it, ``launch_topology`` starts it):

- real vLLM: per node of the instance, one ``vllm serve`` process: the head (API server and DP
  coordinator: ``--data-parallel-size N --data-parallel-size-local n --data-parallel-address H
  --data-parallel-rpc-port P``) and, for every further node, a ``--headless`` peer with its
  ``--data-parallel-start-rank``; on the local provider the nodes are processes on loopback;
- the simulated engine: one process per instance (it runs every DP rank in one process, as the
  flat deployment does), with the same flags;
- the role's flags: ``--enable-expert-parallel`` (and ``--all2all-backend``, ``--enable-eplb``),
  ``--kv-transfer-config`` (the role's connector; the simulated engines and ExampleConnector share
  one folder per execution, removed at teardown: nothing in vLLM cleans it), ``--speculative-config``
  (synthetic acceptance as vLLM's ``rejection_sample_method``), and on GPUs the decode role's
  ``--compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}`` of vLLM's PD recipes;
- a router process (benchcamp.router) when the topology needs one (several instances, or
  prefill/decode): the deployment's endpoint is the router's.

Every process gets the deployment's key in its environment and dies with it; ``stop`` ends all of
them (router first, then every engine process: a headless peer does not exit with its head).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchcamp.deploy.argv import peer_argvs, simulated_argv, vllm_argv
from benchcamp.topology import Role, RoleKind, Topology

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchcamp.config import Config

# benchcamp.topology's router policies -> benchcamp.router's
ROUTER_POLICY = {
    "round_robin": "round_robin",
    "random": "random",
    "least_loaded": "least_loaded",
    "session_affinity": "session_affinity",
    "cache_aware": "session_affinity",  # the session's replica holds its prefix: affinity is the cache-aware choice
}
# vLLM's PD recipes run decode engines with full CUDA graphs for decode batches only
DECODE_COMPILATION = {"cudagraph_mode": "FULL_DECODE_ONLY"}
LETTER = {"unified": "u", "prefill": "p", "decode": "d"}


@dataclass
class Proc:
    """One process of the deployment."""

    name: str  # log name stem, e.g. engine-p0 (head of prefill instance 0), engine-d0-node1, router
    role: str  # unified | prefill | decode | router
    instance: int
    node: int
    head: bool
    argv: list[str]
    endpoint: str | None = None  # the API it serves (heads and the router)
    work: str = ""  # the folder its caches and temp files go to (real vLLM), relative to the deployment's
    env: dict[str, str] = field(default_factory=dict)


def role_config(cfg: Config, role: Role) -> Config:
    """The flat config of one instance of ``role``: its parallel layout, batching, KV tier and GPU in the
    ``engine`` and ``hardware`` sections, the rest shared (model, block size, KV dtype, version)."""
    local = role.local_ranks if role.nodes_per_instance > 1 else None
    engine = cfg.engine.model_copy(
        update={
            "tensor_parallel_size": role.tensor_parallel_size,
            "data_parallel_size": role.data_parallel_size,
            "data_parallel_size_local": local,
            "enable_expert_parallel": role.enable_expert_parallel,
            "max_num_seqs": role.max_num_seqs,
            "max_num_batched_tokens": role.max_num_batched_tokens,
            "kv_offloading_size_gib": role.kv_offloading_size_gib,
            "extra_args": [*cfg.engine.extra_args, *role.extra_args],
        }
    )
    hardware = cfg.hardware.model_copy(
        update={"gpu": role.gpu or cfg.hardware.gpu, "gpu_count": role.gpus_per_instance}
    )
    return cfg.model_copy(update={"engine": engine, "hardware": hardware, "topology": None})


def kv_transfer_config(role: Role, storage: Path | None) -> str | None:
    """vLLM's ``--kv-transfer-config`` of ``role``; ``storage``: the shared folder (ExampleConnector's, and
    what the simulated engines model every connector with)."""
    kc = role.kv_connector
    if kc is None:
        return None
    extra = dict(kc.settings)
    if storage is not None:
        extra["shared_storage_path"] = str(storage)
    elif kc.shared_storage_path:
        extra["shared_storage_path"] = kc.shared_storage_path
    out: dict[str, Any] = {"kv_connector": kc.kind, "kv_role": kc.kv_role}
    if extra:
        out["kv_connector_extra_config"] = extra
    return json.dumps(out, separators=(",", ":"))


def speculative_config(role: Role) -> str | None:
    """vLLM's ``--speculative-config`` of ``role`` (synthetic acceptance: vLLM's forced acceptance length)."""
    s = role.speculative
    if s is None:
        return None
    out: dict[str, Any] = {"method": s.method, "num_speculative_tokens": s.num_speculative_tokens}
    if s.draft_model:
        out["model"] = s.draft_model
    if s.acceptance == "synthetic" and s.acceptance_length is not None:
        out["rejection_sample_method"] = "synthetic"
        out["synthetic_acceptance_length"] = s.acceptance_length
    out.update(s.settings)
    return json.dumps(out, separators=(",", ":"))


def role_flags(cfg: Config, kind: RoleKind, role: Role, storage: Path | None) -> list[str]:
    """What a role adds to the flat engine flags: connector, speculative decoding, all-to-all, EPLB, decode graphs."""
    flags: list[str] = []
    if role.enable_expert_parallel and role.all2all_backend:
        flags += ["--all2all-backend", role.all2all_backend]
    if role.enable_expert_parallel and role.enable_eplb:
        flags.append("--enable-eplb")
    if role.enable_expert_parallel and role.enable_dbo:
        flags.append("--enable-dbo")
    if (kv := kv_transfer_config(role, storage)) is not None:
        flags += ["--kv-transfer-config", kv]
    if (spec := speculative_config(role)) is not None:
        flags += ["--speculative-config", spec]
    if kind == "decode" and (role.gpu or cfg.hardware.gpu) != "cpu":
        flags += ["--compilation-config", json.dumps(DECODE_COMPILATION, separators=(",", ":"))]
    return flags


def kv_link(cfg: Config, topo: Topology) -> tuple[float, float]:
    """(GB/s per GPU one way, latency in us) of the link between prefill and decode, from the decode GPU's
    profile, by benchcamp.sim.clock.fleet's rule: ``topology.kv_link`` auto = NVLink when every GPU of the
    deployment fits in one NVLink domain (``nvlink_domain_gpus``), else RDMA (``rdma_gbps``, ``rdma_latency_us``);
    pcie = the host link."""
    from benchcamp.profiles import load_gpu

    gpu = load_gpu((topo.decode.gpu if topo.decode is not None else "") or cfg.hardware.gpu)
    link = topo.kv_link
    if link == "auto":
        link = "nvlink" if topo.total_gpus <= gpu.nvlink_domain_gpus else "rdma"
    if link == "nvlink":
        return float(gpu.interconnect_gbps), float(gpu.collective_latency_us)
    if link == "pcie":
        return float(gpu.host_link_gbps), float(gpu.rdma_latency_us)
    return float(gpu.rdma_gbps), float(gpu.rdma_latency_us)


def plan(
    cfg: Config,
    topo: Topology,
    host: str,
    *,
    free_port: Callable[[], int],
    storage: Path | None,
    executable: str | None = None,
    model: str | None = None,
    router_port: int | None = None,
    address_of: Callable[[RoleKind, int, int], str] | None = None,
) -> list[Proc]:
    """Every process of ``topo`` listening on ``host``, engines first (prefill before decode), the router last.
    ``executable``/``model``: a real vLLM (else the simulated engine). ``address_of(role, instance, node)``: where
    that node of an instance is reached, when the nodes are machines of their own (a Slurm job's); by default
    every process is on ``host``."""
    from benchcamp.router import router_argv

    real = executable is not None
    exe = executable or "vllm"
    procs: list[Proc] = []
    heads: dict[str, list[str]] = {}
    gbps, latency = kv_link(cfg, topo)
    for kind, role in topo.roles():
        rc = role_config(cfg, role)
        extra = role_flags(cfg, kind, role, storage)
        for i in range(role.instances):
            port = free_port()
            name = f"engine-{LETTER[kind]}{i}"
            address = address_of(kind, i, 0) if address_of is not None else host
            endpoint = f"http://{address}:{port}"
            heads.setdefault(kind, []).append(endpoint)
            if real:
                multinode = role.nodes_per_instance > 1
                head = vllm_argv(
                    rc,
                    host,
                    port,
                    executable=exe,
                    model=model,
                    dp_rpc_port=free_port() if multinode else None,
                    dp_address=address,
                )
                head += extra
                nixl = role.kv_connector is not None and role.kv_connector.kind.startswith("Nixl")
                # NIXL's side channel: each node's own address, one port per instance (they may share a host)
                side_port = str(free_port()) if nixl else ""
                for n in range(role.nodes_per_instance if multinode else 1):
                    env = {}
                    if nixl:
                        node_address = address_of(kind, i, n) if address_of is not None else host
                        env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": node_address, "VLLM_NIXL_SIDE_CHANNEL_PORT": side_port}
                    if n == 0:
                        procs.append(Proc(name, kind, i, 0, True, head, endpoint, work=name, env=env))
                    else:
                        peer = peer_argvs(head, rc)[n - 1]
                        procs.append(Proc(f"{name}-node{n}", kind, i, n, False, peer, work=f"{name}-node{n}", env=env))
            else:
                argv = simulated_argv(rc, host, port) + extra
                if role.kv_connector is not None:
                    argv += ["--kv-link-gbps", f"{gbps:g}", "--kv-link-latency-us", f"{latency:g}"]
                spec = role.speculative
                if spec is not None and spec.acceptance == "real" and spec.acceptance_length is not None:
                    # what the simulator assumes for the model's own acceptance (a real engine measures it)
                    argv += ["--speculative-acceptance-length", f"{spec.acceptance_length:g}"]
                procs.append(Proc(name, kind, i, 0, True, argv, endpoint))
    if topo.needs_router:
        r = topo.router
        port = router_port or (r.port if r is not None and r.port else None) or free_port()
        policy = ROUTER_POLICY[r.policy] if r is not None else "round_robin"
        header = r.session_header if r is not None else "X-Session-ID"
        if topo.disaggregated:
            argv = router_argv(
                host, port, prefill=heads["prefill"], decode=heads["decode"], policy=policy, session_header=header
            )
        else:
            argv = router_argv(host, port, unified=heads["unified"], policy=policy, session_header=header)
        procs.append(Proc("router", "router", 0, 0, True, argv, f"http://{host}:{port}"))
    return procs


def front(procs: list[Proc]) -> Proc:
    """The process whose API is the deployment's endpoint: the router, else the one engine's head."""
    return next((p for p in procs if p.role == "router"), procs[0])
