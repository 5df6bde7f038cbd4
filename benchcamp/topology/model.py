"""The deployment topology: roles x instances x nodes x engines, as params.yaml describes it.

A deployment is one or more *roles* (``unified``, or ``prefill`` + ``decode``), each run as ``instances``
identical engines; an instance spans ``nodes_per_instance`` nodes of ``gpus_per_node`` GPUs and runs vLLM's
data-parallel layout (TP x DP GPUs, ``data_parallel_size_local`` ranks per node). How the DP ranks run follows
vLLM (:func:`dp_layout`, from the model and ``enable_expert_parallel``): a dense model's ranks are independent
engines (``data_parallel_size: N`` is then the same as ``instances: N`` behind a router, less the router hop); a
MoE model's run in lockstep, its experts TP-sharded over the DP x TP group (no expert parallel) or spread over it
(expert parallel). A ``router`` spreads requests over the instances and, with prefill and decode, hands each request from a
prefill instance to a decode instance through the roles' KV connector.

The flat ``engine`` + ``hardware`` sections of params.yaml are the one-role case (:func:`topology_of`); a
``topology:`` section describes the rest. The shared engine settings (model, block size, prefix caching, KV
dtype, memory utilization, version) stay in ``engine``; what differs per role lives here.

vLLM facts behind the fields (vllm-project/vllm docs "Data Parallel Deployment" and "Disaggregated Prefilling",
read 2026-12-01): ``--data-parallel-size N --data-parallel-size-local n`` on every node, the head with
``--data-parallel-address/--data-parallel-rpc-port``, the others ``--headless --data-parallel-start-rank r``;
``--max-num-seqs`` is per DP rank; with ``--enable-expert-parallel`` the EP size is TP x DP. KV connectors are the
names registered in vllm/distributed/kv_transfer/kv_connector/factory.py (KV_CONNECTORS below).

Pure data and structural checks only: checks that need a model or GPU profile are in ``topology.validate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

RoleKind = Literal["unified", "prefill", "decode"]
ROLE_KINDS: tuple[RoleKind, ...] = ("unified", "prefill", "decode")

# KV connectors registered in vLLM's KVConnectorFactory (vllm/distributed/kv_transfer/kv_connector/factory.py,
# the 16 register_connector calls as listed from that file at vLLM main, read 2026-12-01). "SharedStorageConnector"
# is the example connector's name before vLLM renamed it ExampleConnector; kept so older recipes validate.
KV_CONNECTORS = (
    "NixlConnector",
    "NixlPullConnector",
    "NixlPushConnector",
    "ExampleConnector",
    "SharedStorageConnector",
    "LMCacheConnectorV1",
    "LMCacheMPConnector",
    "MooncakeConnector",
    "MooncakeStoreConnector",
    "P2pNcclConnector",
    "MultiConnector",
    "OffloadingConnector",
    "SimpleCPUOffloadConnector",
    "FlexKVConnectorV1",
    "HF3FSKVConnector",
    "MoRIIOConnector",
    "DecodeBenchConnector",
)
KvConnectorKind = Literal[KV_CONNECTORS]  # type: ignore[valid-type]
# Connectors that move KV from one engine to another (prefill -> decode), as opposed to the ones that only
# offload an engine's own KV to another tier (OffloadingConnector, SimpleCPUOffloadConnector).
TRANSFER_CONNECTORS = frozenset(KV_CONNECTORS) - {"OffloadingConnector", "SimpleCPUOffloadConnector"}
# Connectors whose settings must name a shared folder (the example connector's disk store).
SHARED_STORAGE_CONNECTORS = frozenset({"ExampleConnector", "SharedStorageConnector"})

# vLLM's speculative methods (SpeculativeConfig.method; "dspark" from the DeepSeek-V4.1-Flash recipe,
# vllm-project/recipes models/deepseek-ai/DeepSeek-V4.1-Flash.yaml, read 2026-12-01).
SPECULATIVE_METHODS = ("mtp", "dspark", "ngram", "suffix", "eagle", "eagle3", "medusa", "draft_model", "dflash")
SpeculativeMethod = Literal[SPECULATIVE_METHODS]  # type: ignore[valid-type]
# Methods that run a head trained with the checkpoint: the model profile must list it (ModelProfile
# .speculative_methods; "mtp" also needs mtp_layers > 0).
HEAD_METHODS = frozenset({"mtp", "dspark"})
# Methods that need a separate draft model (speculative.draft_model).
DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "medusa", "draft_model", "dflash"})

# How vLLM runs an engine's DP ranks (vllm-project/vllm main via the code search, and the same lines in the real CPU
# engine's installed vLLM 0.32.0+cpu, read 2026-12-02):
# - vllm/v1/engine/core.py run_engine_core: "if data_parallel and vllm_config.model_config.is_moe:" a rank is a
#   DPEngineCoreProc, else "Non-MoE DP ranks are completely independent, so treat like DP=1" (an EngineCoreProc with
#   data_parallel_size = 1): a dense model's DP ranks step on their own clocks, the API server's DP load balancer
#   in front (the same as independent replicas behind a router).
# - a MoE model's ranks run in lockstep: the DP coordinator (vllm/v1/engine/utils.py launch_core_engines starts it
#   with enable_wave_coordination=is_moe) keeps every rank in the same request wave and DPEngineCoreProc ("should
#   only be used for MoE models") runs execute_dummy_batch on a rank with nothing scheduled, because every
#   rank must join each forward pass's expert collectives (docs/serving/data_parallel_deployment.md: "Forward
#   passes must be aligned ... even when there are fewer requests to be processed than DP ranks").
# - the experts of a MoE model with DP > 1: with --enable-expert-parallel spread over TP x DP GPUs (EP size TP x DP,
#   all-to-all dispatch/combine); without it "expert layers form a tensor parallel group of size DP x TP" (the same
#   doc): vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make flattens TP across DP
#   (flatten_tp_across_dp, flatten_tp_across_dp_and_pcp in 0.32: tp_size = dp_size * tp_size, "so we shard across
#   all devices"; "if not use_ep": ep_size=1), every GPU holds 1/(DP x TP) of every expert, and each MoE layer
#   gathers the DP ranks' tokens and reduces the partial sums (vllm/distributed/device_communicators/all2all.py
#   AgRsAll2AllManager: all_gatherv dispatch, reduce_scatterv combine).
DpLayout = Literal["single", "independent", "moe_tp", "moe_ep"]
DP_LAYOUTS: dict[str, str] = {
    "single": "one DP rank",
    "independent": "dense DP: independent engines (no lockstep), vLLM's load balancer in front",
    "moe_tp": "MoE DP without expert parallel: attention DP, experts TP across DP x TP, ranks in lockstep",
    "moe_ep": "MoE DP + expert parallel: experts spread over DP x TP, ranks in lockstep (dummy batches)",
}


def dp_layout(data_parallel_size: int, is_moe: bool, enable_expert_parallel: bool) -> DpLayout:
    """Which of vLLM's DP layouts an engine of ``data_parallel_size`` ranks runs (see DP_LAYOUTS): decided by the
    model (MoE or dense) and ``enable_expert_parallel``, as vLLM decides it; no field of its own."""
    if data_parallel_size <= 1:
        return "single"
    if not is_moe:
        return "independent"
    return "moe_ep" if enable_expert_parallel else "moe_tp"


RouterPolicy = Literal["round_robin", "random", "least_loaded", "session_affinity", "cache_aware"]
ROUTER_POLICIES = ("round_robin", "random", "least_loaded", "session_affinity", "cache_aware")
LinkKind = Literal["auto", "nvlink", "rdma", "pcie"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class KvConnector(_Section):
    """vLLM's ``--kv-transfer-config``: the connector, the engine's role in it, and its extra config."""

    kind: KvConnectorKind = "NixlConnector"
    kv_role: Literal["kv_both", "kv_producer", "kv_consumer"] = Field(
        "kv_both", description="vLLM's kv_role; NIXL recipes run every instance as kv_both"
    )
    shared_storage_path: str = Field("", description="ExampleConnector's folder (required for it)")
    # Free-form kv_connector_extra_config (NIXL side channel, UCX settings, LMCache/Mooncake settings).
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _storage(self) -> KvConnector:
        if self.kind in SHARED_STORAGE_CONNECTORS and not self.shared_storage_path:
            raise ValueError(
                f"kv_connector.shared_storage_path: required with kind={self.kind} (its disk store); "
                "set a folder both roles can reach"
            )
        return self

    @property
    def transfers(self) -> bool:
        """True when the connector moves KV between engines (prefill -> decode)."""
        return self.kind in TRANSFER_CONNECTORS


class Speculative(_Section):
    """vLLM's ``--speculative-config``: K draft tokens per step and how many of them are accepted."""

    method: SpeculativeMethod
    num_speculative_tokens: int = Field(..., ge=1, le=16, description="K draft tokens per step")
    acceptance: Literal["real", "synthetic"] = Field(
        "real",
        description="synthetic: vLLM forces the acceptance length (rejection_sample_method=synthetic, "
        "synthetic_acceptance_length=A), as AgentX throughput runs do; real: the model's own acceptance",
    )
    acceptance_length: float | None = Field(
        None,
        ge=1,
        le=17,
        description="A = tokens emitted per decode step (accepted drafts + 1), 1..K+1. Required with "
        "acceptance=synthetic; with real, what the simulator assumes (empty: the model profile's draft "
        "acceptance rate)",
    )
    draft_model: str = Field("", description="the draft model (eagle, eagle3, medusa, draft_model, dflash)")
    # Other speculative-config keys passed through (draft_sample_method, enable_adaptive_verification, ...).
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Speculative:
        k = self.num_speculative_tokens
        if self.acceptance == "synthetic" and self.acceptance_length is None:
            raise ValueError(
                "speculative.acceptance_length: required with acceptance=synthetic (vLLM's "
                f"synthetic_acceptance_length); set a value in 1..{k + 1}"
            )
        if self.acceptance_length is not None and self.acceptance_length > k + 1:
            raise ValueError(
                f"speculative.acceptance_length={self.acceptance_length} exceeds num_speculative_tokens+1={k + 1} "
                "(a step emits at most K accepted drafts + 1 token); lower it or raise num_speculative_tokens"
            )
        if self.method in DRAFT_MODEL_METHODS and not self.draft_model:
            raise ValueError(
                f"speculative.draft_model: method={self.method} needs a draft model; set its Hugging Face name"
            )
        return self


class Role(_Section):
    """One role's engines: ``instances`` copies of a TP x DP engine spread over ``nodes_per_instance`` nodes."""

    instances: int = Field(1, ge=1, le=1024, description="identical engines of this role")
    nodes_per_instance: int = Field(1, ge=1, le=1024, description="nodes one engine spans")
    gpus_per_node: int = Field(8, ge=1, le=1024, description="GPUs each node gives the engine")
    tensor_parallel_size: int = Field(1, ge=1, le=1024)
    data_parallel_size: int = Field(8, ge=1, le=4096, description="DP ranks per instance, over all its nodes")
    data_parallel_size_local: int | None = Field(
        None, ge=1, le=1024, description="DP ranks per node; empty = data_parallel_size / nodes_per_instance"
    )
    enable_expert_parallel: bool = Field(
        True,
        description="MoE models (vLLM --enable-expert-parallel): on, whole experts spread over TP x DP GPUs with an "
        "all-to-all; off with DP > 1, attention DP and every expert TP-sharded over the DP x TP group; both run the DP "
        "ranks in lockstep. Dense models ignore it: their DP ranks are independent engines (dp_layout)",
    )
    all2all_backend: str = Field("", description="vLLM --all2all-backend (e.g. deepep_high_throughput); empty = vLLM's")
    enable_eplb: bool = False
    enable_dbo: bool = Field(
        False, description="vLLM --enable-dbo: dual-batch overlap hides the expert all-to-all behind compute"
    )
    max_num_seqs: int = Field(256, ge=1, le=1_000_000, description="per DP rank, as in vLLM")
    max_num_batched_tokens: int = Field(8192, ge=1, le=100_000_000, description="per DP rank per step")
    kv_connector: KvConnector | None = None
    speculative: Speculative | None = None
    kv_offloading_size_gib: float = Field(
        0.0,
        ge=0,
        le=1_000_000,
        description="CPU KV tier per DP rank in GiB, summed over its TP ranks (vLLM --kv-offloading-size); 0 = off",
    )
    api_server_count: int = Field(
        0, ge=0, le=4096, description="API-server processes per instance (vLLM --api-server-count); 0 = one per DP rank"
    )
    gpu: str = Field("", description="GPU profile of this role's nodes; empty = hardware.gpu")
    extra_args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _layout(self) -> Role:
        # Role-relative field names; Topology prefixes them with the role ("topology.decode.").
        tp, dp, nodes = self.tensor_parallel_size, self.data_parallel_size, self.nodes_per_instance
        if dp % nodes:
            raise ValueError(
                f"data_parallel_size={dp} is not a multiple of nodes_per_instance={nodes}: every node runs the "
                "same number of DP ranks; set data_parallel_size to a multiple of nodes_per_instance"
            )
        if self.gpus_per_node % tp:
            raise ValueError(
                f"tensor_parallel_size={tp} does not divide gpus_per_node={self.gpus_per_node} (a TP group stays "
                "inside one node); pick a divisor"
            )
        local = self.local_ranks
        if self.data_parallel_size_local is not None and local * nodes != dp:
            raise ValueError(
                f"data_parallel_size={dp} != nodes_per_instance={nodes} x data_parallel_size_local={local}; "
                f"set data_parallel_size_local={dp // nodes} (or leave it empty)"
            )
        if local * tp != self.gpus_per_node:
            raise ValueError(
                f"data_parallel_size={dp} on nodes_per_instance={nodes} is {local} DP ranks per node x "
                f"tensor_parallel_size={tp} = {tp * local} GPUs per node, but gpus_per_node={self.gpus_per_node}; "
                f"set data_parallel_size={self.gpus_per_node // tp * nodes} "
                "(TP x DP = nodes_per_instance x gpus_per_node)"
            )
        return self

    # -- derived -------------------------------------------------------------------------------
    @property
    def local_ranks(self) -> int:
        """DP ranks per node (vLLM --data-parallel-size-local)."""
        return self.data_parallel_size_local or self.data_parallel_size // self.nodes_per_instance

    @property
    def gpus_per_instance(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def gpus(self) -> int:
        """All GPUs of this role (every instance)."""
        return self.instances * self.gpus_per_instance

    @property
    def nodes(self) -> int:
        return self.instances * self.nodes_per_instance

    @property
    def expert_parallel_size(self) -> int:
        """vLLM's EP size: TP x DP with --enable-expert-parallel, else 1 (experts sharded by TP x DP: dp_layout)."""
        return self.gpus_per_instance if self.enable_expert_parallel else 1

    def dp_layout(self, is_moe: bool) -> DpLayout:
        """How vLLM runs this role's DP ranks for a MoE or dense model (:func:`dp_layout`)."""
        return dp_layout(self.data_parallel_size, is_moe, self.enable_expert_parallel)

    def expert_shards(self, is_moe: bool) -> int:
        """GPUs one routed expert's weights are spread over: TP x DP with expert parallel (whole experts per GPU)
        or with MoE DP without it (every expert TP-sharded over the DP x TP group); TP alone otherwise."""
        return self.gpus_per_instance if self.dp_layout(is_moe) in ("moe_tp", "moe_ep") else self.tensor_parallel_size


class Router(_Section):
    """The process in front of the instances: how it picks one, and whether it splits prefill from decode."""

    policy: RouterPolicy = "round_robin"
    session_header: str = Field(
        "x-session-id", description="request header naming the session (session_affinity, cache_aware)"
    )
    pd_disaggregation: bool = Field(
        False, description="send each request to a prefill instance, then its KV to a decode instance"
    )
    kind: Literal["benchcamp", "vllm-router", "toy-proxy"] = Field(
        "benchcamp", description="which router process: benchcamp's own, vllm-router, or vLLM's toy proxy"
    )
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")


class Topology(_Section):
    """params.yaml ``topology:``: either ``unified``, or ``prefill`` and ``decode`` (and a router)."""

    unified: Role | None = None
    prefill: Role | None = None
    decode: Role | None = None
    router: Router | None = None
    # The link that carries KV between prefill and decode: auto = NVLink when both roles fit in one NVLink
    # domain of the GPU's system profile, else RDMA between nodes.
    kv_link: LinkKind = "auto"

    @model_validator(mode="before")
    @classmethod
    def _name_role_errors(cls, data: Any) -> Any:
        # Role errors say which role: validate each role here so the message carries "topology.<role>.".
        if isinstance(data, dict):
            for kind in ROLE_KINDS:
                if isinstance(data.get(kind), dict):
                    try:
                        Role.model_validate(data[kind])
                    except ValidationError as exc:
                        first = exc.errors()[0]
                        if first["type"] == "value_error":
                            msg = str(first["msg"]).removeprefix("Value error, ")
                            raise ValueError(f"topology.{kind}.{msg}") from None
                        # type and bound errors: pydantic's own, located at topology.<kind>.<field>
        return data

    @model_validator(mode="after")
    def _roles(self) -> Topology:
        if self.unified is not None and (self.prefill is not None or self.decode is not None):
            raise ValueError(
                "topology: give either unified or prefill + decode, not both; remove topology.unified "
                "for a disaggregated deployment"
            )
        if self.unified is None and self.prefill is None and self.decode is None:
            raise ValueError("topology: no role; set topology.unified, or topology.prefill and topology.decode")
        if (self.prefill is None) != (self.decode is None):
            have, lack = ("prefill", "decode") if self.decode is None else ("decode", "prefill")
            raise ValueError(
                f"topology.{have} without topology.{lack}: a disaggregated deployment needs both roles; "
                f"add topology.{lack} or use topology.unified"
            )
        for kind, role in self.roles():
            conn = role.kv_connector
            if conn is not None and conn.transfers and self.router is None:
                raise ValueError(
                    f"topology.{kind}.kv_connector={conn.kind} moves KV between engines, but there is no "
                    "router to hand requests over; add topology.router (pd_disaggregation: true)"
                )
        if self.disaggregated:
            assert self.prefill is not None and self.decode is not None
            for kind, role in (("prefill", self.prefill), ("decode", self.decode)):
                if role.kv_connector is None or not role.kv_connector.transfers:
                    raise ValueError(
                        f"topology.{kind}.kv_connector: prefill/decode disaggregation needs a connector that "
                        "moves KV between engines on both roles; set kind: NixlConnector (or ExampleConnector, "
                        "LMCacheConnectorV1, MooncakeConnector, P2pNcclConnector)"
                    )
            if self.prefill.kv_connector.kind != self.decode.kv_connector.kind:  # type: ignore[union-attr]
                raise ValueError(
                    f"topology.decode.kv_connector.kind={self.decode.kv_connector.kind} differs from "  # type: ignore[union-attr]
                    f"topology.prefill.kv_connector.kind={self.prefill.kv_connector.kind}: both ends of the "  # type: ignore[union-attr]
                    "transfer run the same connector; set the same kind"
                )
            if self.router is None or not self.router.pd_disaggregation:
                raise ValueError(
                    "topology.router.pd_disaggregation: prefill + decode roles need a router that splits them; "
                    "set topology.router.pd_disaggregation: true"
                )
            ps, ds = self.prefill.speculative, self.decode.speculative
            if (ps is None) != (ds is None) or (ps is not None and ds is not None and ps.method != ds.method):
                raise ValueError(
                    "topology.prefill.speculative and topology.decode.speculative differ: the transferred KV "
                    "must match the decode engine's (vLLM's recipes run the same speculative method on both "
                    "roles); set the same method on both, or none"
                )
        elif self.router is not None and self.router.pd_disaggregation:
            raise ValueError(
                "topology.router.pd_disaggregation=true needs topology.prefill and topology.decode; "
                "set it false for a unified deployment"
            )
        return self

    # -- derived -------------------------------------------------------------------------------
    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None and self.decode is not None

    def roles(self) -> list[tuple[RoleKind, Role]]:
        """(kind, role) in launch order: prefill before decode."""
        out: list[tuple[RoleKind, Role]] = []
        for kind in ("unified", "prefill", "decode"):
            role = getattr(self, kind)
            if role is not None:
                out.append((kind, role))  # type: ignore[arg-type]
        return out

    def role(self, kind: RoleKind) -> Role:
        role = getattr(self, kind)
        if role is None:
            raise KeyError(f"topology has no {kind} role")
        return role  # type: ignore[no-any-return]

    @property
    def total_gpus(self) -> int:
        """Every GPU of every role: AgentX divides tokens/s by prefill GPUs + decode GPUs."""
        return sum(r.gpus for _, r in self.roles())

    @property
    def gpus_by_role(self) -> dict[str, int]:
        return {k: r.gpus for k, r in self.roles()}

    @property
    def total_nodes(self) -> int:
        return sum(r.nodes for _, r in self.roles())

    @property
    def needs_router(self) -> bool:
        """More than one engine to spread requests over, or prefill/decode to split."""
        return self.disaggregated or sum(r.instances for _, r in self.roles()) > 1

    def nodes(self) -> list[NodePlacement]:
        """Every node of the deployment, in launch order, with its DP ranks and whether it is its engine's head."""
        out: list[NodePlacement] = []
        for kind, role in self.roles():
            for inst in range(role.instances):
                for n in range(role.nodes_per_instance):
                    out.append(
                        NodePlacement(
                            index=len(out),
                            role=kind,
                            instance=inst,
                            node=n,
                            head=n == 0,
                            start_rank=n * role.local_ranks,
                            local_ranks=role.local_ranks,
                            gpus=role.gpus_per_node,
                            data_parallel_size=role.data_parallel_size,
                        )
                    )
        return out

    def describe(self) -> str:
        """One line, e.g. ``1P(DP8 TP1 EP8, 8 GPUs) + 1D(DP16 TP1 EP16, 2x8 GPUs) = 24 GPUs``."""
        parts = []
        for kind, role in self.roles():
            letter = {"unified": "U", "prefill": "P", "decode": "D"}[kind]
            ep = f" EP{role.expert_parallel_size}" if role.enable_expert_parallel else ""
            spec = f" {role.speculative.method}{role.speculative.num_speculative_tokens}" if role.speculative else ""
            span = (
                f"{role.nodes_per_instance}x{role.gpus_per_node}"
                if role.nodes_per_instance > 1
                else str(role.gpus_per_node)
            )
            parts.append(
                f"{role.instances}{letter}(DP{role.data_parallel_size} TP{role.tensor_parallel_size}{ep}{spec}, "
                f"{span} GPUs)"
            )
        return " + ".join(parts) + f" = {self.total_gpus} GPUs"


@dataclass(frozen=True)
class NodePlacement:
    """One node of a deployment: which engine it belongs to and which DP ranks it runs."""

    index: int  # position in the whole deployment (0 = the first node launched)
    role: RoleKind
    instance: int  # which engine of the role
    node: int  # which node of the engine (0 = its head)
    head: bool  # runs the engine's API server and DP coordinator (the others are --headless)
    start_rank: int  # vLLM --data-parallel-start-rank of this node's first rank
    local_ranks: int  # vLLM --data-parallel-size-local
    gpus: int
    data_parallel_size: int  # the engine's DP size (over all its nodes)

    @property
    def ranks(self) -> range:
        return range(self.start_rank, self.start_rank + self.local_ranks)
