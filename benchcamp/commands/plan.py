"""`benchcamp plan`: capacity planning before renting GPUs.

For every engine configuration of a matrix (GPU type, GPU count, tensor
parallel size with data parallel = GPUs / TP, expert parallel on/off,
max_num_seqs, max_num_batched_tokens), run the capacity search
(``benchcamp.capacity``) in virtual time on the simulated engine
(``benchcamp.engine.virtual_point``), then print the best configuration per
service tier (most agents per GPU; ties: higher revenue minus cost per
GPU-hour) and the Pareto front of agents per GPU against P90 per-agent speed
over every valid probe. Writes ``plan.json`` and ``plan.png`` to ``--out``.

Each axis defaults to the value in the params, so ``benchcamp plan --tp 1,2,4,8``
varies only the parallel layout. GPU types are GPU profiles, calibrated ones too
(``BENCHCAMP_PROFILE_PATH``); the engine profile is the params' (``--set
engine.engine_profile=NAME``; empty: vllm-cpu on the cpu profile, else vllm). A configuration the model does not fit in, or
that vLLM would refuse, is listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchcamp.commands.common import add_config_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="capacity search over a matrix of engine configurations, in virtual time")
    add_config_args(p)
    p.add_argument("--gpu", help="GPU types, comma-separated (default: hardware.gpu), e.g. h200,b200")
    p.add_argument("--gpus", help="GPU counts (default: hardware.gpu_count), e.g. 8,16")
    p.add_argument("--tp", help="tensor parallel sizes; data parallel = GPUs / TP (default: engine's), e.g. 1,2,8")
    p.add_argument("--ep", help="expert parallel: on,off (default: engine.enable_expert_parallel)")
    p.add_argument("--max-num-seqs", help="e.g. 128,256 (default: engine.max_num_seqs)")
    p.add_argument("--max-num-batched-tokens", help="e.g. 8192,16384 (default: engine.max_num_batched_tokens)")
    p.add_argument(
        "--split",
        help="deployment shapes (benchcamp.topology): unified and/or xPyD, e.g. unified,1p1d,2p1d: x prefill + y "
        "decode engines of GPUs / (x + y) GPUs each, NIXL between them, a session-affinity router (default: unified)",
    )
    p.add_argument(
        "--spec",
        help="speculative decoding: off and/or METHOD:K:A (K draft tokens, synthetic acceptance length A), "
        "e.g. off,mtp:3:2.4 (default: off)",
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


_SPLIT = re.compile(r"^(\d+)p(\d+)d$")


def _splits(text: str | None) -> list[tuple[int, int]]:
    """--split -> [(prefill engines, decode engines)]; (0, 0) = unified."""
    from benchcamp.errors import ConfigError

    out = []
    for item in (x.strip().lower() for x in (text or "unified").split(",")):
        m = _SPLIT.match(item)
        if item == "unified":
            out.append((0, 0))
        elif m and int(m[1]) >= 1 and int(m[2]) >= 1:
            out.append((int(m[1]), int(m[2])))
        else:
            raise ConfigError(f"--split {text!r}: {item!r} is not unified or xPyD; e.g. --split unified,1p1d,2p1d")
    return out


def _specs(text: str | None) -> list[dict[str, Any] | None]:
    """--spec -> [None (off) | a topology speculative section]."""
    from benchcamp.errors import ConfigError

    out: list[dict[str, Any] | None] = []
    for item in (x.strip() for x in (text or "off").split(",")):
        if item.lower() == "off":
            out.append(None)
            continue
        try:
            method, k, a = item.split(":")
            spec = {
                "method": method,
                "num_speculative_tokens": int(k),
                "acceptance": "synthetic",
                "acceptance_length": float(a),
            }
        except ValueError:
            raise ConfigError(
                f"--spec {text!r}: {item!r} is not off or METHOD:K:A; e.g. --spec off,mtp:3:2.4"
            ) from None
        out.append(spec)
    return out


def matrix(cfg: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The configurations to search, as dotted config overrides (TP must divide the GPU count, or each engine's
    GPUs for an xPyD split; speculative decoding or a split make a ``topology`` override)."""
    e, h = cfg.engine, cfg.hardware
    axes = itertools.product(
        _list(args.gpu, h.gpu, str, "gpu"),
        _list(args.gpus, h.gpu_count, int, "gpus"),
        _list(args.tp, e.tensor_parallel_size, int, "tp"),
        _list(args.ep, e.enable_expert_parallel, bool, "ep"),
        _list(args.max_num_seqs, e.max_num_seqs, int, "max-num-seqs"),
        _list(args.max_num_batched_tokens, e.max_num_batched_tokens, int, "max-num-batched-tokens"),
        _splits(getattr(args, "split", None)),
        _specs(getattr(args, "spec", None)),
    )
    out = []
    for gpu, gpus, tp, ep, seqs, mbt, (xp, yd), spec in axes:
        per = gpus // (xp + yd) if xp else gpus  # GPUs per engine
        if tp < 1 or gpus < 1 or (xp and gpus % (xp + yd)) or per % tp or per < tp:
            continue
        o: dict[str, Any] = {"hardware.gpu": gpu, "hardware.gpu_count": gpus}
        if not xp and spec is None:  # the flat engine section: the configuration as before topologies
            o.update(
                {
                    "engine.tensor_parallel_size": tp,
                    "engine.data_parallel_size": gpus // tp,
                    "engine.enable_expert_parallel": ep,
                    "engine.max_num_seqs": seqs,
                    "engine.max_num_batched_tokens": mbt,
                }
            )
        else:
            role: dict[str, Any] = {
                "gpus_per_node": per,
                "tensor_parallel_size": tp,
                "data_parallel_size": per // tp,
                "enable_expert_parallel": ep,
                "max_num_seqs": seqs,
                "max_num_batched_tokens": mbt,
            }
            if spec is not None:
                role["speculative"] = spec
            if xp:
                role["kv_connector"] = {"kind": "NixlConnector"}
                o["topology"] = {
                    "prefill": {**role, "instances": xp},
                    "decode": {**role, "instances": yd},
                    "router": {"policy": "session_affinity", "pd_disaggregation": True},
                }
            else:
                o["topology"] = {"unified": role}
        out.append(o)
    return out


def config_id(o: dict[str, Any]) -> str:
    topo = o.get("topology")
    if topo is None:
        return (
            f"{o['hardware.gpu']}x{o['hardware.gpu_count']}-tp{o['engine.tensor_parallel_size']}"
            f"-dp{o['engine.data_parallel_size']}-ep{'on' if o['engine.enable_expert_parallel'] else 'off'}"
            f"-seqs{o['engine.max_num_seqs']}-mbt{o['engine.max_num_batched_tokens']}"
        )
    role = topo.get("decode") or topo["unified"]
    split = f"{topo['prefill']['instances']}p{topo['decode']['instances']}d" if "decode" in topo else "unified"
    spec = role.get("speculative")
    spec_id = f"-{spec['method']}{spec['num_speculative_tokens']}a{spec['acceptance_length']:g}" if spec else ""
    return (
        f"{o['hardware.gpu']}x{o['hardware.gpu_count']}-{split}-tp{role['tensor_parallel_size']}"
        f"-dp{role['data_parallel_size']}-ep{'on' if role['enable_expert_parallel'] else 'off'}"
        f"-seqs{role['max_num_seqs']}-mbt{role['max_num_batched_tokens']}{spec_id}"
    )


def search_one(cfg: Any, workload: Any, out_root: Path, on_probe: Any = None) -> dict[str, Any]:
    """The capacity search of one resolved config in virtual time -> CapacityResult.to_dict()."""
    from benchcamp.capacity import SearchSettings, search_capacity
    from benchcamp.engine.settings import EngineSettings
    from benchcamp.engine.virtual_point import virtual_measure

    if cfg.topology is not None:  # the topology's engines (benchcamp.topology.sim), every GPU of every role
        from benchcamp.topology.sim import simulation_plan

        front, topo, per, gpus = simulation_plan(cfg)
        for s in (per or {"front": front}).values():
            s.validate()
            _ = s.gpu_profile()
        from benchcamp.engine.core import Router

        for s in (per or {"front": front}).values():
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
                best[t["tier"]] = dict(t, config=c["id"], _key=key)
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
    from benchcamp.capacity import agents_speed_front, format_capacity
    from benchcamp.commands.common import config_from_args
    from benchcamp.config import load_config
    from benchcamp.workload import ensure_workload, read_workload

    base = config_from_args(args)
    if base.engine.kind != "simulated":
        from benchcamp.errors import ConfigError

        raise ConfigError(
            f"engine.kind={base.engine.kind}: benchcamp plan searches the simulated engine in "
            "virtual time; set engine.kind=simulated (the model and GPU profiles stay yours)"
        )
    workload = read_workload(args.workload) if args.workload else ensure_workload(base)[0]
    out = Path(args.out) if args.out else Path("reports") / "plan" / base.campaign.name
    out.mkdir(parents=True, exist_ok=True)
    combos = matrix(base, args)
    if not combos:
        from benchcamp.errors import ConfigError

        raise ConfigError("--tp/--gpus: no tensor parallel size divides a GPU count; e.g. --gpus 8 --tp 1,2,4,8")
    from benchcamp.engine.profiles import check_profile

    for gpu in dict.fromkeys(o["hardware.gpu"] for o in combos):  # a typo is an error, not a skipped configuration
        check_profile("gpus", "--gpu", gpu)
    tty = sys.stderr.isatty()
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
                entry["capacity"] = search_one(cfg, workload, rec_root / cid, progress if tty else None)
                entry["status"] = "searched"
            except ValueError as exc:  # does not fit, or a combination vLLM refuses (names the flag)
                entry["status"], entry["error"] = "skipped", str(exc).splitlines()[-1].strip()
            if tty:
                print("\r\033[K", end="", file=sys.stderr)
            entry["search_s"] = round(time.perf_counter() - t0, 2)
            configs.append(entry)
            if entry["status"] == "searched":
                text = format_capacity(entry["capacity"]).split("\n", 1)[1]
                print(f"[{i}/{len(combos)}] {cid} ({entry['search_s']:.1f} s)\n{text}", flush=True)
            else:
                print(f"[{i}/{len(combos)}] {cid}: skipped: {entry['error']}", flush=True)

    best = best_per_tier(configs)
    points = probe_points(configs)
    front = agents_speed_front(points)
    doc = {
        "workload": workload.name,
        "workload_digest": workload.digest,
        "tiers": [t.model_dump() for t in base.load.tiers],
        "configs": configs,
        "best": best,
        "pareto_front": front,
        "elapsed_s": round(time.perf_counter() - t_all, 2),
    }
    (out / "plan.json").write_text(json.dumps(strict_json(doc), indent=2))
    _plot(out / "plan.png", configs, best, front, base)
    print(format_plan(best, front, base.load.tiers))
    print(f"[plan] wrote {out / 'plan.json'} and {out / 'plan.png'} ({doc['elapsed_s']:.1f} s)")
    return 0 if any(c["status"] == "searched" for c in configs) else 1


def format_plan(best: dict[str, dict[str, Any]], front: list[dict[str, Any]], tiers: list[Any]) -> str:
    from benchcamp.metrics import Metric

    lines = ["", "best configuration per tier (most agents per GPU):"]
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
    lines.append("Pareto front (agents per GPU vs P90 per-agent speed, valid probes of every configuration):")
    for p in front:
        lines.append(
            f"  {p['agents']:8.2f} agents/GPU at {p['rate']:7.1f} tok/s  (TTFT P90 {p['ttft']:.2f} s)  "
            f"{p['config']} c{p['level']}"
        )
    return "\n".join(lines)


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
