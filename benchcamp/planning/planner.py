"""The capacity planner: every candidate deployment searched in virtual time, the best per service tier, the
Pareto fronts, what binds each, and how close the best comes to a target figure (``benchcamp plan`` is its
command line: ``benchcamp.commands.plan``).

A candidate is a set of dotted config overrides from the topology layer's grid (``benchcamp.topology.candidates``);
:func:`search_one` runs the capacity search (``benchcamp.planning.capacity``) over the simulated engine's virtual clock
(``benchcamp.sim.clock``); :func:`binding` reads which resource stops a candidate in each tier from the
performance model and the probes' per-role figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchcamp.config import Config


def config_id(o: dict[str, Any]) -> str:
    from benchcamp.topology.candidates import candidate_id

    return candidate_id(o)


def search_one(cfg: Config, workload: Any, out_root: Path, on_probe: Any = None) -> dict[str, Any]:
    """The capacity search of one resolved config in virtual time -> CapacityResult.to_dict()."""
    from benchcamp.planning.capacity import SearchSettings, search_capacity
    from benchcamp.sim.clock.virtual_point import virtual_measure
    from benchcamp.sim.engine.settings import EngineSettings

    if cfg.topology is not None:  # the topology's engines (benchcamp.sim.clock.fleet), every GPU of every role
        from benchcamp.sim.clock.fleet import simulation_plan
        from benchcamp.sim.engine.core import Router

        front, _topo, per, gpus = simulation_plan(cfg)
        for s in (per or {"front": front}).values():
            s.validate()
            Router(s)  # a role the model does not fit in is skipped here, with the reason
        settings = None
        gpu = front.gpu_profile()
    else:
        settings = EngineSettings.from_config(cfg).validate()
        gpu = settings.gpu_profile()
        gpus = settings.gpus
    res = search_capacity(
        virtual_measure(cfg, workload, out_root, settings),
        cfg.load.tiers,
        SearchSettings.of(cfg.load.capacity),
        gpus,
        gpu.board_power_w,
        gpu.node_overhead_factor,
        clock="virtual",
        on_probe=on_probe,
    )
    return res.to_dict()


def best_per_tier(configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """tier -> the searched configuration with the most agents per GPU (ties: higher margin)."""
    import math

    from benchcamp.metrics import Metric

    best: dict[str, dict[str, Any]] = {}
    for c in configs:
        for t in (c.get("capacity") or {}).get("tiers", []):
            if t["max_agents"] <= 0:
                continue
            margin = t[Metric.MARGIN_PER_GPU_HOUR] if math.isfinite(t[Metric.MARGIN_PER_GPU_HOUR]) else -math.inf
            key = (t["agents_per_gpu"], margin)
            if t["tier"] not in best or key > best[t["tier"]]["_key"]:
                binds = (c.get("binds") or {}).get(t["tier"])
                best[t["tier"]] = dict(t, config=c["id"], topology=c.get("topology", ""), binds=binds, _key=key)
    return {k: {kk: vv for kk, vv in v.items() if kk != "_key"} for k, v in best.items()}


def probe_points(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every valid probe of every configuration as {config, level, agents (per GPU), rate, ttft}."""
    from benchcamp.metrics import Metric

    pts = []
    for c in configs:
        cap = c.get("capacity") or {}
        for p in cap.get("probes", []):
            if p["valid"]:
                pts.append(
                    {
                        "config": c["id"],
                        "topology": c.get("topology", ""),
                        "level": p["level"],
                        "agents": p["level"] / cap["gpus"],
                        "rate": p[Metric.P90_USER_RATE],
                        "ttft": p[Metric.TTFT_P90],
                        "tokens_per_s_per_gpu": p[Metric.THROUGHPUT_PER_GPU],
                    }
                )
    return pts


def target_check(configs: list[dict[str, Any]], tokens: float, rate: float) -> dict[str, Any]:
    """The valid probe with the most tokens/s/GPU among those at a P90 per-user rate >= ``rate``, how far it is
    from ``tokens`` (ratio), and the lowest probe above it in the same configuration that fell below ``rate`` or
    was invalid (``failed_above``: where the binding resource is read)."""
    from benchcamp.metrics import Metric

    pts = [p for p in probe_points(configs) if p["rate"] >= rate]
    out: dict[str, Any] = {"tokens_per_s_per_gpu": tokens, "rate": rate}
    if not pts:
        return dict(out, config=None, reached=False)
    bestp = max(pts, key=lambda p: p["tokens_per_s_per_gpu"])
    cap = next(c["capacity"] for c in configs if c["id"] == bestp["config"])
    above = [
        p["level"]
        for p in cap["probes"]
        if p["level"] > bestp["level"] and (not p["valid"] or p[Metric.P90_USER_RATE] < rate)
    ]
    got = bestp["tokens_per_s_per_gpu"]
    return dict(
        out,
        config=bestp["config"],
        topology=bestp.get("topology", ""),
        level=bestp["level"],
        best_tokens_per_s_per_gpu=got,
        best_rate=bestp["rate"],
        ttft=bestp["ttft"],
        reached=got >= tokens,
        shortfall=tokens / got if got > 0 else float("inf"),
        failed_above=min(above) if above else None,
    )


def gpu_of(configs: list[dict[str, Any]], config: str) -> str:
    """The GPU profile of the searched configuration ``config`` (an id)."""
    return str(next(c["overrides"]["hardware.gpu"] for c in configs if c["id"] == config))


def expected_errors(base: Any, configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """GPU -> phase -> :class:`benchcamp.sim.fidelity.ExpectedError` for every GPU searched (the model is the
    params'): how far the validation set says to trust each candidate's simulated figures."""
    from benchcamp.sim import fidelity

    model = fidelity.config_profiles(base)[1]
    return {g: fidelity.for_engine(g, model) for g in dict.fromkeys(c["overrides"]["hardware.gpu"] for c in configs)}


def _error_line(errors: dict[str, Any] | None, gpu: str, indent: str) -> list[str]:
    """'expected error: tokens/s/GPU ...; per-user rate ...; TTFT ...' for a simulated figure on ``gpu``."""
    if not errors or gpu not in errors:
        return []
    by = errors[gpu]
    return [
        f"{indent}simulated; expected error: tokens/s/GPU {by['throughput'].words()}; per-user rate "
        f"{by['tpot'].words()}; TTFT {by['ttft'].words()}"
    ]


def format_target(t: dict[str, Any], errors: dict[str, dict[str, Any]] | None = None) -> str:
    from benchcamp.sim.fidelity import rounded

    head = f"target: {t['tokens_per_s_per_gpu']:,.0f} tok/s/GPU at P90 >= {t['rate']:g} tok/s/user: "
    if not t.get("config"):
        return head + "no valid probe of any configuration reaches that per-user rate"
    gpu = str(t.get("gpu", ""))
    by = (errors or {}).get(gpu, {})
    lines = [
        head
        + ("reached" if t["reached"] else f"not reached, {t['shortfall']:.1f}x short")
        + f"; best {rounded(t['best_tokens_per_s_per_gpu'], by.get('throughput'))} tok/s/GPU at "
        f"{rounded(t['best_rate'], by.get('tpot'))} tok/s/user "
        f"(TTFT P90 {rounded(t['ttft'], by.get('ttft'))} s), {t['config']} c{t['level']}",
        f"  {t['topology']}",
        *_error_line(errors, gpu, "  "),
    ]
    if t.get("binds"):
        lines.append(f"  binds above it: {t['binds']['summary']}")
    return "\n".join(lines)


THROUGHPUT_DEFINITION = (
    "window: (prompt tokens incl. cached + output tokens) in the measurement window / window seconds / every GPU "
    "of every role (AgentX divides by prefill + decode GPUs; its span figure also counts the drain)"
)


def format_plan(
    best: dict[str, dict[str, Any]],
    front: list[dict[str, Any]],
    tiers: list[Any],
    tput_front: list[dict[str, Any]] | None = None,
    errors: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The plan's summary; ``errors`` (:func:`expected_errors`) rounds each best figure to the precision its
    validation error allows and says that error beside it ('unvalidated' where no validated configuration is
    near)."""
    from benchcamp.metrics import Metric
    from benchcamp.sim.fidelity import rounded

    lines = ["", "best configuration per tier (most agents per GPU; tokens/s/GPU = window definition):"]
    for t in tiers:
        b = best.get(t.name)
        head = f"  {t.name} (>= {t.p90_user_tok_s:g} tok/s, TTFT <= {t.p90_ttft_s:g} s): "
        if b is None:
            lines.append(head + "no configuration meets it")
            continue
        gpu = str(b.get("gpu", ""))
        tput = (errors or {}).get(gpu, {}).get("throughput")
        lines.append(
            head + f"{b['config']}: {b['max_agents']} agents, {b['agents_per_gpu']:.2f}/GPU, "
            f"{b['agents_per_mw']:,.0f}/MW, {rounded(b[Metric.THROUGHPUT_PER_GPU], tput)} tok/s/GPU, "
            f"revenue ${rounded(b[Metric.REVENUE_PER_GPU_HOUR], tput)} - cost ${b[Metric.COST_PER_GPU_HOUR]:.2f} "
            "per GPU-hour"
        )
        if b.get("topology"):
            lines.append(f"      {b['topology']}")
        lines += _error_line(errors, gpu, "      ")
        if b.get("binds"):
            lines.append(f"      binds: {b['binds']['summary']}")
    lines.append("Pareto front (agents per GPU vs P90 per-agent speed, valid probes of every configuration):")
    for p in front:
        lines.append(
            f"  {p['agents']:8.2f} agents/GPU at {p['rate']:7.1f} tok/s  (TTFT P90 {p['ttft']:.2f} s)  "
            f"{p['config']} c{p['level']}"
        )
    if tput_front is not None:
        lines.append("Pareto front (tokens/s/GPU, window definition, vs P90 per-user rate):")
        for p in tput_front:
            lines.append(
                f"  {p['tokens_per_s_per_gpu']:12,.0f} tok/s/GPU at {p['rate']:7.1f} tok/s/user  "
                f"(TTFT P90 {p['ttft']:.2f} s)  {p['config']} c{p['level']}"
            )
    return "\n".join(lines)


def diagram_of(cfg: Config) -> str:
    from benchcamp.config import topology_of
    from benchcamp.topology.candidates import diagram

    return diagram(topology_of(cfg), cfg.hardware.gpu)


def median_prompt(workload: Any) -> int:
    """Median prompt length of the workload's requests (the context a decode sequence attends over)."""
    import numpy as np

    lens = [r.prompt_len for _, r in workload.requests()]
    return int(np.median(lens)) if lens else 0


def binding(
    cfg: Config, capacity: dict[str, Any], ctx: int, probes_root: Path | None = None
) -> dict[str, dict[str, Any]]:
    """tier -> which resource stops the configuration from serving more agents in that tier (an estimate).

    At the lowest probe that failed the tier (else the highest probe): a TTFT over the tier is the prefill side
    (KV transfer when the median hand-off outlasts the median prefill, else prefill compute, with the prefill
    pool's busy fraction); a per-user rate under the tier is the decode side: the step-time terms of the
    simulator's performance model (compute, HBM bandwidth, all-to-all / TP communication, step + kernel-launch
    overhead) for one decode DP rank holding its share of the sequences at the workload's median context, or
    KV capacity when those sequences' KV would fill the rank. ``probes_root``: the probes' folders
    (``<label>/point.json`` with the deployment's per-role figures), when kept."""
    from benchcamp.metrics import Metric
    from benchcamp.planning.capacity import TierField
    from benchcamp.sim.clock.fleet import simulation_plan
    from benchcamp.sim.engine.perfmodel import BatchSummary, perf_model_for

    probes = capacity.get("probes", [])
    if not probes or ctx <= 0:
        return {}
    front, topo, _per, _gpus = simulation_plan(cfg)
    ranks = front.data_parallel_size
    if topo is not None:
        ranks = topo.role("decode" if topo.disaggregated else "unified").instances * front.data_parallel_size
    pm = perf_model_for(front)
    kv_tokens = pm.kv_capacity_tokens(front.gpu_memory_utilization)
    out: dict[str, dict[str, Any]] = {}
    for t in capacity.get("tiers", []):
        level = t.get("failed_above") or max(p["level"] for p in probes)
        at = [p for p in probes if p["level"] == level]
        probe = at[-1] if at else None
        b = max(1, -(-level // ranks))
        cost = pm.cost([BatchSummary(decode_seqs=b, decode_ctx=b * ctx)] * front.data_parallel_size)
        terms = {
            "compute": cost.compute_s,
            "HBM bandwidth": cost.memory_s,
            "all-to-all/TP comm": cost.comm_s,
            "step+launch overhead": cost.overhead_s,
        }
        kv_frac = b * ctx / max(kv_tokens, 1)
        deployment: dict[str, Any] = {}
        if probe is not None and probes_root is not None:
            pj = probes_root / probe["label"] / "point.json"
            if pj.is_file():
                deployment = json.loads(pj.read_text()).get("deployment") or {}
        ttft_fails = probe is not None and probe[Metric.TTFT_P90] > t[TierField.TTFT]
        rate_fails = probe is not None and probe[Metric.P90_USER_RATE] < t[TierField.RATE]
        kv = deployment.get("kv_transfer") or {}
        busy = {k: v.get("busy_frac") for k, v in (deployment.get("roles") or {}).items()}
        if ttft_fails and not rate_fails:
            if kv and kv.get("median_transfer_s", 0) > kv.get("median_prefill_s", 0):
                binds = "KV transfer"
            else:
                binds = "prefill compute"
            why = (
                f"TTFT P90 {probe[Metric.TTFT_P90]:.1f} s > {t[TierField.TTFT]:g} s at c{level}"  # type: ignore[index]
                + (
                    f" (median prefill {kv['median_prefill_s']:.2f} s, KV hand-off {kv['median_transfer_s']:.3f} s"
                    f" over {kv['link']})"
                    if kv
                    else ""
                )
            )
        else:
            binds = "KV capacity" if kv_frac >= 0.9 else max(terms, key=terms.__getitem__)
            why = (
                f"P90 {probe[Metric.P90_USER_RATE]:.0f} tok/s/user < {t[TierField.RATE]:g} at c{level}"
                if probe is not None and rate_fails
                else f"c{level}"
            ) + (
                f"; a decode rank's step with {b} seqs x {ctx:,} ctx: {cost.duration_s * 1e3:.1f} ms = "
                + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in terms.items())
                + f" ms; KV {kv_frac:.0%} of {kv_tokens:,} tokens/rank"
            )
        if busy:
            why += "; busy " + ", ".join(f"{k} {v:.0%}" for k, v in busy.items() if v is not None)
        out[t["tier"]] = {
            "level": level,
            "binds": binds,
            "seqs_per_decode_rank": b,
            "context": ctx,
            "step_ms": round(cost.duration_s * 1e3, 3),
            "terms_ms": {k: round(v * 1e3, 3) for k, v in terms.items()},
            "kv_tokens_per_rank": kv_tokens,
            "kv_fraction": round(kv_frac, 4),
            "busy": busy,
            "kv_transfer": kv,
            "summary": f"{binds} ({why})",
        }
    return out
