"""`benchcamp log RESULTS_DIR`: log a kept execution folder to MLflow after the fact.

For a run whose tracking failed after measuring (MLflow down, `--no-track`):
the folder's campaign.json and point records become the same parent and child
runs `benchcamp run` would have logged, compared with their baselines, with the
report attached. Idempotent: the runs are found by execution id, so logging a
folder again updates them instead of adding new ones.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchcamp.commands.common import add_set_arg, check_tracking_reachable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "log",
        help="log a kept results folder (campaign.json + points) to MLflow; logging it again updates the same runs",
    )
    p.add_argument("results", metavar="RESULTS_DIR", help="the execution's folder (holds campaign.json)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: the campaign's tracking.mlflow_uri)")
    p.add_argument(
        "--params", help="take the tracking settings (tracking.*) from this params file instead of the campaign's own"
    )
    add_set_arg(p, "override a tracking setting, e.g. --set tracking.experiment=nightly")
    p.add_argument("--reports", metavar="DIR", help="also keep the rendered report here (default: only in MLflow)")
    p.set_defaults(func=_log)


def load_kept(results_dir: str | Path):
    """The CampaignResult of a kept folder, its records read from the folder itself
    (campaign.json holds the paths of the run, relative to where it ran)."""
    from benchcamp.campaign import CampaignResult

    here = Path(results_dir)
    campaign = CampaignResult.load(here)
    for p in campaign.points:
        local = here / p.label / "records.parquet"
        if local.exists():
            p.records_path = local
    return campaign


def _log(args: argparse.Namespace) -> int:
    from benchcamp.config import ConfigError, apply_overrides, from_dict, read_params
    from benchcamp.report.flow import finish

    campaign = load_kept(args.results)
    cfg = campaign.config
    if args.params or args.overrides:
        if args.params and not Path(args.params).is_file():
            raise ConfigError(f"--params {args.params}: no such file; give an existing params file or leave it out")
        base = read_params(args.params) if args.params else cfg.to_dict()
        data = apply_overrides(base, args.overrides) if args.overrides else base
        cfg = cfg.model_copy(update={"tracking": from_dict(data, args.params or "--set").tracking})
    if args.tracking_uri:
        cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"mlflow_uri": args.tracking_uri})})
    campaign.config = cfg
    check_tracking_reachable(cfg.tracking.mlflow_uri, args)
    with tempfile.TemporaryDirectory(prefix="benchcamp-log-") as d:
        outcome = finish(cfg, campaign, out_dir=args.reports or d, track=True)
    if outcome.tracking_error:
        print(f"benchcamp log: not tracked: {outcome.tracking_error}", file=sys.stderr)
        return 1
    for note in outcome.notes:
        print(f"note: {note}")
    print(
        f"MLflow: run {outcome.run_id} ({campaign.execution_id}) in experiment {cfg.experiment_name!r} "
        f"at {cfg.tracking.mlflow_uri}"
    )
    if args.reports:
        print(f"report: {outcome.report}")
    return 0
