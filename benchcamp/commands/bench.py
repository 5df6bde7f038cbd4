"""`benchcamp bench run`: the load sweep of a campaign, without tracking or report.

The same steps as `benchcamp run` (benchcamp.campaign): against ``--endpoint``
(provider ``endpoint``), or an engine started on this machine. Writes
``<out>/points/<point>/{records.parquet, point.json, summary.json}`` and
``<out>/summary.json`` and ``campaign.json`` (every point, valid or not, with
its reasons). ``--out DIR`` makes DIR the execution's folder (the DVC stage
``bench``); without it, ``<results.store>/<campaign>/<execution id>/``. ``--headline-out`` and
``--outcome-out`` write the headline figures alone (the stage's metrics file) and how the execution ended.
"""

from __future__ import annotations

import argparse
import sys

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the load sweep against an endpoint")
    s = p.add_subparsers(dest="action", required=True)
    r = s.add_parser("run", help="run every level of the load section; start a local engine when no --endpoint")
    add_config_args(r)
    r.add_argument(
        "--endpoint",
        help="base URL of an OpenAI-compatible server (sets provider.kind=endpoint; default: the provider in params)",
    )
    r.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the endpoint's API key (default: provider.endpoint.api_key_env)",
    )
    r.add_argument("--out", help="this execution's results folder (default: <results.store>/<campaign>/<execution id>)")
    r.add_argument("--execution-id", help="campaign execution id (default: <campaign>-<UTC time>Z-<random>)")
    r.add_argument(
        "--summary-out",
        metavar="PATH",
        help="also write the campaign summary here (the DVC stage's metrics file, outside its outs)",
    )
    r.add_argument(
        "--headline-out",
        metavar="PATH",
        help="also write the headline alone here (the DVC stage's metrics file: what `dvc exp show` leads with)",
    )
    r.add_argument(
        "--outcome-out",
        metavar="PATH",
        help="also write how it ended here: status, headline point, valid points (beside the DVC stage's metrics)",
    )
    r.add_argument(
        "--record-invalid",
        action="store_true",
        help="exit 0 when every point was measured and none is valid (status 'no valid point'), so a DVC stage "
        "records the experiment (null headline, its outcome) instead of failing with its outs unrecorded",
    )
    r.add_argument("--quiet", action="store_true", help="no live progress line")
    r.set_defaults(func=_run)


def bench_overrides(args: argparse.Namespace) -> list[str]:
    extra = []
    if args.endpoint:
        extra += ["provider.kind=endpoint", f"provider.endpoint.url={args.endpoint}"]
    if args.api_key_env:
        extra.append(f"provider.endpoint.api_key_env={args.api_key_env}")
    return extra


def _run(args: argparse.Namespace) -> int:
    from benchcamp.campaign import Status, judge, run_campaign
    from benchcamp.campaign.handoff import Summary
    from benchcamp.campaign.result import headline_doc, outcome_doc
    from benchcamp.commands.run import print_campaign
    from benchcamp.results import atomic

    args.overrides = list(args.overrides) + bench_overrides(args)
    cfg = config_from_args(args)
    if cfg.provider.kind == "endpoint" and cfg.engine.kind == "simulated":
        print(
            "benchcamp bench run: engine.kind=simulated (the default) for an endpoint: its results are tagged "
            "simulated and never compared with real-hardware baselines; say what runs there with "
            "--set engine.kind=vllm (and engine.version, hardware.*)",
            file=sys.stderr,
        )
    result = run_campaign(cfg, execution_id=args.execution_id, progress=not args.quiet, results_dir=args.out)
    print_campaign(result, result.config)
    print(f"results: {result.results_dir}")
    if args.summary_out:
        atomic.write_bytes(args.summary_out, (result.results_dir / "summary.json").read_bytes())
    # in the headline's order, not sorted: dvc shows the columns in the file's order
    for path, doc in ((args.headline_out, headline_doc), (args.outcome_out, outcome_doc)):
        if path:
            atomic.write_json(path, doc(result), sort_keys=False)
    if args.record_invalid and result.status == Status.NO_VALID_POINT:
        return 0
    return int(judge(Summary.from_dict({"status": result.status, "error": result.error}), None)[0])
