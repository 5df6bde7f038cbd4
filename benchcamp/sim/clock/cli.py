"""``benchcamp engine simulate``: the virtual clock (``benchcamp.sim.clock.simulate``) from the command line, its summary
and its records."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pandas as pd

    from benchcamp.config import Config
    from benchcamp.sim.engine.settings import EngineSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The simulation's own flags; the caller adds the config ones (--params, --set)."""
    p.add_argument("--workload", help="workload Parquet file (default: workload.data from the params)")
    p.add_argument("--mode", choices=["closed", "open", "trace"], help="default: load.mode")
    p.add_argument(
        "--level",
        type=float,
        help="closed: sessions; open: sessions/s; trace: time scale (default: the first of load.levels)",
    )
    p.add_argument("--warmup-s", type=float, help="default: load.warmup_s")
    p.add_argument("--duration-s", type=float, help="default: load.duration_s")
    p.add_argument("--drain-s", type=float, help="default: load.drain_s")
    p.add_argument("--seed", type=int, help="default: load.seed")
    p.add_argument("--out", help="write the records here (Parquet)")
    p.add_argument("--gpu", help="GPU profile, overriding hardware.gpu (e.g. cpu, or a calibrated user profile)")
    p.add_argument("--model-profile", help="model profile, overriding engine.model_profile (e.g. tiny-llama)")
    p.add_argument("--engine-profile", help="engine profile (default vllm; vllm-cpu for vLLM's CPU build)")


def run_from_args(args: argparse.Namespace, cfg: Config) -> int:
    """Run ``args`` (from :func:`add_arguments`) on the resolved config ``cfg``."""
    from benchcamp.results.records import write_records
    from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate
    from benchcamp.sim.engine.frontend import prompt_kind
    from benchcamp.sim.engine.settings import EngineSettings
    from benchcamp.workload.model import read_workload

    wl = read_workload(args.workload or cfg.workload.data)
    picked = {"gpu": args.gpu, "model_profile": args.model_profile, "engine_profile": args.engine_profile}
    topology = per_role = None
    if cfg.topology is not None:  # the topology's engines (benchcamp.sim.clock.fleet); --gpu etc. apply to every role
        from dataclasses import replace

        from benchcamp.sim.clock.fleet import simulation_plan

        settings, topology, per_role, gpus = simulation_plan(cfg)
        chosen = {k: v for k, v in picked.items() if v}
        settings = replace(settings, **chosen, num_gpus=gpus if topology is not None else settings.num_gpus)
        if per_role:
            per_role = {k: replace(v, **chosen).validate() for k, v in per_role.items()}
    else:
        settings = EngineSettings.from_config(cfg, **{k: v for k, v in picked.items() if v}).validate()
    ld = cfg.load
    pick = lambda v, d: d if v is None else v  # noqa: E731
    mode, level = pick(args.mode, ld.mode), pick(args.level, ld.levels[0])
    df = simulate(
        wl,
        settings,
        SimLoad(
            mode=mode,
            level=level,
            warmup_s=pick(args.warmup_s, ld.warmup_s),
            duration_s=pick(args.duration_s, ld.duration_s if ld.agentx is None else ld.agentx.duration_s),
            drain_s=pick(args.drain_s, ld.drain_s),
            seed=pick(args.seed, ld.seed),
            point=f"{mode[0]}{level:g}",
            max_requests=ld.max_requests,
            arrival=ld.arrival,
            gamma_shape=ld.gamma_shape,
            # the closed loop's lane rules, as a sweep point runs them (PointSpec.lane_rules)
            agentx=ld.agentx.model_dump() if ld.agentx is not None else ld.steady.replay_rules(),
            session_affinity=bool(ld.session_header),
            prompt=prompt_kind(ld.api),  # what a benchcamp client sends for load.api (token ids for completions)
        ),
        SimRun(topology=topology, role_settings=per_role),
    )
    print(summary_text(df, settings))
    if args.out:
        write_records(records_rows(df), args.out)
        print(f"records: {args.out}")
    return 0


def records_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> rows for ``benchcamp.results.records.write_records`` (missing strings as None)."""
    # cast: pandas types record keys as Hashable; the records schema's columns are strings
    rows = cast("list[dict[str, Any]]", df.to_dict("records"))
    for r in rows:
        for k in ("parent", "error"):
            if not isinstance(r[k], str):
                r[k] = None
    return rows


def summary_text(df: pd.DataFrame, settings: EngineSettings) -> str:
    a = df.attrs
    w0, w1 = a["window"]
    ok = df[(df.status == 200) & (df.sent_s >= w0) & (df.sent_s < w1)]
    span = max(w1 - w0, 1e-9)
    tokens = ok.prompt_tokens.sum() + ok.completion_tokens.sum()
    ttft = (ok.first_token_s - ok.sent_s).median() if len(ok) else math.nan
    c = a["server_counters"]
    queries = c["prefix_cache_queries_total"]
    hit = c["prefix_cache_hits_total"] / queries if queries else 0
    cpu = (
        f" + CPU tier {c['external_prefix_cache_hits_total'] / queries:.1%}"
        if settings.kv_offloading_size and queries
        else ""
    )
    return "\n".join(
        [
            f"simulated {a['simulated_s']:.1f} s in {a['wall_s']:.2f} s wall ({a['simulated_s'] / max(a['wall_s'], 1e-9):.0f}x), "
            f"{a['steps']} steps, {len(df)} requests ({(df.status != 200).sum()} failed)",
            (
                f"{settings.name} on {a['deployment']['topology']} x {settings.gpu}"
                if "deployment" in a
                else f"{settings.name} on {settings.gpus} x {settings.gpu} (tp={settings.tensor_parallel_size}, "
                f"dp={settings.data_parallel_size}, ep={settings.enable_expert_parallel})"
            ),
            f"window [{w0:g}, {w1:g}) s: {len(ok)} requests, {tokens / span / settings.gpus:,.0f} tokens/s/GPU, "
            f"median TTFT {ttft:.3f} s, server prefix-cache hit rate {hit:.1%}{cpu}, "
            f"preemptions {c['num_preemptions_total']:.0f}",
        ]
    )
