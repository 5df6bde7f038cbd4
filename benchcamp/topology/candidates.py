"""The deployments ``benchcamp plan`` searches: a bounded grid of topologies, as config overrides (pure).

Axes: GPU type, GPU count, split (``unified``: one engine of every GPU; ``replicas``: GPUs / TP independent
one-TP-group engines behind a session-affinity router (``topology.unified.instances``; a dense model's DP ranks
run so anyway, a MoE model's replicas hold full expert copies and never wait for each other); or ``xPyD``: x prefill + y decode engines of GPUs / (x + y) GPUs
each, or ``xPyD:P/D``: prefill engines of P GPUs and decode engines of D GPUs, x * P + y * D = the GPU count, e.g.
``3p1d:8/48`` on a 72-GPU rack; NIXL between them, a session-affinity router), tensor parallel size (data parallel
= an engine's GPUs / TP; per role with ``prefill_tps`` / ``decode_tps``), expert parallel on/off, max_num_seqs,
max_num_batched_tokens, speculative decoding (off or METHOD:K:A, a forced acceptance length A as AgentX
throughput runs use), and the CPU KV tier per DP rank (GiB).

A combination that cannot be laid out (an engine's GPUs not a multiple of its TP, GPUs not divisible by x + y,
engine sizes that do not add up to the GPU count) is left out here; one the model or GPU profile refuses is the
planner's "skipped" (the config's own one-line error). The grid is the product of the axes, so it is bounded by
what the caller gives: :func:`candidates` refuses more than ``limit`` candidates with a one-line error rather than
running for hours.

Also here: the text diagram of a topology (:func:`diagram`, for the plan's table, the report and MLflow) and the
Pareto front of tokens/s/GPU against the P90 per-user rate (:func:`throughput_front`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from benchcamp.errors import ConfigError
from benchcamp.topology.model import Topology

DEFAULT_LIMIT = 256
_SPLIT = re.compile(r"^(\d+)p(\d+)d(?::(\d+)/(\d+))?$")


class Split(NamedTuple):
    """A deployment shape: ``prefill`` + ``decode`` engines ((0, 0) = unified) and, when given, the GPUs of one
    prefill and of one decode engine (0 = the GPU count split evenly over the x + y engines)."""

    prefill: int
    decode: int
    prefill_gpus: int = 0
    decode_gpus: int = 0
    replicas: bool = False  # unified engines of one TP group each, as many as the GPUs make, behind a router

    @property
    def sized(self) -> bool:
        return bool(self.prefill_gpus)

    @property
    def gpus(self) -> int:
        """GPUs a sized split needs (x * P + y * D); 0 when unsized."""
        return self.prefill * self.prefill_gpus + self.decode * self.decode_gpus

    def __str__(self) -> str:
        if self.replicas:
            return "replicas"
        if not self.prefill:
            return "unified"
        sizes = f":{self.prefill_gpus}/{self.decode_gpus}" if self.sized else ""
        return f"{self.prefill}p{self.decode}d{sizes}"


DEFAULT_SPLITS = "unified,replicas"


def parse_splits(text: str | None) -> list[Split]:
    """``unified,replicas,1p1d,3p1d:8/48`` -> [unified, GPUs / TP replicas of one TP group, 1 prefill + 1 decode
    engine of GPUs / 2 each, 3 prefill engines of 8 GPUs + 1 decode engine of 48 GPUs] (default: unified and
    replicas, ``DEFAULT_SPLITS``)."""
    out: list[Split] = []
    for item in (x.strip().lower() for x in (text or DEFAULT_SPLITS).split(",")):
        m = _SPLIT.match(item)
        if item == "unified":
            out.append(Split(0, 0))
        elif item == "replicas":
            out.append(Split(0, 0, replicas=True))
        elif m and int(m[1]) >= 1 and int(m[2]) >= 1 and (m[3] is None or (int(m[3]) >= 1 and int(m[4]) >= 1)):
            out.append(Split(int(m[1]), int(m[2]), int(m[3] or 0), int(m[4] or 0)))
        else:
            raise ConfigError(
                f"--split {text!r}: {item!r} is not unified, replicas, xPyD or xPyD:P/D (GPUs of one prefill / one "
                "decode engine, each >= 1); e.g. --split unified,replicas,1p1d,3p1d:8/48"
            )
    return out


def parse_specs(text: str | None) -> list[dict[str, Any] | None]:
    """``off,dspark:5:3.2`` -> [None, a topology ``speculative`` section with a synthetic acceptance length]."""
    out: list[dict[str, Any] | None] = []
    for item in (x.strip() for x in (text or "off").split(",")):
        if item.lower() == "off":
            out.append(None)
            continue
        try:
            method, k, a = item.split(":")
            out.append(
                {
                    "method": method,
                    "num_speculative_tokens": int(k),
                    "acceptance": "synthetic",
                    "acceptance_length": float(a),
                }
            )
        except ValueError:
            raise ConfigError(
                f"--spec {text!r}: {item!r} is not off or METHOD:K:A; e.g. --spec off,mtp:3:2.4"
            ) from None
    return out


def _layout(per: int, tp: int, node_gpus: int | None) -> dict[str, int] | None:
    """One engine of ``per`` GPUs at TP ``tp``: nodes, GPUs per node, TP, DP; None when it cannot be laid out
    (``per`` not a multiple of TP, not whole nodes of ``node_gpus``, or a TP group larger than a node)."""
    if tp < 1 or per < tp or per % tp:
        return None
    node = min(per, node_gpus or per)
    if per % node or node % tp:  # whole nodes per engine, a TP group inside one
        return None
    return {
        "nodes_per_instance": per // node,
        "gpus_per_node": node,
        "tensor_parallel_size": tp,
        "data_parallel_size": per // tp,
    }


def _sizes(sp: tuple[int, ...]) -> tuple[int, int]:
    """The (prefill GPUs, decode GPUs) of a plain ``(x, y[, P, D])`` shape; (0, 0) unsized."""
    return (sp[2], sp[3]) if len(sp) >= 4 else (0, 0)


def candidates(
    gpus: Sequence[str],
    counts: Sequence[int],
    tps: Sequence[int],
    eps: Sequence[bool],
    seqs: Sequence[int],
    mbts: Sequence[int],
    splits: Sequence[Split | tuple[int, ...]] = (Split(0, 0),),
    specs: Sequence[dict[str, Any] | None] = (None,),
    kv_tiers: Sequence[float] = (0.0,),
    limit: int = DEFAULT_LIMIT,
    node_gpus: Mapping[str, int] | None = None,
    prefill_tps: Sequence[int] | None = None,
    decode_tps: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Every laid-out combination of the axes as dotted config overrides, in axis order.

    The one-engine case without speculative decoding or a KV tier stays the flat ``engine`` section (so its
    fingerprint and id are those of a plan before topologies); everything else is a ``topology`` override.
    ``node_gpus``: GPU type -> GPUs of one scale-up domain (the GPU profile's ``nvlink_domain_gpus``: 8 on a
    B200/B300 node, 72 on an NVL72 rack); an engine larger than that spans ``nodes_per_instance`` such nodes
    (and its TP group stays inside one); unset, an engine is one node.

    Per role: ``prefill_tps`` / ``decode_tps`` are the TP sizes of an xPyD split's prefill / decode engines
    (unset: ``tps``); with neither, both roles take the same TP from ``tps`` (one axis), with either, every
    (prefill TP, decode TP) pair. Unified engines take ``tps``. A sized split (``Split(3, 1, 8, 48)``) gives
    its engines those GPUs on the GPU counts they add up to, and is an error when they add up to none."""
    # a plain (x, y[, P, D]) tuple is an unsized or sized xPyD / unified shape; a Split keeps its replicas flag
    shapes = [sp if isinstance(sp, Split) else Split(sp[0], sp[1], *_sizes(sp)) for sp in splits]
    per_role = prefill_tps is not None or decode_tps is not None
    if per_role and not any(sp.prefill for sp in shapes):
        flag = "--tp-prefill" if prefill_tps is not None else "--tp-decode"
        raise ConfigError(
            f"{flag}: sizes prefill and decode engines, but --split gives only unified; add an xPyD split "
            "(e.g. --split unified,1p1d) or give the TP sizes with --tp"
        )
    for sp in shapes:
        if sp.sized and sp.gpus not in counts:
            have = ",".join(str(n) for n in counts)
            raise ConfigError(
                f"--split {sp}: {sp.prefill} x {sp.prefill_gpus} + {sp.decode} x {sp.decode_gpus} = {sp.gpus} GPUs, "
                f"but --gpus (default: hardware.gpu_count) gives {have}; add {sp.gpus} to --gpus or give engine "
                "sizes that add up to one of them"
            )
    pd_pairs = list(itertools.product(prefill_tps or tps, decode_tps or tps)) if per_role else [(t, t) for t in tps]
    tp_axis = list(dict.fromkeys(pd_pairs + [(t, t) for t in tps]))  # (prefill TP, decode TP); unified: (t, t)
    unified_tps, pd_set = set(tps), set(pd_pairs)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for gpu, n, (ptp, dtp), ep, s, mbt, sp, spec, kv in itertools.product(
        gpus, counts, tp_axis, eps, seqs, mbts, shapes, specs, kv_tiers
    ):
        xp, yd = sp.prefill, sp.decode
        if n < 1 or (xp and (ptp, dtp) not in pd_set) or (not xp and (ptp != dtp or ptp not in unified_tps)):
            continue
        node = (node_gpus or {}).get(gpu)
        copies = 1
        if sp.replicas:  # n // TP engines of one TP group each; one engine is the unified candidate
            copies = n // ptp if n % ptp == 0 else 0
            if copies < 2:
                continue
            pl = dl = _layout(ptp, ptp, node)
        elif xp:
            if sp.sized:
                if sp.gpus != n:
                    continue
                pg, dg = sp.prefill_gpus, sp.decode_gpus
            elif n % (xp + yd):
                continue
            else:
                pg = dg = n // (xp + yd)
            pl, dl = _layout(pg, ptp, node), _layout(dg, dtp, node)
        else:
            pl = dl = _layout(n, ptp, node)
        if pl is None or dl is None:
            continue
        o: dict[str, Any] = {"hardware.gpu": gpu, "hardware.gpu_count": n}
        if not xp and spec is None and not kv and copies == 1:
            o.update(
                {
                    "engine.tensor_parallel_size": ptp,
                    "engine.data_parallel_size": n // ptp,
                    "engine.enable_expert_parallel": ep,
                    "engine.max_num_seqs": s,
                    "engine.max_num_batched_tokens": mbt,
                }
            )
        else:
            common: dict[str, Any] = {"enable_expert_parallel": ep, "max_num_seqs": s, "max_num_batched_tokens": mbt}
            if spec is not None:
                common["speculative"] = dict(spec)
            if kv:
                common["kv_offloading_size_gib"] = float(kv)
            if xp:
                common["kv_connector"] = {"kind": "NixlConnector"}
                o["topology"] = {
                    "prefill": {**pl, **common, "instances": xp},
                    "decode": {**dl, **common, "instances": yd},
                    "router": {"policy": "session_affinity", "pd_disaggregation": True},
                }
            elif copies > 1:
                o["topology"] = {
                    "unified": {**dl, **common, "instances": copies},
                    "router": {"policy": "session_affinity"},
                }
            else:
                o["topology"] = {"unified": {**dl, **common}}
        cid = candidate_id(o)
        if cid in seen:  # e.g. 1p1d and 1p1d:8/8 on 16 GPUs
            continue
        seen.add(cid)
        out.append(o)
        if len(out) > limit:
            raise ConfigError(
                f"benchcamp plan: the axes give more than {limit} candidates; give fewer values to "
                "--gpu/--gpus/--tp/--tp-prefill/--tp-decode/--split/--spec/--kv-tier (each candidate is a "
                "capacity search)"
            )
    return out


def candidate_id(o: Mapping[str, Any]) -> str:
    """A short stable name, e.g. ``gb300x24-1p2d-tp1-dp8-epon-seqs64-mbt8192-dspark5a3.2-kv64``; when the prefill
    and decode engines differ in TP or DP, each role's: ``gb300x72-3p1d-ptp1-pdp8-dtp1-ddp48-epon-...``."""
    topo = o.get("topology")
    if topo is None:
        kv = o.get("engine.kv_offloading_size_gib") or 0
        return (
            f"{o['hardware.gpu']}x{o['hardware.gpu_count']}-tp{o['engine.tensor_parallel_size']}"
            f"-dp{o['engine.data_parallel_size']}-ep{'on' if o['engine.enable_expert_parallel'] else 'off'}"
            f"-seqs{o['engine.max_num_seqs']}-mbt{o['engine.max_num_batched_tokens']}" + (f"-kv{kv:g}" if kv else "")
        )
    role = topo.get("decode") or topo["unified"]
    split = f"{topo['prefill']['instances']}p{topo['decode']['instances']}d" if "decode" in topo else "unified"
    if "decode" not in topo and role.get("instances", 1) > 1:  # replicas behind the router
        split = f"{role['instances']}xunified"
    spec = role.get("speculative")
    spec_id = f"-{spec['method']}{spec['num_speculative_tokens']}a{spec['acceptance_length']:g}" if spec else ""
    kv = role.get("kv_offloading_size_gib") or 0
    layout = f"tp{role['tensor_parallel_size']}-dp{role['data_parallel_size']}"
    pre = topo.get("prefill")
    if pre is not None and (pre["tensor_parallel_size"], pre["data_parallel_size"]) != (
        role["tensor_parallel_size"],
        role["data_parallel_size"],
    ):  # roles of different sizes: each role's layout (its engines' GPUs = TP x DP)
        layout = (
            f"ptp{pre['tensor_parallel_size']}-pdp{pre['data_parallel_size']}"
            f"-dtp{role['tensor_parallel_size']}-ddp{role['data_parallel_size']}"
        )
    return (
        f"{o['hardware.gpu']}x{o['hardware.gpu_count']}-{split}-{layout}"
        f"-ep{'on' if role['enable_expert_parallel'] else 'off'}"
        f"-seqs{role['max_num_seqs']}-mbt{role['max_num_batched_tokens']}{spec_id}" + (f"-kv{kv:g}" if kv else "")
    )


def diagram(topo: Topology, gpu: str = "") -> str:
    """The roles and GPUs of a topology on one line, prefill before decode:
    ``P: 1x(TP1 DP8 EP8) 8 GPU -> D: 2x(TP1 DP8 EP8 dspark5 A3.2) 16 GPU [gb300]``."""
    parts = []
    for kind, role in topo.roles():
        letter = {"unified": "U", "prefill": "P", "decode": "D"}[kind]
        bits = [f"TP{role.tensor_parallel_size}", f"DP{role.data_parallel_size}"]
        if role.enable_expert_parallel:
            bits.append(f"EP{role.expert_parallel_size}")
        if role.speculative is not None and kind != "prefill":
            a = role.speculative.acceptance_length
            bits.append(
                f"{role.speculative.method}{role.speculative.num_speculative_tokens}" + (f" A{a:g}" if a else "")
            )
        if role.kv_offloading_size_gib:
            bits.append(f"CPU-KV {role.kv_offloading_size_gib:g}G/rank")
        nodes = f", {role.nodes_per_instance} nodes each" if role.nodes_per_instance > 1 else ""
        parts.append(f"{letter}: {role.instances}x({' '.join(bits)}) {role.gpus} GPU{nodes}")
    return " -> ".join(parts) + (f" [{gpu}]" if gpu else "")


def topology_params(topo: Topology) -> dict[str, str]:
    """Flat ``topology.*`` params of a topology (MLflow): shape, GPUs per role, and each role's layout."""
    shape = (
        "unified" if not topo.disaggregated else f"{topo.role('prefill').instances}P{topo.role('decode').instances}D"
    )
    out = {"topology.shape": shape, "topology.gpus": str(topo.total_gpus)}
    for kind, role in topo.roles():
        k = f"topology.{kind}"
        out[f"{k}.instances"] = str(role.instances)
        out[f"{k}.gpus"] = str(role.gpus)
        out[f"{k}.gpus_per_instance"] = str(role.gpus_per_instance)
        out[f"{k}.tp"] = str(role.tensor_parallel_size)
        out[f"{k}.dp"] = str(role.data_parallel_size)
        out[f"{k}.ep"] = str(role.expert_parallel_size)
        out[f"{k}.speculative"] = (
            f"{role.speculative.method}:{role.speculative.num_speculative_tokens}" if role.speculative else "off"
        )
        out[f"{k}.kv_offloading_gib"] = f"{role.kv_offloading_size_gib:g}"
    return out


def throughput_front(
    points: Iterable[Mapping[str, Any]], x: str = "tokens_per_s_per_gpu", y: str = "rate"
) -> list[dict[str, Any]]:
    """Points not dominated in (tokens/s/GPU ``x``, P90 per-user rate ``y``), both maximised; in order of rising
    throughput (falling per-user rate). Points with a missing or non-finite figure are left out."""

    def finite(v: Any) -> bool:
        return isinstance(v, (int, float)) and math.isfinite(v)

    cands = sorted((dict(p) for p in points if finite(p.get(x)) and finite(p.get(y))), key=lambda p: (-p[x], -p[y]))
    front: list[dict[str, Any]] = []
    best = -math.inf
    for p in cands:  # highest throughput first: on the front when faster per user than every point above it
        if p[y] > best:
            front.append(p)
            best = p[y]
    return list(reversed(front))
