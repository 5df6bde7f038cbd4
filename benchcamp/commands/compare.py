"""`benchcamp compare [RUN_ID]`: verdicts of a logged campaign against its baselines;
`benchcamp compare RUN_A RUN_B [--html PATH]`: two campaigns side by side.

A run is judged by its own logged config (its ``config.json`` artifact: the
comparability key, baselines and regression rules it ran with), whoever
triggered it; params.yaml and --set only pick the experiment when RUN_ID is
omitted. Nothing is written to MLflow unless --write-tags is given.

Exit status: 0 no regression, 3 a regression, 2 bad input (unknown run or
baseline, bad params) - for CI and Airflow. Side by side (two run ids): each run's
headline metrics, B / A and the verdicts logged with each (benchcamp.report.side_by_side);
it judges nothing again and writes nothing to MLflow; exit 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from benchcamp.commands.common import add_config_args, check_tracking_reachable, config_from_args

EXIT_REGRESSION = 3


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_id",
        nargs="?",
        metavar="RUN_ID",
        help="MLflow run id of a campaign (default: the latest run of the campaign's experiment)",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: tracking.mlflow_uri)")
    add_config_args(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare a logged campaign with its baselines; exit 3 on a regression")
    add_run_args(p)
    p.add_argument(
        "other_run_id",
        nargs="?",
        metavar="RUN_B",
        help="a second campaign's run id: both side by side (headline metrics, B / A, each run's logged verdicts)",
    )
    p.add_argument("--html", metavar="PATH", help="with RUN_B: also write the side-by-side view as an HTML page")
    p.add_argument(
        "--baseline",
        metavar="NAME",
        help="compare with this baseline only: a published name, 'history', or an MLflow run id",
    )
    p.add_argument(
        "--write-tags",
        action="store_true",
        help="tag the run with these verdicts (benchcamp.verdict.*); without it nothing is written to MLflow",
    )
    p.set_defaults(func=_compare)


def load_logged(args: argparse.Namespace, workdir):
    """(cfg, uri, tracked run, CampaignResult rebuilt from MLflow) for RUN_ID or the latest run; ``cfg`` is
    the run's own logged config (config.json), with ``uri`` as its tracking URI."""
    from benchcamp.campaign.result import to_campaign_result
    from benchcamp.tracking import get_run, latest_run
    from benchcamp.tracking.store import TrackingError

    cfg = config_from_args(args)
    uri = args.tracking_uri or cfg.tracking.mlflow_uri
    # a dead server: one line now, not "run not found" after minutes of retries
    check_tracking_reachable(uri, args)
    run = get_run(uri, args.run_id) if args.run_id else latest_run(uri, cfg.experiment_name)
    if run is None:  # only latest_run finds none; get_run raises
        raise TrackingError(
            f"no campaign run in experiment {cfg.experiment_name!r} at {uri}; run `benchcamp run` first or pass RUN_ID"
        )
    if run.tag("imported") == "true":  # benchcamp.interop.track: a file another tool wrote, no config to judge by
        raise TrackingError(
            f"run {run.run_id} is a {run.tag('imported_tool')} file `benchcamp import` logged: it has no campaign "
            f"config to judge; put it beside a run with `benchcamp compare RUN {run.run_id}`, or judge a run against "
            f"it with `benchcamp compare RUN --baseline {run.run_id}`"
        )
    campaign = to_campaign_result(run, workdir)
    own = campaign.config  # what the run measured: a form-triggered run's config is not params.yaml's
    return (
        own.model_copy(update={"tracking": own.tracking.model_copy(update={"mlflow_uri": uri})}),
        uri,
        run,
        campaign,
    )


def fail(msg: str) -> int:
    print(f"benchcamp: {msg}", file=sys.stderr)
    return 2


def _compare(args: argparse.Namespace) -> int:
    import tempfile

    if args.other_run_id:
        return _side_by_side(args)
    if args.html:
        return fail("--html: give two run ids (benchcamp compare RUN_A RUN_B --html PATH)")

    from benchcamp.report.flow import assess
    from benchcamp.tracking import log_verdicts
    from benchcamp.verdicts.compare import any_regression, format_table

    # A TrackingError / ConfigError reaches benchcamp.cli.main: message, exit 2.
    with tempfile.TemporaryDirectory(prefix="benchcamp-compare-") as d:
        cfg, uri, run, campaign = load_logged(args, d)
        verdicts, _, notes = assess(cfg, campaign, uri, args.baseline)
    print(f"run {run.run_id} ({run.execution_id}), headline point {run.headline_point or '-'}")
    for n in notes:
        print(f"note: {n}")
    if verdicts:
        print(format_table(verdicts))
    if args.write_tags:
        log_verdicts(uri, run.run_id, verdicts)
        print(f"tagged run {run.run_id} with {len(verdicts)} verdict(s)")
    if any_regression(verdicts):
        print("REGRESSION", file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def _side_by_side(args: argparse.Namespace) -> int:
    from benchcamp.report.side_by_side import format_text, side_by_side, write_html
    from benchcamp.tracking import get_run

    if args.baseline or args.write_tags:
        return fail("--baseline / --write-tags judge one run: give one RUN_ID (two run ids print them side by side)")
    uri = args.tracking_uri or config_from_args(args).tracking.mlflow_uri
    check_tracking_reachable(uri, args)
    view = side_by_side(get_run(uri, args.run_id), get_run(uri, args.other_run_id))
    print(format_text(view))
    if args.html:
        print(f"side by side: {write_html(view, args.html)}")
    return 0
