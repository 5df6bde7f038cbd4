"""`benchcamp reproduce RUN_ID`: run a logged campaign again, from its logged
resolved config, on the same workload (same digest), then track, compare and
report like `benchcamp run`."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="re-run a logged campaign from its logged config and workload digest")
    p.add_argument("run_id", metavar="RUN_ID", help="MLflow run id of the campaign to reproduce")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: tracking.mlflow_uri of --params)")
    p.add_argument("--params", default="params.yaml", help="only for its tracking.mlflow_uri (default: %(default)s)")
    p.add_argument("--out", default="reports", help="reports directory (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="check config and workload digest, run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_reproduce)


def workload_mismatch(logged: str, current: str, cfg) -> str:
    return (
        f"workload digest mismatch: the run used {logged[:16]}..., {cfg.workload.data} is {current[:16]}...; "
        f"a reproduction needs the same workload. Get it with `git checkout <the run's commit> -- "
        f"{cfg.workload.spec} && dvc checkout {cfg.workload.data}` (or `dvc pull`), or rebuild it from the "
        f"logged spec and seed: `benchcamp workload build` with the run's workload spec"
    )


def _reproduce(args: argparse.Namespace) -> int:
    from benchcamp.commands.common import check_tracking_reachable
    from benchcamp.commands.compare import fail
    from benchcamp.config import ConfigError, from_dict, load_config
    from benchcamp.tracking import get_run
    from benchcamp.tracking.store import TrackingError

    try:
        uri = args.tracking_uri or load_config(args.params).tracking.mlflow_uri
        check_tracking_reachable(uri, args)  # a dead server: one line, not "run not found" after MLflow's retries
        run = get_run(uri, args.run_id)
        data = run.config()
        data.setdefault("tracking", {})["mlflow_uri"] = uri
        cfg = from_dict(data, f"config.json of run {run.run_id}")
    except (TrackingError, ConfigError) as exc:
        return fail(str(exc))
    logged = run.tag("workload_digest")
    try:
        from benchcamp.workload import ensure_workload

        _, path, current = ensure_workload(cfg.workload)
    except (FileNotFoundError, ValueError) as exc:
        return fail(f"cannot get the workload of run {run.run_id}: {exc}")
    if current != logged:
        return fail(workload_mismatch(logged, current, cfg))
    print(f"reproducing {run.execution_id} (fingerprint {cfg.fingerprint()}, workload {current[:12]} at {path})")
    if args.dry_run:
        return 0

    from benchcamp.campaign import judge, run_campaign
    from benchcamp.campaign.handoff import Summary
    from benchcamp.report.flow import finish
    from benchcamp.verdicts.compare import format_table

    campaign = run_campaign(cfg, progress=not args.quiet)
    if campaign.interrupted:
        return int(judge(Summary.from_dict({"status": campaign.status}), None)[0])
    outcome = finish(cfg, campaign, args.out)
    print(f"MLflow run {outcome.run_id}; report {outcome.report}")
    if outcome.verdicts:
        print(format_table(outcome.verdicts))
    if campaign.error:
        print(f"benchcamp: campaign {campaign.status}: {campaign.error}", file=sys.stderr)
    return int(judge(Summary.from_dict({"status": campaign.status, "error": campaign.error}), outcome.verdicts)[0])
