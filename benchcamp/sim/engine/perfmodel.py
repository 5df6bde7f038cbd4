"""Roofline performance model of one engine step.

step time = max over DP ranks of [max(compute, memory) + communication] + step overhead

Assumptions (each is a modelling choice; the numbers live in the profiles):
- compute = FLOPs / (peak FLOP/s x compute_efficiency) per GPU (FP8 models: the GPU's fp8_compute_efficiency
  where its profile has one, measured FP8 GEMMs running further from their peak than BF16's). Linear layers
  cost 2 FLOPs per parameter per token (dense part = every non-routed weight;
  MoE = ``experts_per_token`` routed experts per token), at the model's weight
  dtype peak (FP8 for DeepSeek-V3); attention costs ``attn_flops_*_pair`` per
  (query token, context token) pair per layer at BF16 peak. A prefill chunk of n
  tokens starting at context c has n x (c + (n+1)/2) pairs; a decode token at
  context c has c pairs.
- memory = bytes read / (HBM bandwidth x memory_efficiency) per GPU: the dense
  weights once per step, the routed experts actually touched, and the KV cache
  of every scheduled sequence (a prefill chunk reads its whole context once).
  The expected number of distinct experts (out of E, top-k routing, uniform and
  independent) touched by T tokens is E x (1 - (1 - k/E)^T) per MoE layer.
  Activations' traffic is ignored (small next to weights and KV at these sizes).
- compute and memory overlap perfectly inside a step (the roofline max); they
  do not overlap with communication or with the fixed step overhead.
- tensor parallel: weights, linear and attention FLOPs are divided by tp; KV is
  sharded over min(tp, kv_heads) ranks (GQA) or replicated (MLA); each layer
  does 2 ring all-reduces of the step's activations (hidden x 2 bytes per token,
  2 (tp-1)/tp of it over the link) plus a latency per collective.
- expert parallel (``enable_expert_parallel`` on a MoE model): routed experts
  are spread over all tp x dp GPUs, the DP ranks run in lockstep (each step is
  one global batch, as vLLM's DP+EP does), MoE FLOPs and expert reads are shared
  evenly, and each MoE layer does an all-to-all dispatch (FP8, 1 byte) and
  combine (BF16, 2 bytes) of hidden x k per token, (G-1)/G of it over the link.
- a MoE model with DP > 1 without expert parallel (vLLM's default: the expert layers form one TP group of DP x TP
  GPUs, ``topology.model.dp_layout`` "moe_tp"): attention and the dense layers stay DP x TP, every expert is
  sharded over all tp x dp GPUs (weights per GPU 1/(tp x dp) of the experts), the ranks run in lockstep, each
  GPU computes its 1/(tp x dp) slice of every routed expert for the global batch (MoE FLOPs and the experts
  touched by all ranks' tokens, shared evenly), and each MoE layer gathers the DP ranks' hidden states and
  reduces the experts' partial sums back (BF16, an all-gather + a reduce-scatter over the G = tp x dp group:
  2 x hidden x 2 bytes x (G-1)/G per token of the global batch over the link, 2 collective latencies).
- a MoE model with DP = 1 (or TP only) holds its experts TP-sharded; a dense model's DP ranks are independent
  engines (``core.Router`` steps each on its own clock): a step here is one rank's.
- n-gram lookup tables (DeepSeek-V4.1's Engram, ``engram_params_b``; vLLM ``--engram-config``): with
  ``cpu_offload`` (vLLM's default) the tables and their scales live in pinned host memory, TP-sharded, one
  copy per DP rank (one per node with ``dp_shared_memory``), refused when the GPU profile's
  ``host_memory_gib`` cannot hold them; each token reads its rows (per Engram layer ceil(hash heads / tp)
  rows of head_dim FP8 bytes + scales) over the host link (``host_link_gbps``) on a side stream that runs
  ahead of the main one: a step waits only where the lookups through Engram layer i outlast the work up to
  layer i (``engram_stall``). Without it they are weights in HBM, and lookups cost nothing extra (their bytes
  are small next to the weights and KV read each step).
- a fixed overhead per step: the GPU's ``step_overhead_ms`` (scheduling,
  sampling) x the engine's ``step_overhead_scale``, plus the model's
  ``layer_overhead_us`` per layer (kernel launches and synchronisation) x the
  GPU generation's ``layer_overhead_scale`` x the engine's
  ``layer_overhead_scale``, so a deep MoE model pays more per step than a
  shallow dense one. Where the model profile has the gap measured for one
  engine on one GPU (``layer_overhead_scales``: its graphed decode step from
  measured per-operation tables, ``benchcamp.calibrate.layer_gap``), that
  replaces the GPU's scale for that engine. Decode-only batches up to the engine's
  ``cuda_graph_max_batch`` replay a captured CUDA graph; other batches (mixed
  prefill, or larger) pay the larger of those gaps and the CPU's launches of
  every kernel: the per-layer cost x the engine's ``eager_layer_overhead_scale``
  x the GPU's ``launch_overhead_scale`` (a host and driver property: ROCm's
  launches cost more, a newer GPU generation does not make them cheaper).
- the engine's CPU work per step grows with the batch: ``seq_overhead_us`` per
  scheduled sequence (scheduling, input preparation, sampling bookkeeping,
  output processing) on the busiest rank. Without ``async_scheduling`` it adds
  to the step; with it (vLLM ``--async-scheduling``) the CPU prepares step
  n+1 while the GPU runs step n, so a step takes max(GPU, CPU).
- the front end (HTTP, chat template, tokenization, streaming) is not a step
  cost: ``benchcamp.sim.engine.frontend`` models it as one FIFO server in front of
  the engine (virtual time only). The rest of TTFT is the simulation itself:
  waiting for the next step, the chunked-prefill queue behind other prefills,
  the DP ranks' lockstep (the slowest rank sets each step) and the step that
  samples the first token.
- the GPU's ``compute_efficiency`` is scaled per model, for GEMMs by
  ``compute_efficiency_scale`` and for attention by
  ``attention_efficiency_scale`` (MoE grouped GEMMs with few tokens per expert
  and MLA attention run further from peak than dense GEMMs). The H200 /
  DeepSeek values are fitted to published vLLM results (bench/calibration.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchcamp.profiles import EngineProfile, GpuProfile, ModelProfile, load_engine
from benchcamp.topology.model import dp_layout

GIB = 1024**3


@dataclass
class BatchSummary:
    """What one DP rank computes in one step (filled by the scheduler)."""

    decode_seqs: int = 0
    decode_ctx: int = 0  # sum over decode sequences of the context each attends over
    prefill_seqs: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0  # attention (query, context) pairs of the prefill chunks
    prefill_ctx: int = 0  # context tokens whose KV the prefill chunks read

    @property
    def tokens(self) -> int:
        return self.decode_seqs + self.prefill_tokens


@dataclass(frozen=True)
class StepCost:
    duration_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float


class PerfModel:
    def __init__(
        self,
        gpu: GpuProfile,
        model: ModelProfile,
        tp: int = 1,
        dp: int = 1,
        expert_parallel: bool = False,
        kv_dtype_bytes: float = 2.0,
        engine: EngineProfile | None = None,
        async_scheduling: bool = False,
        spec_tokens: int = 0,
        acceptance_length: float = 1.0,
        dbo: bool = False,
        engram_cpu_offload: bool = True,
        engram_dp_shared_memory: bool = False,
        engram_across_dp: bool = False,
    ):
        # vLLM --enable-dbo (dual-batch overlap): two micro-batches, one's all-to-all hidden behind the other's
        # compute (DeepSeek's prefill and decode do the same): a step costs max(GPU work, communication).
        self.dbo = dbo
        self.gpu, self.model, self.tp, self.dp = gpu, model, tp, dp
        # Speculative decoding: K draft tokens per decode step, A tokens emitted per step on average.
        self.spec_k = spec_tokens
        self.accept = acceptance_length if spec_tokens else 1.0
        # A draft pass runs the draft head: the MTP module's layers (one MoE layer for DeepSeek), else one layer.
        self.draft_frac = (max(model.mtp_layers, 1) / model.layers) if spec_tokens else 0.0
        self.engine = engine = engine or load_engine("vllm")
        self.ep = bool(expert_parallel and model.is_moe)
        self.gpus = tp * dp
        # MoE DP without expert parallel: experts TP-sharded over the DP x TP group, ranks in lockstep (vLLM's
        # FusedMoEParallelConfig.make flatten_tp_across_dp; the layouts and their sources: topology.model.dp_layout)
        self.moe_tp = dp_layout(dp, model.is_moe, expert_parallel) == "moe_tp"
        # the experts' work is the global batch's, shared by every GPU (EP or MoE TP over DP); idle ranks still step
        self.shared = self.ep or self.moe_tp
        m = model
        kv_shard = 1 if m.kv_heads == 0 else min(tp, m.kv_heads)
        self.kv_bytes_per_token = m.kv_elems_per_token_layer * m.layers * kv_dtype_bytes
        self.kv_bytes_per_token_gpu = self.kv_bytes_per_token / kv_shard
        read_elems = m.kv_read_elems_per_token_layer or m.kv_elems_per_token_layer
        self.kv_read_bytes_per_token_gpu = read_elems * m.layers * kv_dtype_bytes / kv_shard
        self.dense_bytes_gpu = m.dense_params_b * 1e9 * m.weight_bytes / tp
        self.expert_bytes = m.expert_params_m * 1e6 * m.expert_bytes_per_param * m.moe_layers  # one expert, all layers
        # Weights resident per GPU: dense + embedding (sharded by tp) + this GPU's experts (+ its Engram share below).
        expert_share = self.gpus if self.shared else tp
        self.weight_bytes_gpu = (
            m.dense_params_b + m.embedding_params_b
        ) * 1e9 * m.weight_bytes / tp + m.routed_params * m.expert_bytes_per_param / expert_share
        # Engram tables (vLLM --engram-config; sources in deepseek-v4.1-flash.yaml): sharded by tp (x dp with
        # embedding_across_dp), in HBM, or with cpu_offload (vLLM's default) in pinned host memory: one copy per DP
        # rank, or one per node (this engine's GPUs) shared by its DP ranks with dp_shared_memory.
        self.engram_offload = bool(engram_cpu_offload and m.engram_params_b)
        self.engram_dp_shared = bool(engram_dp_shared_memory and self.engram_offload)
        engram_share = tp * (dp if engram_across_dp or self.engram_dp_shared else 1)
        self.engram_bytes_gpu = m.engram_table_bytes / engram_share
        self.engram_host_bytes_gpu = self.engram_bytes_gpu if self.engram_offload else 0.0
        if not self.engram_offload:
            self.weight_bytes_gpu += self.engram_bytes_gpu
        # What one token's lookups read per GPU: per Engram layer ceil(hash heads / shards) rows of head_dim FP8
        # values + their scale bytes (a lookup reads this GPU's hash heads only).
        if m.engram_params_b and m.engram_hash_heads:
            rows = -(-m.engram_hash_heads // (tp * (dp if engram_across_dp else 1)))
            row_bytes = m.engram_head_dim * (1 + 1 / m.engram_scale_block)
            self.engram_bytes_per_token_gpu = len(m.engram_layer_ids) * rows * row_bytes
        else:
            self.engram_bytes_per_token_gpu = 0.0
        self.linear_flops_per_token = 2 * m.dense_params_b * 1e9
        self.moe_flops_per_token = 2 * m.experts_per_token * m.expert_params_m * 1e6 * m.moe_layers
        self.peak_linear = (
            gpu.peak_flops(m.compute_dtype) * gpu.efficiency(m.compute_dtype) * m.compute_efficiency_scale
        )
        # Prefill's large GEMMs under expert parallel (DeepGEMM + DeepEP high-throughput): the model's
        # prefill_compute_efficiency_scale where it has one (0 = the same as decode's).
        pre_scale = m.prefill_compute_efficiency_scale if self.ep and m.prefill_compute_efficiency_scale else 0.0
        self.peak_linear_prefill = (
            gpu.peak_flops(m.compute_dtype) * gpu.efficiency(m.compute_dtype) * pre_scale
            if pre_scale
            else self.peak_linear
        )
        self.peak_attn = gpu.peak_flops("bf16") * gpu.compute_efficiency * m.attention_efficiency_scale
        self.bandwidth = gpu.hbm_gbps * 1e9 * gpu.memory_efficiency
        self.link = gpu.interconnect_gbps * 1e9
        self.latency = gpu.collective_latency_us * 1e-6
        layers_base_s = m.layer_overhead_us * 1e-6 * m.layers * engine.layer_overhead_scale
        # graph replay: the GPU's own gaps, or those measured for this model on this engine and GPU
        layers_s = layers_base_s * m.layer_overhead_scale(engine.name, gpu.name, gpu.layer_overhead_scale)
        # without graphs every kernel is launched from the CPU: a host cost the GPU generation does not shrink
        launch_s = layers_base_s * engine.eager_layer_overhead_scale * gpu.launch_overhead_scale
        step_s = gpu.step_overhead_ms * 1e-3 * engine.step_overhead_scale
        self.overhead = step_s + layers_s
        self.overhead_eager = step_s + max(layers_s, launch_s)  # mixed or large batches
        self.graph_max_batch = engine.cuda_graph_max_batch
        self.seq_cpu = engine.seq_overhead_us * 1e-6
        self.async_scheduling = async_scheduling

    # -- capacity ----------------------------------------------------------
    def check_host_memory(self) -> None:
        """Refuse CPU-offloaded Engram tables that the GPU profile's host memory per GPU cannot hold (a profile
        without ``host_memory_gib`` is not checked: the host is assumed to hold them)."""
        have = self.gpu.host_memory_gib
        need = self.engram_host_bytes_gpu / GIB
        if need and have and need > have:
            raise ValueError(
                f"--engram-config cpu_offload: {need:.1f} GiB of {self.model.name}'s Engram tables per GPU exceed "
                f"{self.gpu.name}'s {have:g} GiB of host memory per GPU; raise --tensor-parallel-size, add "
                '"dp_shared_memory": true (DP > 1), or keep them in HBM with \'{"cpu_offload": false}\''
            )

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int:
        """KV tokens one DP rank can hold; raises when the weights do not fit. A GPU profile with a
        fixed ``kv_cache_gib`` (vLLM's CPU backend) holds that much KV per device whatever the utilization."""
        self.check_host_memory()
        budget = (
            self.gpu.memory_gib * GIB * gpu_memory_utilization
            - self.weight_bytes_gpu
            - self.model.activation_headroom_gib * GIB
        )
        if budget <= 0:
            raise ValueError(
                f"model {self.model.name} does not fit: {self.weight_bytes_gpu / GIB:.1f} GiB of weights "
                f"+ {self.model.activation_headroom_gib} GiB headroom per GPU exceed "
                f"{gpu_memory_utilization} x {self.gpu.memory_gib} GiB of {self.gpu.name}; raise "
                "--tensor-parallel-size, enable expert parallelism, or pick a larger --gpu"
            )
        if self.gpu.kv_cache_gib > 0:
            budget = self.gpu.kv_cache_gib * GIB
        return int(budget / self.kv_bytes_per_token_gpu)

    # -- step time ------------------------------------------------------------
    def expected_experts(self, tokens: int) -> float:
        """Expected distinct experts (per MoE layer) touched by ``tokens`` tokens."""
        m = self.model
        if not m.is_moe or tokens <= 0:
            return 0.0
        return m.num_experts * (1.0 - (1.0 - m.experts_per_token / m.num_experts) ** tokens)

    def _coefficients(self) -> None:
        """Per-unit times, so a step costs a few multiply-adds per rank."""
        m, tp = self.model, self.tp
        self._c_lin = self.linear_flops_per_token / tp / self.peak_linear  # s per token
        self._c_moe = self.moe_flops_per_token / (self.gpus if self.shared else tp) / self.peak_linear
        self._c_dec = m.attn_flops_decode_pair * m.layers / tp / self.peak_attn  # s per pair
        self._c_pre = m.attn_flops_prefill_pair * m.layers / tp / self.peak_attn
        self._c_kv = self.kv_read_bytes_per_token_gpu / self.bandwidth  # s per context token
        self._t_dense = self.dense_bytes_gpu / self.bandwidth
        self._t_expert = self.expert_bytes / (self.gpus if self.shared else tp) / self.bandwidth
        self._comm0 = self._comm1 = 0.0  # s, s per token
        self._comm_global = 0.0  # s per token of the whole step (every rank's): the MoE TP group's gather + reduce
        if tp > 1:
            self._comm0 += 2 * m.layers * self.latency
            self._comm1 += 2 * m.layers * m.hidden * 2 * 2 * (tp - 1) / tp / self.link
        if self.ep and self.gpus > 1:
            # dispatch (FP8) + combine (BF16) of hidden x k per token and MoE layer, to the other G - 1 GPUs: those in
            # this GPU's NVLink domain over NVLink, the rest over its RDMA NIC (the two paths run side by side).
            g, dom = self.gpus, max(1, min(self.gpu.nvlink_domain_gpus, self.gpus))
            per_token = m.moe_layers * m.experts_per_token * m.hidden * 3
            inside = per_token * (dom - 1) / g / self.link
            outside = per_token * (g - dom) / g / (self.gpu.rdma_gbps * 1e9) if g > dom else 0.0
            lat = self.gpu.rdma_latency_us * 1e-6 if g > dom else self.latency
            self._comm0 += 2 * m.moe_layers * lat
            self._comm1 += inside if inside > outside else outside
        if self.moe_tp:
            # all-gather of the DP ranks' hidden states before the experts and reduce-scatter of their partial sums
            # after (BF16), over the G = tp x dp GPUs: inside one NVLink domain, else bounded by the RDMA NIC
            g, dom = self.gpus, max(1, min(self.gpu.nvlink_domain_gpus, self.gpus))
            bw = self.link if g <= dom else self.gpu.rdma_gbps * 1e9
            lat = self.latency if g <= dom else self.gpu.rdma_latency_us * 1e-6
            self._comm0 += 2 * m.moe_layers * lat
            self._comm_global = m.moe_layers * 2 * m.hidden * 2 * (g - 1) / g / bw
        # prefill tokens' linear layers at the prefill efficiency (the same as _c_lin / _c_moe without one)
        # (and only prefill_layer_fraction of the layers where prefill skips some: DeepSeek-V4.1's decoder half)
        ratio = self.peak_linear / self.peak_linear_prefill * m.prefill_layer_fraction
        self._c_lin_pre = self._c_lin * ratio
        self._c_moe_pre = self._c_moe * ratio
        self._c_pre *= m.prefill_layer_fraction
        # Engram lookups from pinned host memory over the host link (NVLink-C2C, PCIe): s per token
        self._c_engram = (
            self.engram_bytes_per_token_gpu / (self.gpu.host_link_gbps * 1e9) if self.engram_offload else 0.0
        )
        self._engram_at = [i / m.layers for i in m.engram_layer_ids]  # where in the step each layer's rows are due

    def engram_stall(self, work: float, tokens: int) -> float:
        """Seconds a step waits for its host-memory Engram lookups. vLLM runs them on a side stream, one Engram
        layer after another, from the start of the forward pass; the main stream waits at Engram layer i (after
        the fraction i / layers of the step's work ``work``) until that layer's rows have arrived: the stall is
        the largest of (lookups through layer i - work up to layer i), or 0 when the lookups stay ahead."""
        t = tokens * self._c_engram / len(self._engram_at)  # one layer's lookups
        return max(0.0, max((j + 1) * t - work * at for j, at in enumerate(self._engram_at)))

    def cost(self, ranks: list[BatchSummary]) -> StepCost:
        if not hasattr(self, "_c_lin"):
            self._coefficients()
        # q: positions each decode sequence runs per step (1, or K + 1 to verify K draft tokens)
        q = self.spec_k + 1
        # With speculative decoding a simulated step that decodes is 1/A of vLLM's step (the scheduler gives its
        # prefills 1/A of vLLM's budget, Scheduler.schedule): it is costed as vLLM's step, whose prefill is A x
        # this one's (``f``), and lasts 1/A of it (below). The chunk's KV reads (prefill_ctx) happen once a
        # vLLM step, so they are not scaled.
        f = 1.0
        if self.spec_k:
            for r in ranks:
                if r.decode_seqs:
                    f = self.accept
                    break
        total_tokens = prefill = widest = seqs = decodes = 0
        for r in ranks:
            pt = int(r.prefill_tokens * f)
            total_tokens += r.decode_seqs * q + pt
            prefill += pt
            decodes += r.decode_seqs
            widest = max(widest, r.decode_seqs)
            seqs = max(seqs, r.decode_seqs + r.prefill_seqs)
        if total_tokens == 0:
            return StepCost(self.overhead, 0.0, 0.0, 0.0, self.overhead)
        overhead = self.overhead if not prefill and widest <= self.graph_max_batch else self.overhead_eager
        cpu = seqs * self.seq_cpu
        ep = self.shared  # the experts' work shared over every GPU, the ranks in lockstep (EP, or MoE TP over DP)
        gcomm = total_tokens * self._comm_global  # 0 but for MoE TP over DP
        if ep:
            dec_total = total_tokens - prefill
            moe_shared = dec_total * self._c_moe + prefill * self._c_moe_pre
            expert_shared = self.expected_experts(total_tokens) * self._t_expert
        best = -1.0
        for r in ranks:
            nd = r.decode_seqs * q
            pt = int(r.prefill_tokens * f)
            n = nd + pt
            if n == 0 and not ep:
                continue
            compute = (
                nd * self._c_lin
                + pt * self._c_lin_pre
                + r.decode_ctx * q * self._c_dec
                + r.prefill_pairs * f * self._c_pre
            )
            memory = self._t_dense + (r.decode_ctx + r.prefill_ctx) * self._c_kv
            if ep:
                compute += moe_shared
                memory += expert_shared
            else:
                compute += nd * self._c_moe + pt * self._c_moe_pre
                memory += self.expected_experts(n) * self._t_expert
            comm = self._comm0 + n * self._comm1 + gcomm if n or ep else 0.0
            work = compute if compute > memory else memory
            total = (work if work > comm else comm) if self.dbo else work + comm
            if total > best:
                best, worst = total, (compute, memory, comm)
        compute, memory, comm = worst
        # Engram lookups from host memory (cpu_offload), overlapped with the step's work (engram_stall); decode_run: mirror
        best += (
            self.engram_stall(best, max(r.decode_seqs * q + int(r.prefill_tokens * f) for r in ranks))
            if self._c_engram
            else 0.0
        )
        if self.spec_k and decodes:
            # K draft passes through the draft head (draft_frac of the model each, its launches too), then the
            # verify pass above. A step emits A tokens per sequence on average: the simulator emits one token per
            # sequence per step, so a step that decodes lasts 1/A of vLLM's draft + verify step (the mean
            # inter-token gap; real streams come in bursts of accepted tokens), its prefill scaled above.
            extra = self.spec_k * self.draft_frac
            best *= 1.0 + extra
            overhead *= 1.0 + extra
            best /= self.accept  # one simulated step = 1/A of a real one, its CPU work too
            overhead /= self.accept
            cpu /= self.accept
        if self.async_scheduling:  # CPU work of the next step overlaps this step's GPU work
            gpu = best + overhead
            return StepCost(gpu if gpu > cpu else cpu, compute, memory, comm, overhead + max(cpu - gpu, 0.0))
        return StepCost(best + overhead + cpu, compute, memory, comm, overhead + cpu)

    def decode_run(self, seqs: Sequence[int], ctx0: Sequence[int], steps: int) -> np.ndarray:
        """Durations of ``steps`` consecutive pure-decode steps of the given ranks in lockstep: rank i runs
        ``seqs[i]`` sequences whose contexts sum to ``ctx0[i]`` in the first step and grow by ``seqs[i]`` a step.

        The arithmetic of :meth:`cost` for such batches (no prefill, nothing loaded), operation for operation on
        arrays over the steps, so each duration is bit-identical to ``cost`` called step by step (a test checks).
        """
        if not hasattr(self, "_c_lin"):
            self._coefficients()
        q = self.spec_k + 1
        total_tokens = sum(n * q for n in seqs)
        if total_tokens == 0:
            return np.full(steps, self.overhead)
        decodes, widest = sum(seqs), max(seqs)
        overhead = self.overhead if widest <= self.graph_max_batch else self.overhead_eager
        cpu = widest * self.seq_cpu
        ep = self.shared
        gcomm = total_tokens * self._comm_global
        if ep:
            moe_shared = total_tokens * self._c_moe + 0.0
            expert_shared = self.expected_experts(total_tokens) * self._t_expert
        # A rank another one dominates (no more sequences, no less context... at most as much of both) never sets
        # a step's time: every term of a rank's time grows with both and rounding is monotone. Time the others.
        rows = _undominated(seqs, ctx0, skip_empty=not ep)
        if len(rows) * steps <= 256:  # few: in Python, with cost()'s operations in cost()'s order
            best = self._decode_run_small(
                rows, steps, q, moe_shared if ep else 0.0, expert_shared if ep else 0.0, gcomm
            )
        else:
            n = np.array([r[0] for r in rows], dtype=np.int64)
            c0 = np.array([r[1] for r in rows], dtype=np.int64)
            nd = n * q
            ctx = c0[:, None] + n[:, None] * np.arange(steps, dtype=np.int64)  # (rank, step)
            compute = (nd * self._c_lin)[:, None] + (ctx * q) * self._c_dec  # cost(): + 0 prefill terms, exact
            memory = self._t_dense + ctx * self._c_kv
            if ep:
                compute = compute + moe_shared
                memory = memory + expert_shared
            else:
                compute = compute + (nd * self._c_moe)[:, None]
                experts = np.array([self.expected_experts(int(x)) for x in nd])
                memory = memory + (experts * self._t_expert)[:, None]
            comm = (self._comm0 + nd * self._comm1 + gcomm)[:, None]
            work = np.maximum(compute, memory)
            best = (np.maximum(work, comm) if self.dbo else work + comm).max(axis=0)
            if self._c_engram:  # cost()'s Engram stall (engram_stall), elementwise
                t = widest * q * self._c_engram / len(self._engram_at)
                stall = np.max([(j + 1) * t - best * at for j, at in enumerate(self._engram_at)], axis=0)
                best = best + np.maximum(stall, 0.0)
        if self.spec_k and decodes:
            extra = self.spec_k * self.draft_frac
            best = best * (1.0 + extra)
            overhead *= 1.0 + extra
            best = best / self.accept  # decode-bound: one simulated step = 1/A of a real one
            overhead /= self.accept
            cpu /= self.accept
        if self.async_scheduling:
            gpu = best + overhead
            return np.maximum(gpu, cpu)
        return best + overhead + cpu

    def _decode_run_small(
        self, rows: list[tuple[int, int]], steps: int, q: int, moe_shared: float, expert_shared: float, gcomm: float
    ) -> np.ndarray:
        """``decode_run``'s per-step maximum over ``rows`` (sequences, first context) and its Engram stall."""
        ep, dbo = self.shared, self.dbo
        c_dec, c_kv, t_dense = self._c_dec, self._c_kv, self._t_dense
        consts = []
        for n, c0 in rows:
            nd = n * q
            if ep:
                add_c, add_m = moe_shared, expert_shared
            else:
                add_c, add_m = nd * self._c_moe, self.expected_experts(nd) * self._t_expert
            consts.append((nd * self._c_lin, c0, n, add_c, add_m, self._comm0 + nd * self._comm1 + gcomm))
        widest = max(n for n, _ in rows) * q
        best = []
        for k in range(steps):
            b = -1.0
            for lin, c0, n, add_c, add_m, comm in consts:
                ctx = c0 + n * k
                compute = lin + ctx * q * c_dec + add_c
                memory = t_dense + ctx * c_kv + add_m
                work = compute if compute > memory else memory
                total = (work if work > comm else comm) if dbo else work + comm
                if total > b:
                    b = total
            if self._c_engram:
                b += self.engram_stall(b, widest)
            best.append(b)
        return np.array(best)

    def step_time(self, ranks: list[BatchSummary]) -> float:
        return self.cost(ranks).duration_s


def _undominated(seqs: Sequence[int], ctx0: Sequence[int], skip_empty: bool) -> list[tuple[int, int]]:
    """The (sequences, context) pairs no other pair matches or exceeds in both (one of equal pairs)."""
    out: list[tuple[int, int]] = []
    top = -1
    for n, c in sorted(zip(seqs, ctx0), reverse=True):  # most sequences first, then most context
        if c > top and (n or not skip_empty):
            out.append((n, c))
            top = c
    return out


def prefill_pairs(chunk: int, start_ctx: int) -> float:
    """Attention pairs of a prefill chunk of ``chunk`` tokens after ``start_ctx`` cached tokens."""
    return chunk * (start_ctx + (chunk + 1) / 2)


def perf_model_for(settings) -> PerfModel:  # EngineSettings; untyped to avoid an import cycle
    return PerfModel(
        settings.gpu_profile(),
        settings.model_spec(),
        settings.tensor_parallel_size,
        settings.data_parallel_size,
        settings.enable_expert_parallel,
        settings.kv_dtype_bytes,
        settings.engine_spec(),
        settings.async_scheduling,
        getattr(settings, "speculative_tokens", 0),
        getattr(settings, "acceptance_length", 1.0) or 1.0,
        getattr(settings, "enable_dbo", False),
        getattr(settings, "engram_cpu_offload", True),
        getattr(settings, "engram_dp_shared_memory", False),
        getattr(settings, "engram_across_dp", False),
    )


__all__ = ["BatchSummary", "PerfModel", "StepCost", "perf_model_for", "prefill_pairs"]
