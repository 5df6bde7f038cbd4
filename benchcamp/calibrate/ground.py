"""`benchcamp calibrate --kernel-tables` (the command's body): ground a GPU profile on aiconfigurator-core's kernel tables.

IO and printing only: the rows come from benchcamp.calibrate.kernels, the fit from benchcamp.calibrate.kernel_fit.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path


def calibrate_kernels(args: argparse.Namespace) -> int:
    from benchcamp.calibrate.kernel_fit import COMM_CLASSES, COMPUTE_CLASSES, ground, grounded_figures
    from benchcamp.calibrate.kernels import SYSTEMS, load_rows, package_version
    from benchcamp.calibrate.write import check_name, ground_yaml
    from benchcamp.errors import ExitCode
    from benchcamp.profiles import load_gpu, profile_file

    system = args.kernel_system or SYSTEMS.get(args.gpu, "")
    if not system:
        print(
            f"benchcamp calibrate: --gpu {args.gpu} has no measured kernel tables; pass --kernel-system "
            f"(one of {', '.join(sorted(SYSTEMS.values()))})",
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    name = check_name(args.name or f"{args.gpu}-grounded")
    gpu = load_gpu(args.gpu)
    rows = load_rows(system, args.kernel_backend, args.kernel_version)
    reference = None
    ref_gpu = load_gpu(args.kernel_reference) if args.kernel_reference else None
    if ref_gpu and ref_gpu.name != gpu.name and SYSTEMS.get(ref_gpu.name):
        # rule 1 applies only where this GPU's datasheet peaks and bandwidth are all at least the reference's
        fields = ("bf16_tflops", "fp8_tflops", "hbm_gbps")
        if all(getattr(gpu, f) >= getattr(ref_gpu, f) for f in fields):
            reference = load_rows(SYSTEMS[ref_gpu.name], args.kernel_backend, args.kernel_version)
    # FP4 has no perf-model peak: reported against 2 x the FP8 peak (Blackwell's dense FP4 = 2 x FP8 on B200; an
    # assumption for B300/GB300, whose FP4 is higher), never written to a profile.
    peaks = {"bf16": gpu.bf16_tflops, "fp8": gpu.fp8_tflops, "fp4": 2 * gpu.fp8_tflops}
    res = ground(
        system,
        args.kernel_backend,
        rows,
        peaks,
        gpu.hbm_gbps,
        args.seed,
        args.max_rows,
        reference,
        args.kernel_reference,
    )
    tables = sorted(set(rows["table"]))
    print(
        f"{system} {args.kernel_backend}: {len(rows):,} measured rows from {len(tables)} tables (aiconfigurator-core {package_version()})"
    )
    print(
        f"{'class':18} {'factors':52} {'fit':>5} {'held':>5} {'err fit':>8} {'err held':>9} {'held<=15%':>9} {'outliers':>8}"
    )
    for c, f in res.fits.items():
        fac = " ".join(f"{k}={v:g}" for k, v in f.factors.items())
        print(
            f"{c:18} {fac:52} {f.fit_rows:>5} {f.held_rows:>5} {f.fit_error:>8.1%} {f.held_error:>9.1%} "
            f"{f.held_within_15:>9.0%} {f.outliers:>8}"
        )
    skipped = [c for c in (*COMPUTE_CLASSES, *COMM_CLASSES) if c not in res.fits]
    if skipped:
        print(f"not fitted (no rows, or no perf-model peak for the dtype): {', '.join(skipped)}")
    if len(res.outliers):
        print("\noutliers (never fitted), by rule:")
        rule = res.outliers["reason"].str.split(":").str[0]
        for cls, r in sorted(set(zip(res.outliers["op_class"], rule))):
            hit = res.outliers[(res.outliers["op_class"] == cls) & (rule == r)]
            ex = hit.iloc[0]
            print(f"  {cls:18} {len(hit):>6} x {r}; e.g. {ex['shape']}: {ex['reason'].split(': ', 1)[1]}")
    if args.outliers:
        cols = ["system", "backend", "op_class", "shape", "kernel", "measured_s", "reason", "table"]
        res.outliers[cols].to_csv(args.outliers, index=False)
        print(f"written: {args.outliers}")
    figures = grounded_figures(res.fits)
    print("\ngrounded figures:")
    for k, (v, why) in figures.items():
        print(f"  {k:24} {getattr(gpu, k):>8.4g} -> {v:.4g}   from {why}")
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    header = [
        f"Source: aiconfigurator-core {package_version()} (NVIDIA, Apache-2.0, PyPI) measured kernel tables, "
        f"{system}/*/{args.kernel_backend}/{args.kernel_version or 'newest'}; grounded {today} by "
        f"`benchcamp calibrate --gpu {args.gpu} --kernel-tables --seed {args.seed}`.",
        "Per operation class (fit on a seeded split of shapes, error on the held-back shapes: median |pred/meas - 1|,",
        "share within +-15%); MLA, MoE, FP4 and all-to-all are reported only (the perf model has no field of theirs):",
    ]
    for c, f in res.fits.items():
        fac = " ".join(f"{k}={v:g}" for k, v in f.factors.items())
        header.append(
            f"  {c}: {fac}; held back {f.held_error:.1%} ({f.held_within_15:.0%} within 15%), outliers {f.outliers}"
        )
    header.append(
        "Where each figure comes from: "
        + ", ".join(f"{k} = measured table fit ({why.split(' ')[0]})" for k, (_, why) in figures.items())
        + ";"
    )
    header.append("peaks (bf16/fp8_tflops), hbm_gbps, memory, power, host and RDMA figures: the datasheets below.")
    if args.json_out:
        from benchcamp.results.atomic import write_json

        doc = {
            "system": system,
            "backend": args.kernel_backend,
            "version": args.kernel_version,
            "seed": args.seed,
            "tables": tables,
            "fits": {c: f.__dict__ for c, f in res.fits.items()},
            "figures": {k: {"value": v, "from": why} for k, (v, why) in figures.items()},
            "outliers": int(len(res.outliers)),
        }
        write_json(args.json_out, doc, indent=2)
    if args.dry_run:
        return 0
    base = profile_file("gpus", args.gpu)
    assert base is not None  # load_gpu found it
    text = ground_yaml(base.read_text(), name, figures, header)
    path = Path(args.out) / "gpus" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    from benchcamp.results.atomic import write_text

    write_text(path, text)
    print(f"written: {path}\nselect it: BENCHCAMP_PROFILE_PATH={args.out} benchcamp engine simulate --gpu {name}")
    return 0
