"""`benchcamp report [RUN_ID]`: render a campaign's report, from MLflow (a logged
run) or, with ``--results DIR``, from the campaign files a run left there
(the DVC stage ``report``; published baselines only, no MLflow needed)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from benchcamp.commands.compare import add_run_args

    p = sub.add_parser("report", help="render the HTML report of a campaign (from MLflow or a results folder)")
    add_run_args(p)
    p.add_argument(
        "--results",
        metavar="DIR",
        help="render from DIR/campaign.json (written by `benchcamp run` / `bench run`) instead of MLflow",
    )
    p.add_argument("--baseline", metavar="NAME", help="show this baseline only (published name, 'history', run id)")
    p.add_argument("--out", default="reports", help="reports directory (default: %(default)s)")
    p.add_argument("--no-log", action="store_true", help="do not upload the report to the MLflow run")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    import tempfile

    from benchcamp.commands.compare import load_logged
    from benchcamp.report.flow import assess
    from benchcamp.report.render import render
    from benchcamp.tracking import log_report

    # FileNotFoundError / TrackingError / ConfigError reach benchcamp.cli.main: message, exit 2.
    if args.results:
        from benchcamp.campaign import CampaignResult

        campaign = CampaignResult.load(args.results)
        verdicts, baselines, _ = assess(campaign.config, campaign, None, args.baseline)
        print(f"report: {render(campaign, verdicts, baselines, args.out)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="benchcamp-report-") as d:
        cfg, uri, run, campaign = load_logged(args, d)
        verdicts, baselines, _ = assess(cfg, campaign, uri, args.baseline)
        index = render(campaign, verdicts, baselines, args.out, run_id=run.run_id)
    if not args.no_log:
        log_report(uri, run.run_id, index.parent)
    print(f"report: {index}")
    return 0
