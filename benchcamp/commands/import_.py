"""`benchcamp import FILE...`: results another tool wrote, logged as tracked runs beside benchcamp's own.

Each FILE is llm-d's Benchmark Report (v0.2 / v0.2.1, JSON or YAML) or a peer's own result file that
``llmd-benchmark-report`` converts: AIPerf's ``profile_export_aiperf.json``, GuideLLM's JSON output, ``vllm bench
serve --save-result``'s JSON, inference-perf's stage summary. Each becomes an MLflow campaign run (a point per
benchmark in the file) with benchcamp's headline metrics, each with the definition the tool used, and the
comparability key the file states (benchcamp.interop.br_import, benchcamp.interop.track). What the file does not
state (often the GPUs and the engine) can be given with --model, --gpu, --gpus, --engine; without them the run is
logged as not comparable, with the reason. `benchcamp compare RUN_A RUN_B` then puts it beside any run.

Exit status: 0 every file imported; 2 a file is not one of these formats (nothing is logged for it).
"""

from __future__ import annotations

import argparse

from benchcamp.commands.common import add_config_args, check_tracking_reachable, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import", help="log another tool's results (Benchmark Report, AIPerf, GuideLLM, vllm bench serve) to MLflow"
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="a Benchmark Report or a peer's result file")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: tracking.mlflow_uri)")
    p.add_argument("--experiment", help="MLflow experiment (default: the campaign's, beside benchcamp's runs)")
    p.add_argument("--model", help="the served model, where the file does not state it")
    p.add_argument("--gpu", help="the GPU type (a GPU profile name, e.g. h200), where the file does not state it")
    p.add_argument("--gpus", type=int, help="the GPU count, where the file does not state it")
    p.add_argument("--engine", choices=("vllm", "simulated"), help="the engine kind, where the file does not state it")
    p.add_argument("--dry-run", action="store_true", help="read and convert only: print what would be logged")
    add_config_args(p)
    p.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    import json

    from benchcamp.errors import ConfigError
    from benchcamp.interop.br_import import read
    from benchcamp.interop.track import log_imported, summary_line

    if args.gpus is not None and args.gpus < 1:
        raise ConfigError(f"--gpus {args.gpus}: give the number of GPUs that served the run (at least 1)")
    stated = {"model": args.model, "gpu": args.gpu, "gpu_count": args.gpus, "engine_kind": args.engine}
    imported = [read(f, stated) for f in args.files]  # every file read before anything is logged
    if args.dry_run:
        for imp in imported:
            print(json.dumps(summary_line(imp) | {"summary": {p.label: p.summary for p in imp.points}}, indent=2))
        return 0
    cfg = config_from_args(args)
    uri = args.tracking_uri or cfg.tracking.mlflow_uri
    check_tracking_reachable(uri, args)
    experiment = args.experiment or cfg.experiment_name
    for imp in imported:
        run_id = log_imported(imp, uri, experiment)
        what = "comparable" if imp.comparable else f"not comparable: {imp.reason}"
        print(
            f"MLflow: run {run_id} ({imp.tool} {imp.tool_version}, {imp.source_format}, points "
            f"{', '.join(p.label for p in imp.points)}) in experiment {experiment!r}: {what}"
        )
    return 0
