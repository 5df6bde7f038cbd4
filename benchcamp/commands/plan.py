"""`benchcamp plan`: capacity planning over deployment topologies before renting GPUs.

The candidates are the grid of ``benchcamp.topology.candidates`` over the axes given: GPU type, GPU count,
split (``--split unified,replicas,1p1d,2p1d``: one engine of every GPU; GPUs / TP replicas of one TP group behind
a session-affinity router (the default is these two); x prefill + y decode engines of GPUs / (x + y) GPUs each,
NIXL, a session-affinity router; ``3p1d:8/48``: prefill engines of 8 GPUs, a decode engine of 48), tensor parallel size
(data parallel = an engine's GPUs / TP; per role with ``--tp-prefill`` / ``--tp-decode``), expert parallel on/off,
max_num_seqs, max_num_batched_tokens, speculative decoding (``--spec off,dspark:5:3.5``: K drafts, a forced
acceptance length A) and the CPU KV tier per DP rank (``--kv-tier 0,128``). Each axis defaults to the params'
value, so ``benchcamp plan --tp 1,2,4,8`` varies only the parallel layout. Every candidate gets the capacity
search (``benchcamp.planning.capacity``) in virtual time on the simulated engine (``benchcamp.sim.clock.virtual_point``; a
topology runs as ``benchcamp.sim.clock.fleet.Fleet``), and the plan prints, per service tier, the best
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
from typing import TYPE_CHECKING, Any

from benchcamp.commands.common import add_config_args
from benchcamp.planning import planner

if TYPE_CHECKING:
    from benchcamp.config import Config


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
        help="deployment shapes (benchcamp.topology): unified, replicas and/or xPyD, e.g. unified,replicas,1p1d: "
        "unified is one engine of every GPU (TP x DP); replicas is GPUs / TP independent engines of one TP group "
        "behind a session-affinity router (topology.unified.instances); xPyD is x prefill + y decode engines of "
        "GPUs / (x + y) GPUs each, NIXL between them, a session-affinity router; xPyD:P/D sizes the engines: P GPUs "
        "per prefill engine, D per decode engine, x * P + y * D = a --gpus count, e.g. 3p1d:8/48 on 72 GPUs "
        "(default: unified,replicas)",
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
    p.add_argument(
        "--jobs",
        type=int,
        help="candidates searched at once, one process each (default: the CPU count, at most 4; a 72-GPU "
        "candidate peaks near 4.5 GiB of memory)",
    )
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


def matrix(cfg: Config, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The configurations to search, as dotted config overrides: the candidate grid of the topology layer
    (``benchcamp.topology.candidates``) over the axes given, each defaulting to the params' value."""
    from benchcamp.errors import ProfileError
    from benchcamp.profiles import load_gpu
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


def run(args: argparse.Namespace) -> int:
    from benchcamp.campaign import strict_json
    from benchcamp.commands.common import config_from_args
    from benchcamp.config import load_config
    from benchcamp.planning.capacity import TierField, agents_speed_front, format_capacity
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
    from benchcamp.profiles import check_profile

    for gpu in dict.fromkeys(o["hardware.gpu"] for o in combos):  # a typo is an error, not a skipped configuration
        check_profile("gpus", "--gpu", gpu)
    workload = read_workload(args.workload) if args.workload else ensure_workload(base.workload)[0]
    out = Path(args.out) if args.out else Path("reports") / "plan" / base.campaign.name
    out.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    ctx_median = planner.median_prompt(workload)
    print(
        f"[plan] {len(combos)} configurations x {len(base.load.tiers)} tiers, workload {workload.name} "
        f"({len(workload.top_level())} sessions), virtual clock",
        flush=True,
    )
    configs: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    jobs = _jobs(args, len(combos))
    with tempfile.TemporaryDirectory(prefix="benchcamp-plan-") as tmp:
        rec_root = out / "records" if args.keep_records else Path(tmp)
        work: list[Work] = [
            (i, o, args.params, list(args.overrides), rec_root, ctx_median) for i, o in enumerate(combos, 1)
        ]
        if jobs > 1:
            print(f"[plan] {jobs} candidates at a time, one process each", flush=True)
        for i, entry in _searched(work, workload, jobs, tty and jobs == 1, len(combos)):
            configs.append(entry)
            cid = entry["id"]
            if entry["status"] == "searched":
                text = format_capacity(entry["capacity"]).split("\n", 1)[1]
                print(
                    f"[{i}/{len(combos)}] {cid} ({entry['search_s']:.1f} s, {time.perf_counter() - t_all:.0f} s "
                    f"so far)\n  {entry['topology']}\n{text}",
                    flush=True,
                )
            else:
                print(f"[{i}/{len(combos)}] {cid}: skipped: {entry['error']}", flush=True)
        order = {planner.config_id(o): k for k, o in enumerate(combos)}
        configs.sort(key=lambda c: order[c["id"]])  # plan.json lists the candidates in grid order
        target = None
        if getattr(args, "target", None):
            target = planner.target_check(configs, *_target(args.target))
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
                target["binds"] = planner.binding(
                    cfg, dict(cap, tiers=[tier]), ctx_median, rec_root / target["config"]
                ).get("target")

    best = planner.best_per_tier(configs)
    errors = planner.expected_errors(base, configs)  # GPU -> phase -> the validation set's error
    for b in [*best.values(), *([target] if target is not None and target.get("config") else [])]:
        b["gpu"] = planner.gpu_of(configs, b["config"])
        b["expected_error"] = {p: e.to_dict() for p, e in errors[b["gpu"]].items()}
    points = planner.probe_points(configs)
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
        "throughput_definition": planner.THROUGHPUT_DEFINITION,
        "target": target,
        "expected_error": {g: {p: e.to_dict() for p, e in by.items()} for g, by in errors.items()},
        "elapsed_s": round(time.perf_counter() - t_all, 2),
    }
    (out / "plan.json").write_text(json.dumps(strict_json(doc), indent=2))
    _plot(out / "plan.png", configs, best, front, base)
    print(planner.format_plan(best, front, base.load.tiers, tput_front, errors))
    if target is not None:
        print(planner.format_target(target, errors))
    print(f"[plan] wrote {out / 'plan.json'} and {out / 'plan.png'} ({doc['elapsed_s']:.1f} s)")
    return 0 if any(c["status"] == "searched" for c in configs) else 1


def _jobs(args: argparse.Namespace, n: int) -> int:
    import os

    from benchcamp.errors import ConfigError

    jobs = getattr(args, "jobs", None)
    if jobs is None:
        jobs = min(os.cpu_count() or 1, 4)
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give 1 or more candidates at a time, e.g. --jobs 2")
    return max(1, min(jobs, n))


# The workload a forked worker searches on: set before the pool forks, so no worker reads or unpickles it.
_WORKLOAD: Any = None


Work = tuple[int, dict[str, Any], Any, list[str], Path, int]  # _search_candidate's positional arguments


def _searched(work: list[Work], workload: Any, jobs: int, tty: bool, n: int):
    """(index, entry) for every candidate as its search finishes: in this process when ``jobs`` is 1, else in
    ``jobs`` forked processes (each candidate's simulation is independent and deterministic, so where it runs
    changes nothing in its records)."""
    global _WORKLOAD
    _WORKLOAD = workload
    if jobs == 1:
        for item in work:
            yield item[0], _search_candidate(*item, tty=tty, n=n)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(_search_candidate, *item, n=n): item[0] for item in work}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()


def _search_candidate(
    i: int,
    o: dict[str, Any],
    params: Any,
    overrides: list[str],
    rec_root: Path,
    ctx_median: int,
    tty: bool = False,
    n: int = 0,
) -> dict[str, Any]:
    """One candidate's capacity search and what binds it -> its plan.json entry (``status`` searched or skipped)."""
    from benchcamp.config import load_config

    cid = planner.config_id(o)
    entry: dict[str, Any] = {"id": cid, "overrides": o}
    t0 = time.perf_counter()

    def progress(p: Any) -> None:
        line = f"[{i}/{n} {cid}] probe c{p.level}: " + (
            f"{p.p90_user_tokens_per_s:.1f} tok/s P90, TTFT P90 {p.ttft_p90_s:.2f} s"
            if p.valid
            else "invalid: " + "; ".join(p.reasons)[:80]
        )
        print("\r\033[K" + line, end="", file=sys.stderr, flush=True)

    try:
        cfg = load_config(
            params,
            overrides + [f"{k}={json.dumps(v)}" for k, v in o.items()] + ["load.mode=capacity", "load.clock=virtual"],
        )
        entry["topology"] = planner.diagram_of(cfg)
        entry["capacity"] = planner.search_one(cfg, _WORKLOAD, rec_root / cid, progress if tty else None)
        entry["status"] = "searched"
        entry["binds"] = planner.binding(cfg, entry["capacity"], ctx_median, rec_root / cid)
    except ValueError as exc:  # does not fit, or a combination vLLM refuses (names the flag)
        entry["status"], entry["error"] = "skipped", str(exc).splitlines()[-1].strip()
    if tty:
        print("\r\033[K", end="", file=sys.stderr)
    entry["search_s"] = round(time.perf_counter() - t0, 2)
    return entry


def _target(text: str) -> tuple[float, float]:
    from benchcamp.errors import ConfigError

    try:
        tok, rate = (float(x) for x in text.split("@"))
    except ValueError:
        raise ConfigError(f"--target {text!r}: give TOKENS@RATE, e.g. --target 954000@196") from None
    return tok, rate


def _plot(
    path: Path, configs: list[dict[str, Any]], best: dict[str, dict[str, Any]], front: list[dict[str, Any]], base: Any
) -> None:
    from benchcamp.metrics import Metric
    from benchcamp.planning.capacity import TierField
    from benchcamp.report import plots

    series = [(c["id"], [p for p in planner.probe_points([c])]) for c in configs if c["status"] == "searched"]
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
