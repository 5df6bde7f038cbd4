"""`benchcamp calibrate`: fit the simulator's hardware and engine factors to measured real runs.

Each measured sweep point (results folders and/or MLflow campaign runs) is replayed in virtual time with the
same engine flags, workload and load; the chosen factors (GPU profile: compute_efficiency, memory_efficiency,
step_overhead_ms; engine profile: seq_overhead_us, frontend_request_us, ...) are searched by a pattern search (log scale) to
minimise the mean |log(simulated / measured)| of throughput, TPOT and TTFT. The result is written as
``<out>/gpus/<name>.yaml`` (and ``<out>/engines/<name>.yaml`` when engine factors were fitted) with its provenance
in the header; put ``<out>`` on BENCHCAMP_PROFILE_PATH to select it by name (``engine serve/simulate --gpu NAME
--engine-profile NAME``; in a campaign or ``benchcamp plan``: hardware.gpu=NAME, engine.engine_profile=NAME).

With ``--kernel-tables`` the source is instead aiconfigurator-core's measured per-operation tables (GEMM by dtype
and m/n/k, attention and MLA, MoE, all-reduce, all-to-all on real GPUs; read offline from the pinned package): each of
the perf model's operation classes is fitted on one seeded split of shapes and scored on the held-back rest, outliers
are listed with their rule, and the grounded figures (compute/FP8/memory efficiency, link bandwidth and collective
latency) are written into the GPU profile with their provenance and held-back error (benchcamp/calibrate/kernel_fit.py).
"""

from __future__ import annotations

import argparse
import sys

from benchcamp.calibrate.fit import DEFAULT_FACTORS, FACTORS, METRICS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the simulator's GPU/engine factors to measured real runs; write a calibrated profile",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument(
        "--results",
        action="append",
        default=[],
        metavar="DIR",
        help="results store, campaign or execution folder (repeatable)",
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="MLflow campaign run id (repeatable; needs --tracking-uri)",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI for --run (e.g. sqlite:///mlflow.db)")
    p.add_argument("--points", help="only these point labels, comma-separated (e.g. c1,c4)")
    p.add_argument("--gpu", required=True, help="base GPU profile the runs' hardware starts from (e.g. cpu)")
    p.add_argument(
        "--engine-profile",
        default="",
        help="base engine profile (default: the GPU's, as engine.engine_profile: vllm-cpu for --gpu cpu, else vllm)",
    )
    p.add_argument("--model-profile", help="model profile (default: the one naming engine.model, else the config's)")
    p.add_argument(
        "--factors",
        default=",".join(DEFAULT_FACTORS),
        help=f"factors to fit, comma-separated (default: %(default)s; any of {', '.join(FACTORS)})",
    )
    p.add_argument("--metrics", default=",".join(METRICS), help="figures scored (default: %(default)s)")
    p.add_argument(
        "--ttft-weight",
        type=float,
        default=0.5,
        help="weight of TTFT in the score (default: %(default)s; it is the noisiest figure)",
    )
    p.add_argument(
        "--client-figures",
        action="store_true",
        help="score the client's median TPOT/TTFT even where the engine's /metrics histograms were kept",
    )
    p.add_argument(
        "--include-invalid",
        action="store_true",
        help="keep points the validity rules rejected (e.g. client lag on a small box)",
    )
    p.add_argument("--max-replays", type=int, default=400, help="budget of the search (default: %(default)s)")
    p.add_argument("--name", default="", help="name of the written profile (default: <gpu>-calibrated)")
    p.add_argument(
        "--out", default="profiles", help="folder for gpus/<name>.yaml, engines/<name>.yaml (default: %(default)s)"
    )
    p.add_argument("--json", dest="json_out", help="also write the fit (factors, errors per point) as JSON here")
    p.add_argument("--dry-run", action="store_true", help="fit and print, write no profile")
    k = p.add_argument_group("measured kernel tables (aiconfigurator-core, offline)")
    k.add_argument(
        "--kernel-tables",
        action="store_true",
        help="fit the GPU profile's per-operation factors to aiconfigurator-core's measured kernel tables",
    )
    k.add_argument("--kernel-system", default="", help="the tables' system (default: --gpu's, e.g. h200 -> h200_sxm)")
    k.add_argument(
        "--kernel-backend", default="vllm", help="the tables' backend: vllm, sglang, trtllm (default: %(default)s)"
    )
    k.add_argument(
        "--kernel-version",
        default="",
        help="the backend's version (default: the GEMM table's newest, for every operation measured at it)",
    )
    k.add_argument(
        "--kernel-reference", default="h200", help="rule 1's reference GPU for outliers (default: %(default)s)"
    )
    k.add_argument("--seed", type=int, default=0, help="seed of the fit/held-back split (default: %(default)s)")
    k.add_argument("--max-rows", type=int, default=3000, help="rows per class the fit samples (default: %(default)s)")
    k.add_argument("--outliers", help="also write the outlier rows (with their reason) as CSV here")
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    import warnings
    from importlib.metadata import PackageNotFoundError, version

    from benchcamp.calibrate.fit import Profiles, error_table, fit
    from benchcamp.calibrate.sources import CalibrateError, from_mlflow, from_results
    from benchcamp.calibrate.write import check_name, write_profiles
    from benchcamp.config import default_engine_profile
    from benchcamp.errors import ExitCode
    from benchcamp.profiles import load_engine, load_gpu
    from benchcamp.secrets.redaction import redact

    if args.kernel_tables:
        from benchcamp.calibrate.ground import calibrate_kernels

        return calibrate_kernels(args)
    name = check_name(args.name or f"{args.gpu}-calibrated")
    args.engine_profile = args.engine_profile or default_engine_profile(args.gpu)
    factors = [f.strip() for f in args.factors.split(",") if f.strip()]
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    bad = [f for f in factors if f not in FACTORS] + [m for m in metrics if m not in METRICS]
    if bad:
        print(
            f"benchcamp calibrate: unknown factor/metric {bad}; factors: {', '.join(FACTORS)}; "
            f"metrics: {', '.join(METRICS)}",
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    if not args.results and not args.run:
        print("benchcamp calibrate: nothing to fit: pass --results DIR and/or --run RUN_ID", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    if args.run and not args.tracking_uri:
        print("benchcamp calibrate: --run needs --tracking-uri", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    overrides = {"gpu": args.gpu, "engine_profile": args.engine_profile, "model_profile": args.model_profile}
    cache: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        points = [
            p
            for d in args.results
            for p in from_results(d, overrides, args.include_invalid, not args.client_figures, cache)
        ]
        points += [
            p for r in args.run for p in from_mlflow(args.tracking_uri, r, overrides, args.include_invalid, cache)
        ]
    for w in caught:
        print(f"note: {w.message}", file=sys.stderr)
    if args.points:
        keep = {s.strip() for s in args.points.split(",")}
        points = [p for p in points if p.label in keep]
    if not points:
        raise CalibrateError("no measured point left to fit (all skipped or filtered); see the notes above")
    base = Profiles(load_gpu(args.gpu), load_engine(args.engine_profile))
    print(
        f"calibrating {', '.join(factors)} on {len(points)} point(s): "
        + ", ".join(f"{p.label} ({'server' if p.server else 'client'} figures)" for p in points)
    )
    result = fit(
        points, base, factors, metrics, {"ttft": args.ttft_weight}, max_evaluations=args.max_replays, progress=print
    )
    print(
        f"\nfit error (mean |log(sim/measured)|): {result.score_start:.4f} -> {result.score:.4f} "
        f"({result.evaluations} replays)"
    )
    for f in factors:
        print(f"  {f:22} {result.start[f]:>10.4g} -> {result.fitted[f]:.4g}")
    print(f"\n{'point':>12} {'metric':10} {'measured':>12} {'simulated':>12} {'error':>8}")
    for label, m, a, b in result.rows:
        print(f"{label:>12} {m:10} {a:>12.5g} {b:>12.5g} {b / a - 1:>+8.1%}")
    s0 = points[0].settings
    try:
        ours = version("benchcamp")
    except PackageNotFoundError:
        ours = "?"
    info = {
        "benchcamp": ours,
        "command": redact(" ".join(["benchcamp", *sys.argv[1:]])),
        "base_gpu": args.gpu,
        "base_engine": args.engine_profile,
        "model": s0.profile_name,
        "engine": f"{s0.model} (engine.kind/version from the runs' configs)",
        "hardware": args.gpu,
        "points": [p.source for p in points],
        "server": all(p.server for p in points),
    }
    if args.json_out:
        doc = {
            **info,
            "name": name,
            "factors": factors,
            "start": result.start,
            "fitted": result.fitted,
            "score_start": result.score_start,
            "score": result.score,
            "evaluations": result.evaluations,
            "rows": [dict(zip(("point", "metric", "measured", "simulated"), r)) for r in result.rows],
            "errors": error_table(result.rows),
        }
        from benchcamp.results.atomic import write_json

        write_json(args.json_out, doc, indent=2)
    if args.dry_run:
        return 0
    for path in write_profiles(result, name, args.out, info):
        print(f"written: {path}")
    engine = any(FACTORS[f][0] == "engine" for f in factors)
    print(
        f"select it: BENCHCAMP_PROFILE_PATH={args.out} benchcamp engine simulate --gpu {name}"
        + (f" --engine-profile {name}" if engine else "")
        + f"\n  in a campaign or plan: BENCHCAMP_PROFILE_PATH={args.out} benchcamp run|plan --set hardware.gpu={name}"
        + f" --set engine.engine_profile={name if engine else args.engine_profile}"
    )
    return 0
