"""`benchcamp run`: the main job, in one process, on the settings in params.yaml.

Build or reuse the workload, provision and deploy the engine (the simulated
vLLM on this machine by default), run the sweep with live progress, tear down,
print the sweep summary and the headline, then track (MLflow), compare
(baselines) and report.
"""

from __future__ import annotations

import argparse
import sys

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a campaign end to end (the main job)")
    add_config_args(p)
    p.add_argument("--execution-id", help="campaign execution id (default: <campaign>-<UTC time>-<fingerprint>);"
                                          " re-using one updates its MLflow runs")
    p.add_argument("--reports", default="reports", help="report folder (default: %(default)s)")
    p.add_argument("--no-track", action="store_true", help="skip MLflow (compare against published baselines only)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit with status 3 when a verdict is 'regressed' (as `benchcamp compare` does)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from benchcamp.campaign import run_campaign
    from benchcamp.compare import format_table
    from benchcamp.deploy import EngineError
    from benchcamp.loadgen import EndpointError
    from benchcamp.secrets import redact
    from benchcamp.report.flow import finish
    from benchcamp.summary_table import headline_text, invalid_reasons, sweep_table

    cfg = config_from_args(args)
    print(f"[benchcamp] campaign {cfg.campaign.name} (fingerprint {cfg.fingerprint()}), "
          f"engine {cfg.engine.kind} {cfg.engine.model} on {cfg.hardware.gpu_count} x {cfg.hardware.gpu}",
          flush=True)
    try:
        result = run_campaign(cfg, execution_id=args.execution_id)
    except (EndpointError, EngineError) as exc:
        print(f"benchcamp run: {redact(str(exc))}", file=sys.stderr)
        return 3

    print()
    print(sweep_table(result.points) if result.points else "no sweep point was measured")
    reasons = invalid_reasons(result.points)
    if reasons:
        print(reasons)
    print()
    print(headline_text(result.headline, cfg.engine.kind, cfg.pricing.profile))
    if result.error:
        print(f"campaign error: {result.error}", file=sys.stderr)

    outcome = finish(cfg, result, out_dir=args.reports, track=not args.no_track)
    for note in outcome.notes:
        print(f"note: {note}")
    if outcome.verdicts:
        print()
        print(format_table(outcome.verdicts))
    print()
    if outcome.run_id:
        uri = redact(cfg.tracking.mlflow_uri)  # a password in the URI stays out of the console
        print(f"MLflow: run {outcome.run_id} in experiment {cfg.experiment_name!r} at {uri} "
              f"(UI: uv run mlflow ui --backend-store-uri {uri})")
    print(f"results: {result.results_dir}")
    if outcome.report:
        print(f"report: {outcome.report}")
    if result.error:
        return 1
    return 3 if (args.fail_on_regression and outcome.regressed) else 0
