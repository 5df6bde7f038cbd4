"""`benchcamp bench run`: the load sweep of a campaign, without tracking or report.

The same steps as `benchcamp run` (benchcamp.campaign.run_campaign): against
``--endpoint`` (provider ``endpoint``), or an engine started on this machine.
Writes ``<out>/<point>/records.parquet``, ``point.json`` and ``summary.json``,
and ``<out>/summary.json`` and ``campaign.json`` (every point, valid or not,
with its reasons). It is the DVC stage ``bench``.
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
    r.add_argument("--endpoint", help="base URL of an OpenAI-compatible server (sets provider.kind=endpoint; "
                                      "default: the provider in params)")
    r.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the endpoint's API key (default: provider.endpoint.api_key_env)")
    r.add_argument("--out", help="results directory (default: <results.store>/<campaign.name>)")
    r.add_argument("--execution-id", help="campaign execution id (default: <campaign>-<UTC time>-<fingerprint>)")
    r.add_argument("--summary-out", metavar="PATH",
                   help="also write the campaign summary here (the DVC stage's metrics file, outside its outs)")
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
    from benchcamp.campaign import run_campaign
    from benchcamp.deploy import EngineError
    from benchcamp.loadgen import EndpointError
    from benchcamp.secrets import redact
    from benchcamp.summary_table import headline_text, invalid_reasons, sweep_table

    args.overrides = list(args.overrides) + bench_overrides(args)
    cfg = config_from_args(args)
    try:
        result = run_campaign(cfg, execution_id=args.execution_id, progress=not args.quiet,
                              results_dir=args.out)
    except (EndpointError, EngineError) as exc:
        print(f"benchcamp bench: {redact(str(exc))}", file=sys.stderr)
        return 3
    print(sweep_table(result.points) if result.points else "no sweep point was measured")
    bad = invalid_reasons(result.points)
    if bad:
        print(bad)
    print(headline_text(result.headline, cfg.engine.kind, cfg.pricing.profile))
    print(f"results: {result.results_dir}")
    if args.summary_out:
        import shutil
        shutil.copyfile(result.results_dir / "summary.json", args.summary_out)
    if result.error:
        print(f"benchcamp bench: {result.error}", file=sys.stderr)
        return 1
    return 0
