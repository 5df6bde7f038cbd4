"""`benchcamp plan`: capacity planning over deployment topologies before renting GPUs.

The candidates are the grid of ``benchcamp.topology.candidates`` over the axes given: GPU type, GPU count,
split (``--split unified,1p1d,2p1d``: x prefill + y decode engines of GPUs / (x + y) GPUs each, NIXL, a
session-affinity router; ``3p1d:8/48``: prefill engines of 8 GPUs, a decode engine of 48), tensor parallel size
(data parallel = an engine's GPUs / TP; per role with ``--tp-prefill`` / ``--tp-decode``), expert parallel on/off,
max_num_seqs, max_num_batched_tokens, speculative decoding (``--spec off,dspark:5:3.5``: K drafts, a forced
acceptance length A) and the CPU KV tier per DP rank (``--kv-tier 0,128``). Each axis defaults to the params'
value, so ``benchcamp plan --tp 1,2,4,8`` varies only the parallel layout. Every candidate gets the capacity
search (``benchcamp.capacity``) in virtual time on the simulated engine (``benchcamp.engine.virtual_point``; a
topology runs as ``benchcamp.topology.sim.Deployment``), and the plan prints, per service tier, the best
candidate (most agents per GPU; ties: higher revenue minus cost per GPU-hour) with its topology diagram, agents
per GPU and per MW, tokens/s/GPU (window definition: every GPU of every role, as AgentX divides) and revenue per
GPU-hour, and what binds it (:func:`binding`); then the Pareto fronts of agents per GPU and of tokens/s/GPU
against the P90 per-user rate over every valid probe. ``--target TOKENS@RATE`` says how close the best candidate
comes to a published figure (the seed's 954000@196) and which resource stops it. Writes ``plan.json`` and
``plan.png`` to ``--out``; prints one line per candidate as it finishes (progress), and on a terminal each probe.

GPU types are GPU profiles, calibrated ones too (``BENCHCAMP_PROFILE_PATH``); the engine profile is the
params' (``--set engine.engine_profile=NAME``; empty: vllm-cpu on the cpu profile, else vllm). A candidate the
model does not fit in, or that vLLM would refuse, is listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchcamp.commands.common import add_config_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="capacity search over a grid of deployment topologies (benchcamp.topology), in virtual time"
    )
    add_config_args(p)
    p.add_argument("--gpu", help="GPU types, comma-separated (default: hardware.gpu), e.g. h200,b200")
    p.add_argument("--gpus", help="GPU counts (default: hardware.gpu_count), e.g. 8,16")
    p.add_argument(
        "--tp",
        help="tensor parallel sizes of every role; data parallel = an engine's GPUs / TP (default: engine's), "
        "e.g. 1,2,8",
    )
    p.add_argument(
        "--tp-prefill",
        help="TP sizes of the prefill engines of an xPyD split (default: --tp's); with --tp-decode, every "
        "(prefill, decode) pair is a candidate, e.g. --tp-prefill 4,8 --tp-decode 1,2",
    )
    p.add_argument("--tp-decode", help="TP sizes of the decode engines of an xPyD split (default: --tp's), e.g. 1,2")
    p.add_argument("--ep", help="expert parallel: on,off (default: engine.enable_expert_parallel)")
    p.add_argument("--max-num-seqs", help="e.g. 128,256 (default: engine.max_num_seqs)")
    p.add_argument("--max-num-batched-tokens", help="e.g. 8192,16384 (default: engine.max_num_batched_tokens)")
    p.add_argument(
        "--split",
        help="deployment shapes (benchcamp.topology): unified and/or xPyD, e.g. unified,1p1d,2p1d: x prefill + y "
        "decode engines of GPUs / (x + y) GPUs each, NIXL between them, a session-affinity router; xPyD:P/D sizes "
        "the engines: P GPUs per prefill engine, D per decode engine, x * P + y * D = a --gpus count, e.g. "
        "3p1d:8/48 on 72 GPUs (default: unified)",
    )
    p.add_argument(
        "--spec",
        help="speculative decoding: off and/or METHOD:K:A (K draft tokens, synthetic acceptance length A), "
        "e.g. off,dspark:5:3.2 (default: off)",
    )
    p.add_argument(
        "--kv-tier", help="CPU KV tier per DP rank in GiB, e.g. 0,128 (default: engine.kv_offloading_size_gib)"
    )
    p.add_argument(
        "--target",
        help="TOKENS@RATE: say how close the best topology comes to TOKENS tokens/s/GPU (window definition) at a "
        "P90 per-user rate >= RATE, and which resource binds; e.g. 954000@196 (the seed's AgentX record)",
    )
    p.add_argument("--workload", help="workload Parquet (default: the params' workload, built if missing)")
    p.add_argument("--out", help="folder for plan.json and plan.png (default: reports/plan/<campaign>)")
    p.add_argument("--keep-records", action="store_true", help="keep every probe's records under OUT/records/")
    p.set_defaults(func=run)


def _list(text: str | None, default: Any, kind: type, field: str) -> list[Any]:
    from benchcamp.errors import ConfigError

    if text is None:
        return [default]
    out = []
    for item in (x.strip() for x in text.split(",")):
        try:
            if kind is bool:
                if item.lower() not in ("on", "off", "true", "false"):
                    raise ValueError(item)
                out.append(item.lower() in ("on", "true"))
            else:
                out.append(kind(item))
        except ValueError:
            raise ConfigError(
                f"--{field} {text!r}: {item!r} is not a valid value; give a comma-separated list, "
                f"e.g. --{field} {'on,off' if kind is bool else '1,2,4'}"
            ) from None
    if not out:
        raise ConfigError(f"--{field}: give at least one value")
    return out


def matrix(cfg: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The configurations to search, as dotted config overrides: the candidate grid of the topology layer
    (``benchcamp.topology.candidates``) over the axes given, each defaulting to the params' value."""
    from benchcamp.engine.profiles import load_gpu
    from benchcamp.errors import ProfileError
    from benchcamp.topology.candidates import candidates, parse_specs, parse_splits

    e, h = cfg.engine, cfg.hardware
    gpus = _list(args.gpu, h.gpu, str, "gpu")
    node_gpus = {}
    for g in gpus:
        try:
            node_gpus[g] = load_gpu(g).nvlink_domain_gpus
        except ProfileError:
            pass  # an unknown GPU type is the one-line error of check_profile in run()
    combos = candidates(
        gpus,
        _list(args.gpus, h.gpu_count, int, "gpus"),
        _list(args.tp, e.tensor_parallel_size, int, "tp"),
        _list(args.ep, e.enable_expert_parallel, bool, "ep"),
        _list(args.max_num_seqs, e.max_num_seqs, int, "max-num-seqs"),
        _list(args.max_num_batched_tokens, e.max_num_batched_tokens, int, "max-num-batched-tokens"),
        parse_splits(getattr(args, "split", None)),
        parse_specs(getattr(args, "spec", None)),
        _list(getattr(args, "kv_tier", None), e.kv_offloading_size_gib, float, "kv-tier"),
        node_gpus=node_gpus,
        prefill_tps=_list(args.tp_prefill, None, int, "tp-prefill") if getattr(args, "tp_prefill", None) else None,
        decode_tps=_list(args.tp_decode, None, int, "tp-decode") if getattr(args, "tp_decode", None) else None,
    )
    if cfg.topology is None:
        return combos
    # A one-engine candidate is the flat engine section: it must not inherit the params' own topology (the
    # default params.yaml has one), which would replace the candidate's layout with the params' deployment.
    return [o if "topology" in o else {**o, "topology": None} for o in combos]


def config_id(o: dict[str, Any]) -> str:
    from benchcamp.topology.candidates import candidate_id

    return candidate_id(o)


def search_one(cfg: Any, workload: Any, out_root: Path, on_probe: Any = None) -> dict[str, Any]:
    """The capacity search of one resolved config in virtual time -> CapacityResult.to_dict()."""
    from benchcamp.capacity import SearchSettings, search_capacity
    from benchcamp.engine.settings import EngineSettings
    from benchcamp.engine.virtual_point import virtual_measure

    if cfg.topology is not None:  # the topology's engines (benchcamp.topology.sim), every GPU of every role
        from benchcamp.engine.core import Router
        from benchcamp.topology.sim import simulation_plan

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


def run(args: argparse.Namespace) -> int:
    from benchcamp.campaign import strict_json
    from benchcamp.capacity import TierField, agents_speed_front, format_capacity
    from benchcamp.commands.common import config_from_args
    from benchcamp.config import load_config
    from benchcamp.topology.candidates import throughput_front
    from benchcamp.workload import ensure_workload, read_workload

    base = config_from_args(args)
    if base.engine.kind != "simulated":
        from benchcamp.errors import ConfigError

        raise ConfigError(
            f"engine.kind={base.engine.kind}: benchcamp plan searches the simulated engine in "
            "virtual time; set engine.kind=simulated (the model and GPU profiles stay yours)"
        )
    combos = matrix(base, args)  # bad axes are one-line errors before the workload is read or built
    if not combos:
        from benchcamp.errors import ConfigError

        raise ConfigError(
            "--tp/--gpus/--split: no tensor parallel size divides an engine's GPUs (a GPU count, or a --split "
            "xPyD's share of it); e.g. --gpus 8 --tp 1,2,4,8"
        )
    from benchcamp.engine.profiles import check_profile

    for gpu in dict.fromkeys(o["hardware.gpu"] for o in combos):  # a typo is an error, not a skipped configuration
        check_profile("gpus", "--gpu", gpu)
    workload = read_workload(args.workload) if args.workload else ensure_workload(base)[0]
    out = Path(args.out) if args.out else Path("reports") / "plan" / base.campaign.name
    out.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    ctx_median = _median_prompt(workload)
    print(
        f"[plan] {len(combos)} configurations x {len(base.load.tiers)} tiers, workload {workload.name} "
        f"({len(workload.top_level())} sessions), virtual clock",
        flush=True,
    )
    configs: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="benchcamp-plan-") as tmp:
        rec_root = out / "records" if args.keep_records else Path(tmp)
        for i, o in enumerate(combos, 1):
            cid = config_id(o)
            entry: dict[str, Any] = {"id": cid, "overrides": o}
            t0 = time.perf_counter()

            def progress(p: Any, cid: str = cid, i: int = i) -> None:
                line = f"[{i}/{len(combos)} {cid}] probe c{p.level}: " + (
                    f"{p.p90_user_tokens_per_s:.1f} tok/s P90, TTFT P90 {p.ttft_p90_s:.2f} s"
                    if p.valid
                    else "invalid: " + "; ".join(p.reasons)[:80]
                )
                print(("\r\033[K" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

            try:
                cfg = load_config(
                    args.params,
                    list(args.overrides)
                    + [f"{k}={json.dumps(v)}" for k, v in o.items()]
                    + ["load.mode=capacity", "load.clock=virtual"],
                )
                entry["topology"] = _diagram(cfg)
                entry["capacity"] = search_one(cfg, workload, rec_root / cid, progress if tty else None)
                entry["status"] = "searched"
                entry["binds"] = binding(cfg, entry["capacity"], ctx_median, rec_root / cid)
            except ValueError as exc:  # does not fit, or a combination vLLM refuses (names the flag)
                entry["status"], entry["error"] = "skipped", str(exc).splitlines()[-1].strip()
            if tty:
                print("\r\033[K", end="", file=sys.stderr)
            entry["search_s"] = round(time.perf_counter() - t0, 2)
            configs.append(entry)
            if entry["status"] == "searched":
                text = format_capacity(entry["capacity"]).split("\n", 1)[1]
                print(
                    f"[{i}/{len(combos)}] {cid} ({entry['search_s']:.1f} s, {time.perf_counter() - t_all:.0f} s "
                    f"so far)\n  {entry['topology']}\n{text}",
                    flush=True,
                )
            else:
                print(f"[{i}/{len(combos)}] {cid}: skipped: {entry['error']}", flush=True)
        target = None
        if getattr(args, "target", None):
            target = target_check(configs, *_target(args.target))
            if target.get("config"):
                o = next(c["overrides"] for c in configs if c["id"] == target["config"])
                cfg = load_config(
                    args.params,
                    list(args.overrides)
                    + [f"{k}={json.dumps(v)}" for k, v in o.items()]
                    + ["load.mode=capacity", "load.clock=virtual"],
                )
                cap = next(c["capacity"] for c in configs if c["id"] == target["config"])
                tier = {
                    "tier": "target",
                    TierField.RATE: target["rate"],
                    TierField.TTFT: float("inf"),
                    "failed_above": target.get("failed_above"),
                }
                target["binds"] = binding(cfg, dict(cap, tiers=[tier]), ctx_median, rec_root / target["config"]).get(
                    "target"
                )

    best = best_per_tier(configs)
    points = probe_points(configs)
    front = agents_speed_front(points)
    tput_front = throughput_front(points)
    doc = {
        "workload": workload.name,
        "workload_digest": workload.digest,
        "tiers": [t.model_dump() for t in base.load.tiers],
        "configs": configs,
        "best": best,
        "pareto_front": front,
        "throughput_front": tput_front,
        "throughput_definition": THROUGHPUT_DEFINITION,
        "target": target,
        "elapsed_s": round(time.perf_counter() - t_all, 2),
    }
    (out / "plan.json").write_text(json.dumps(strict_json(doc), indent=2))
    _plot(out / "plan.png", configs, best, front, base)
    print(format_plan(best, front, base.load.tiers, tput_front))
    if target is not None:
        print(format_target(target))
    print(f"[plan] wrote {out / 'plan.json'} and {out / 'plan.png'} ({doc['elapsed_s']:.1f} s)")
    return 0 if any(c["status"] == "searched" for c in configs) else 1


def _target(text: str) -> tuple[float, float]:
    from benchcamp.errors import ConfigError

    try:
        tok, rate = (float(x) for x in text.split("@"))
    except ValueError:
        raise ConfigError(f"--target {text!r}: give TOKENS@RATE, e.g. --target 954000@196") from None
    return tok, rate


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


def format_target(t: dict[str, Any]) -> str:
    head = f"target: {t['tokens_per_s_per_gpu']:,.0f} tok/s/GPU at P90 >= {t['rate']:g} tok/s/user: "
    if not t.get("config"):
        return head + "no valid probe of any configuration reaches that per-user rate"
    lines = [
        head
        + ("reached" if t["reached"] else f"not reached, {t['shortfall']:.1f}x short")
        + f"; best {t['best_tokens_per_s_per_gpu']:,.0f} tok/s/GPU at {t['best_rate']:.0f} tok/s/user "
        f"(TTFT P90 {t['ttft']:.2f} s), {t['config']} c{t['level']}",
        f"  {t['topology']}",
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
) -> str:
    from benchcamp.metrics import Metric

    lines = ["", "best configuration per tier (most agents per GPU; tokens/s/GPU = window definition):"]
    for t in tiers:
        b = best.get(t.name)
        head = f"  {t.name} (>= {t.p90_user_tok_s:g} tok/s, TTFT <= {t.p90_ttft_s:g} s): "
        if b is None:
            lines.append(head + "no configuration meets it")
            continue
        lines.append(
            head + f"{b['config']}: {b['max_agents']} agents, {b['agents_per_gpu']:.2f}/GPU, "
            f"{b['agents_per_mw']:,.0f}/MW, {b[Metric.THROUGHPUT_PER_GPU]:,.0f} tok/s/GPU, "
            f"revenue ${b[Metric.REVENUE_PER_GPU_HOUR]:.2f} - cost ${b[Metric.COST_PER_GPU_HOUR]:.2f} per GPU-hour"
        )
        if b.get("topology"):
            lines.append(f"      {b['topology']}")
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


def _diagram(cfg: Any) -> str:
    from benchcamp.topology.candidates import diagram
    from benchcamp.topology.resolve import topology_of

    return diagram(topology_of(cfg), cfg.hardware.gpu)


def _median_prompt(workload: Any) -> int:
    """Median prompt length of the workload's requests (the context a decode sequence attends over)."""
    import numpy as np

    lens = [r.prompt_len for _, r in workload.requests()]
    return int(np.median(lens)) if lens else 0


def binding(cfg: Any, capacity: dict[str, Any], ctx: int, probes_root: Path | None = None) -> dict[str, dict[str, Any]]:
    """tier -> which resource stops the configuration from serving more agents in that tier (an estimate).

    At the lowest probe that failed the tier (else the highest probe): a TTFT over the tier is the prefill side
    (KV transfer when the median hand-off outlasts the median prefill, else prefill compute, with the prefill
    pool's busy fraction); a per-user rate under the tier is the decode side: the step-time terms of the
    simulator's performance model (compute, HBM bandwidth, all-to-all / TP communication, step + kernel-launch
    overhead) for one decode DP rank holding its share of the sequences at the workload's median context, or
    KV capacity when those sequences' KV would fill the rank. ``probes_root``: the probes' folders
    (``<label>/point.json`` with the deployment's per-role figures), when kept."""
    from benchcamp.capacity import TierField
    from benchcamp.engine.perfmodel import BatchSummary, perf_model_for
    from benchcamp.metrics import Metric
    from benchcamp.topology.sim import simulation_plan

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


def _plot(
    path: Path, configs: list[dict[str, Any]], best: dict[str, dict[str, Any]], front: list[dict[str, Any]], base: Any
) -> None:
    from benchcamp.capacity import TierField
    from benchcamp.metrics import Metric
    from benchcamp.report import plots

    series = [(c["id"], [p for p in probe_points([c])]) for c in configs if c["status"] == "searched"]
    tiers = []
    for t in base.load.tiers:
        b = best.get(t.name)
        tiers.append(
            {
                "tier": t.name,
                TierField.RATE: t.p90_user_tok_s,
                TierField.TTFT: t.p90_ttft_s,
                "marks": [(b["agents_per_gpu"], b[Metric.P90_USER_RATE])] if b else [],
            }
        )
    fig = plots.capacity_curve(
        series, tiers, "concurrent agents per GPU", f"benchcamp plan: {base.engine.model}", front=front
    )
    path.write_bytes(plots.png(fig))
