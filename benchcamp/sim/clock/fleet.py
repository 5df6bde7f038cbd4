"""A topology in virtual time: every role's engines, the router in front, and the KV hand-off between them.

``Fleet`` puts the instances of a ``Topology`` behind the interface the virtual-clock simulation
(``benchcamp.sim.clock.simulate``) drives, with one clock per instance: each instance is a ``core.Router`` that
steps whenever it is idle and has work, so a prefill pool and a decode pool run side by side. A MoE instance's DP
ranks step in lockstep (vLLM's DP coordinator); a dense instance's are independent engines, one clock per rank
(``Router.many_clocks``, ``Router.start_steps``), as vLLM runs them.

Path of a request (``add_request``):
- unified: the router picks an instance (``topology.router.policy``) and the request runs there as before.
- prefill + decode (``router.pd_disaggregation``, vLLM's toy proxy / vllm-router order): the router sends the
  request to a prefill instance with ``max_tokens = 1``; when its prefill is done (the end of the step that samples
  that token, discarded as the proxy does) the KV of the prompt moves to a decode instance over the link joining
  them: NVLink when both roles sit inside one NVLink domain (``nvlink_domain_gpus`` of the GPU profile, e.g. 72 on
  an NVL72 rack), else the GPUs' RDMA NICs (``kv_link`` overrides), at the GPU's bandwidth one way plus a latency,
  one transfer at a time per receiving DP rank (a FIFO link). What the receiving rank already caches is not sent
  (NIXL's ``get_num_new_matched_tokens``: len(prompt) - num_computed_tokens). The decode instance then admits the
  request through the engine's one KV-connector path (``EngineCore.add_request(external_tokens=prompt,
  transfer_paid=True)``): the transferred tokens count as computed, their full blocks enter its prefix cache (so
  the session's next turn on that rank is sent only its new part), it recomputes the last prompt token (vLLM
  schedules at least one token) and streams every output token: TTFT = prefill queue + prefill + transfer + the
  decode instance's first step.
- ``usage.cached_tokens`` of a disaggregated request is the prefill instance's prefix-cache hit (what was not
  computed), not the decode's (which holds the whole prompt once transferred).

Router policies over a role's instances: round_robin, random (seeded), least_loaded (vLLM's 4 x waiting +
running), session_affinity (a session's first request goes to the least loaded instance, the rest follow it;
the session is ``routing_key(request id)``, pluggable), cache_aware (the longest cached prefix among the instances
within a small load slack of the least loaded, as ``core.Router.route`` does over DP ranks).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from benchcamp.sim.engine.core import EngineCore, Router, StepResult
from benchcamp.topology.model import Role, RoleKind, Topology

if TYPE_CHECKING:
    from benchcamp.config import Config
    from benchcamp.sim.engine.settings import EngineSettings

Schedule = Callable[..., None]  # (time, fn, *args): run fn(*args) at time on the simulation's clock


def session_key(request_id: str) -> str:
    """The session of a request id ``<session>:<turn>`` (the simulator's ids); the routing key of affinity."""
    return request_id.rpartition(":")[0] or request_id


def role_settings(cfg: Config, kind: RoleKind, topo: Topology | None = None) -> EngineSettings:
    """One engine (instance) of role ``kind``: the config's shared engine settings with the role's layout."""
    from benchcamp.config import topology_of
    from benchcamp.sim.engine.settings import EngineSettings, engram_of

    topo = topo or topology_of(cfg)
    role = topo.role(kind)
    base = EngineSettings.from_config(cfg)
    spec = role.speculative
    k = spec.num_speculative_tokens if spec is not None and kind != "prefill" else 0
    return replace(
        base,
        tensor_parallel_size=role.tensor_parallel_size,
        data_parallel_size=role.data_parallel_size,
        enable_expert_parallel=role.enable_expert_parallel,
        max_num_seqs=role.max_num_seqs,
        max_num_batched_tokens=role.max_num_batched_tokens,
        kv_offloading_size=role.kv_offloading_size_gib,
        gpu=role.gpu or cfg.hardware.gpu,
        num_gpus=role.gpus_per_instance,
        speculative_tokens=k,
        acceptance_length=acceptance_of(role, base.model_spec()) if k else 0.0,
        enable_dbo=role.enable_dbo,
        **engram_of(role.extra_args, f"topology.roles.{kind}.extra_args"),  # after engine.extra_args, as in argv
    )


def acceptance_of(role: Role, model: Any) -> float:
    """Tokens per decode step: the forced (synthetic) or given acceptance length, else the model's published
    draft acceptance rate p over K drafts: 1 + p + ... + p^K (i.i.d. acceptance, Leviathan et al. 2023)."""
    from benchcamp.topology.validate import acceptance_length

    spec = role.speculative
    assert spec is not None
    if spec.acceptance_length is not None:
        return float(spec.acceptance_length)
    return acceptance_length(spec.num_speculative_tokens, model.draft_acceptance_rate)


@dataclass
class Instance:
    role: RoleKind
    index: int
    engine: Router
    busy_until: float = 0.0
    steps: int = 0
    busy_s: float = 0.0

    @property
    def load(self) -> int:
        return sum(4 * len(r.sched.waiting) + len(r.sched.running) for r in self.engine.replicas)

    def has_work(self) -> bool:
        return any(r.sched.requests for r in self.engine.replicas)

    def prefix_blocks(self, hashes: list[int]) -> int:
        return max(r.kv.match_prefix(hashes) for r in self.engine.replicas)


@dataclass
class _Pending:
    hashes: list[int]
    prompt_len: int
    max_tokens: int
    sent: float
    cached: int = 0
    cpu_cached: int | None = None
    prefilled_s: float = 0.0
    transferred_s: float = 0.0
    transfer_tokens: int = 0
    aborted: bool = False


@dataclass
class RoleStats:
    transfers: int = 0
    transfer_tokens: int = 0
    transfer_s: float = 0.0  # summed over transfers, queueing on the link included
    prefill_s: float = 0.0  # send -> prefill done, summed
    ttft_parts: list[tuple[float, float]] = field(default_factory=list)  # (prefill, transfer) per request


class Fleet:
    """Every instance of a topology, stepped on one virtual clock (see the module docstring)."""

    AFFINITY_SLACK: ClassVar[int] = Router.AFFINITY_SLACK
    many_clocks: ClassVar[bool] = True  # the simulation's loop: start_steps / next_free

    def __init__(
        self,
        topo: Topology,
        settings: dict[str, EngineSettings],
        schedule: Schedule,
        seed: int = 0,
        routing_key: Callable[[str], str] = session_key,
    ):
        self.topo = topo
        self.settings = settings
        self._schedule = schedule
        self.routing_key = routing_key
        self.policy = topo.router.policy if topo.router is not None else "round_robin"
        self.instances: dict[str, list[Instance]] = {}
        for kind, role in topo.roles():
            self.instances[kind] = [Instance(kind, i, Router(settings[kind])) for i in range(role.instances)]
        self.disaggregated = topo.disaggregated
        self.front_role: RoleKind = "decode" if self.disaggregated else "unified"
        self.all = [inst for insts in self.instances.values() for inst in insts]
        self._rr: dict[str, int] = {}
        self._rng = np.random.default_rng(seed)
        self._sticky: dict[tuple[str, str], int] = {}
        self._pending: dict[str, _Pending] = {}
        self._link_free: dict[tuple[int, int], float] = {}  # (decode instance, rank) -> when its link is free
        self._own: list[float] = []  # times of the hand-off events scheduled (``_horizon``)
        self.stats = RoleStats()
        self._keep = False
        lens = [inst.engine.max_model_len for inst in self.all]
        self.max_model_len = min(lens)
        if self.disaggregated:
            self._link_bw, self._link_lat, self.link = self._kv_link()
            self._kv_bytes = self.instances["decode"][0].engine.perf.kv_bytes_per_token_gpu

    # -- the link between prefill and decode -------------------------------------------------------
    def _kv_link(self) -> tuple[float, float, str]:
        gpu = self.instances["decode"][0].engine.perf.gpu
        kind = self.topo.kv_link
        if kind == "auto":
            kind = "nvlink" if self.topo.total_gpus <= gpu.nvlink_domain_gpus else "rdma"
        if kind == "nvlink":
            return gpu.interconnect_gbps * 1e9, gpu.collective_latency_us * 1e-6, kind
        if kind == "pcie":
            return gpu.host_link_gbps * 1e9, gpu.rdma_latency_us * 1e-6, kind
        return gpu.rdma_gbps * 1e9, gpu.rdma_latency_us * 1e-6, kind

    def api_servers(self) -> int:
        """API-server processes streaming to clients: the client-facing role's, over its instances."""
        role = self.topo.role(self.front_role)
        return role.instances * (role.api_server_count or role.data_parallel_size)

    # -- the interface of core.Router ---------------------------------------------------------------
    @property
    def keep_timelines(self) -> bool:
        return self._keep

    @keep_timelines.setter
    def keep_timelines(self, value: bool) -> None:
        self._keep = value
        for inst in self.all:
            inst.engine.keep_timelines = value

    @property
    def where(self) -> dict[str, EngineCore]:
        front = self.instances[self.front_role]
        if len(front) == 1:
            return front[0].engine.where
        out: dict[str, EngineCore] = {}
        for inst in front:
            out.update(inst.engine.where)
        return out

    def check(self, prompt_len: int, max_tokens: int, min_tokens: int = 0) -> int:
        from benchcamp.sim.engine.openai_format import validate_lengths

        return validate_lengths(prompt_len, max_tokens, min_tokens, self.max_model_len)

    def pick(self, kind: str, rid: str, hashes: list[int]) -> Instance:
        insts = self.instances[kind]
        if len(insts) == 1:
            return insts[0]
        policy = self.policy
        if policy == "round_robin":
            i = self._rr.get(kind, 0)
            self._rr[kind] = i + 1
            return insts[i % len(insts)]
        if policy == "random":
            return insts[int(self._rng.integers(len(insts)))]
        if policy == "session_affinity":
            key = (kind, self.routing_key(rid))
            j = self._sticky.get(key)
            if j is None:
                j = self._sticky[key] = min(insts, key=lambda x: (x.load, x.index)).index
            return insts[j]
        loads = [inst.load for inst in insts]
        if policy == "least_loaded":
            return min(zip(insts, loads), key=lambda il: (il[1], il[0].index))[0]
        low = min(loads)  # cache_aware
        near = [(inst, ld) for inst, ld in zip(insts, loads) if ld <= low + self.AFFINITY_SLACK]
        return max(near, key=lambda il: (il[0].prefix_blocks(hashes), -il[1], -il[0].index))[0]

    def add_request(self, req_id: str, block_hashes: list[int], prompt_len: int, max_tokens: int, now: float) -> None:
        if not self.disaggregated:
            self.pick("unified", req_id, block_hashes).engine.add_request(
                req_id, block_hashes, prompt_len, max_tokens, now
            )
            return
        if req_id in self._pending:
            raise ValueError(f"request id {req_id!r} is already in the engine")
        self._pending[req_id] = _Pending(list(block_hashes), prompt_len, max_tokens, now)
        # the proxy's prefill request: max_tokens 1
        self.pick("prefill", req_id, block_hashes).engine.add_request(req_id, block_hashes, prompt_len, 1, now)

    def has_work(self) -> bool:
        return any(inst.has_work() for inst in self.all)

    def start_steps(
        self, now: float, hot: float = math.inf, deadline: float = math.inf
    ) -> list[tuple[StepResult, int]]:
        """Start a step on every idle instance with work; -> the client-facing ones (result, streamed tokens).

        ``hot``: the simulation's next event that may reach an engine; ``deadline``: no step starts at or after
        it. An instance that only decodes runs every quiet step before its horizon at once (``_horizon``)."""
        out: list[tuple[StepResult, int]] = []
        later: list[Instance] = []
        ranked: list[Instance] = []  # independent DP ranks (a dense model's): each rank on its own clock
        for inst in self.all:
            if inst.engine.many_clocks:
                if inst.has_work() and inst.engine.idle_rank(now):
                    ranked.append(inst)
                continue
            if inst.busy_until > now or not inst.has_work():
                continue
            if inst.role == "prefill" or not (self.disaggregated or inst.engine.quiet()):
                self._started(inst, inst.engine.step(now, emit=False), out)
            else:
                later.append(inst)  # after the others: their steps bound its horizon
        for inst in later:
            until = self._horizon(inst, now, hot, deadline, alone=len(later) == 1 and not ranked)
            self._started(inst, inst.engine.step(now, emit=False, until=until), out)
        for inst in ranked:
            # its ranks' quiet runs are bounded as an instance's (None: another starts now, step once)
            bound = self._horizon(inst, now, hot, deadline, alone=len(ranked) == 1 and not later)
            if inst.role == "prefill":
                bound = None
            dp = len(inst.engine.replicas)
            for res, _tokens in inst.engine.start_steps(now, bound, deadline):
                self._started(inst, res, out, share=1.0 / dp)
            inst.busy_until = inst.engine.next_free(now)
        return out

    def _started(self, inst: Instance, res: StepResult, out: list[tuple[StepResult, int]], share: float = 1.0) -> None:
        """``share``: the part of the instance a step occupies (1 / DP for one independent rank's)."""
        inst.busy_until = res.end_s
        inst.steps += res.steps
        if res.durations is None:
            inst.busy_s += res.duration_s * share if share != 1.0 else res.duration_s
        else:
            for d in res.durations.tolist():  # summed as the steps one by one would
                inst.busy_s += d * share if share != 1.0 else d
        if inst.role == "prefill":
            if res.finished:
                self._schedule(res.end_s, self._prefilled, res.finished, res.end_s)
                heapq.heappush(self._own, res.end_s)
            return
        if self.disaggregated:
            res.finished = [self._as_sent(f) for f in res.finished]
        out.append((res, res.tokens))

    def _horizon(self, inst: Instance, now: float, hot: float, deadline: float, alone: bool) -> float | None:
        """Before when nothing can reach ``inst`` (None: no bound, step once).

        A decode instance of prefill/decode gets requests only from the prefill pool: by a hand-off already
        scheduled (``_prefilled``, ``_arrive``), or at the end of a prefill step, which starts no earlier than
        a busy prefill engine's current step ends. While every prefill engine is busy that is all; an idle one
        may start at the next event, or when another instance's step ends (its finished turns bring the next
        ones). Any other instance may get a request at the next event, or when another instance's step ends.
        An instance starting at ``now`` beside ``inst`` has no known end yet: then no bound (``alone``)."""
        h = deadline
        if self.disaggregated:
            own = self._own
            while own and own[0] <= now:
                heapq.heappop(own)
            if own:
                h = min(h, own[0])
            prefill = self.instances["prefill"]
            idle = False
            for p in prefill:
                if p.engine.many_clocks:  # independent ranks: the next end, and idle if any rank is
                    end = p.engine.next_free(now)
                    if end < h:
                        h = end
                    idle = idle or p.engine.idle_rank(now)
                elif p.busy_until > now:
                    h = min(h, p.busy_until)
                else:
                    idle = True
            if not idle:
                return h
        if not alone:
            return None
        h = min(h, hot)
        for other in self.all:
            if other is inst:
                continue
            end = other.engine.next_free(now) if other.engine.many_clocks else other.busy_until
            if end > now:
                h = min(h, end)
        return h

    def next_free(self, now: float) -> float:
        """When the next busy instance ends its step (inf when none is busy)."""
        ends = [
            end
            for inst in self.all
            if (end := (inst.engine.next_free(now) if inst.engine.many_clocks else inst.busy_until)) > now
        ]
        return min(ends) if ends else float("inf")

    def generation_tokens(self) -> int:
        return sum(inst.engine.generation_tokens() for inst in self.instances[self.front_role])

    def abort(self, req_id: str) -> bool:
        p = self._pending.get(req_id)
        if p is not None:
            p.aborted = True
        done = False
        for inst in self.all:
            done = inst.engine.abort(req_id) or done
        self._pending.pop(req_id, None)
        return done

    # -- prefill -> transfer -> decode ---------------------------------------------------------------
    def _prefilled(self, finished: list[tuple[str, int, int, int, int | None]], end: float) -> None:
        for rid, _prompt, cached, _completion, cpu_cached in finished:
            p = self._pending.get(rid)
            if p is None or p.aborted:
                continue
            p.cached, p.cpu_cached, p.prefilled_s = cached, cpu_cached, end
            dec = self.pick("decode", rid, p.hashes)
            rep = dec.engine.route(p.hashes)
            bs = rep.kv.block_size
            # what the rank caches, at most the prompt's first len - 1 tokens as its admission matches them
            # (vLLM's get_computed_blocks leaves one token to compute); NIXL sends the rest
            have = rep.kv.match_prefix(p.hashes, (p.prompt_len - 1) // bs) * bs
            tokens = max(p.prompt_len - have, 0)
            key = (dec.index, rep.rank)
            start = max(end, self._link_free.get(key, 0.0))
            done = start + self._link_lat + tokens * self._kv_bytes / self._link_bw
            self._link_free[key] = done
            p.transferred_s, p.transfer_tokens = done, tokens
            self._schedule(done, self._arrive, rid, dec, rep)
            heapq.heappush(self._own, done)

    def _arrive(self, rid: str, dec: Instance, rep: EngineCore) -> None:
        p = self._pending.get(rid)
        if p is None or p.aborted:
            return
        # the connector holds the whole prompt (NIXL pulls every prompt block it does not cache); the link was paid
        # in _prefilled, so the admitting step is not charged again
        rep.add_request(rid, p.hashes, p.prompt_len, p.max_tokens, p.transferred_s, p.prompt_len, transfer_paid=True)
        dec.engine.where[rid] = rep
        st = self.stats
        st.transfers += 1
        st.transfer_tokens += p.transfer_tokens
        st.transfer_s += p.transferred_s - p.prefilled_s
        st.prefill_s += p.prefilled_s - p.sent
        st.ttft_parts.append((p.prefilled_s - p.sent, p.transferred_s - p.prefilled_s))

    def _as_sent(self, f: tuple[str, int, int, int, int | None]) -> tuple[str, int, int, int, int | None]:
        """A decode instance's finished request as the client sees it: the prefill's cached tokens."""
        rid, prompt, _cached, completion, _cpu = f
        p = self._pending.pop(rid, None)
        if p is None:
            return f
        return (rid, prompt, p.cached, completion, p.cpu_cached)

    # -- observability ---------------------------------------------------------------------------------
    def role_counters(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for kind, insts in self.instances.items():
            per = [inst.engine.counters() for inst in insts]
            c = {k: sum(x[k] for x in per) for k in per[0]}
            c["kv_cache_usage_perc"] /= len(per)
            c["steps"] = sum(inst.steps for inst in insts)
            c["busy_s"] = sum(inst.busy_s for inst in insts)
            out[kind] = c
        return out

    def counters(self) -> dict[str, float]:
        """The deployment as one server: prompt and prefix-cache counters from the role that prefills,
        generation and completion counters from the role that streams, the rest summed."""
        roles = self.role_counters()
        if not self.disaggregated:
            c = dict(roles["unified"])
        else:
            pre, dec = roles["prefill"], roles["decode"]
            c = {k: pre[k] + dec[k] for k in pre}
            for k in (
                "prompt_tokens_total",
                "prefix_cache_queries_total",
                "prefix_cache_hits_total",
                "external_prefix_cache_queries_total",
                "external_prefix_cache_hits_total",
            ):
                c[k] = pre[k]
            for k in ("generation_tokens_total", "request_success_total"):
                c[k] = dec[k]
            c["kv_cache_usage_perc"] = (pre["kv_cache_usage_perc"] + dec["kv_cache_usage_perc"]) / 2
        c.pop("steps", None)
        c.pop("busy_s", None)
        return c

    def summary(self, simulated_s: float) -> dict[str, Any]:
        """Per role: GPUs, instances, steps, busy fraction, counters; the KV hand-off's figures."""
        roles = self.role_counters()
        out: dict[str, Any] = {"topology": self.topo.describe(), "policy": self.policy, "roles": {}}
        for kind, role in self.topo.roles():
            c = roles[kind]
            span = max(simulated_s, 1e-9) * role.instances
            out["roles"][kind] = {
                "gpus": role.gpus,
                "instances": role.instances,
                "steps": int(c["steps"]),
                "busy_frac": round(c["busy_s"] / span, 4),
                "prompt_tokens": int(c["prompt_tokens_total"]),
                "generation_tokens": int(c["generation_tokens_total"]),
                "prefix_cache_hit_rate": round(c["prefix_cache_hits_total"] / c["prefix_cache_queries_total"], 4)
                if c["prefix_cache_queries_total"]
                else 0.0,
                "preemptions": int(c["num_preemptions_total"]),
            }
        if self.disaggregated:
            st = self.stats
            parts = np.array(st.ttft_parts) if st.ttft_parts else np.zeros((0, 2))
            out["kv_transfer"] = {
                "link": self.link,
                "gbps": self._link_bw / 1e9,
                "transfers": st.transfers,
                "tokens": st.transfer_tokens,
                "bytes_per_token_gpu": self._kv_bytes,
                "median_prefill_s": float(np.median(parts[:, 0])) if len(parts) else 0.0,
                "median_transfer_s": float(np.median(parts[:, 1])) if len(parts) else 0.0,
            }
        return out


def needs_fleet(topo: Topology) -> bool:
    """More than one engine (instances, or prefill + decode): the simulator runs a Fleet, not one Router."""
    return topo.disaggregated or sum(r.instances for _, r in topo.roles()) > 1


def simulation_plan(cfg: Config) -> tuple[EngineSettings, Topology | None, dict[str, EngineSettings] | None, int]:
    """What the virtual clock runs for ``cfg``: (settings of the engine the summary names, the topology when it
    needs a Fleet else None, each role's settings then, every GPU of the deployment)."""
    from benchcamp.config import topology_of
    from benchcamp.sim.engine.settings import EngineSettings

    if cfg.topology is None:
        settings = EngineSettings.from_config(cfg)
        return settings, None, None, settings.gpus
    topo = topology_of(cfg)
    per: dict[str, EngineSettings] = {kind: role_settings(cfg, kind, topo) for kind, _ in topo.roles()}
    front = per["decode" if topo.disaggregated else "unified"]
    if not needs_fleet(topo):
        return front, None, None, topo.total_gpus
    return front, topo, per, topo.total_gpus


__all__ = [
    "Fleet",
    "acceptance_of",
    "needs_fleet",
    "role_settings",
    "session_key",
    "simulation_plan",
]
