"""`benchcamp run`: the main job, in one process, on the settings in params.yaml.

The steps of the Airflow DAG (benchcamp.campaign.steps) in this process: build
or reuse the workload, provision and deploy the engine (the simulated vLLM on
this machine by default), sweep with live progress, tear down, summarize, then
track (MLflow), compare (baselines) and report. Results go to
``<results.store>/<campaign>/<execution id>/``; Ctrl-C or SIGTERM keep what was
measured and exit 130.
"""

from __future__ import annotations

import argparse
import sys

from benchcamp.commands.common import add_config_args, config_from_args
from benchcamp.errors import BenchcampError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a campaign end to end (the main job)")
    add_config_args(p)
    p.add_argument(
        "--execution-id",
        help="campaign execution id (default: <campaign>-<UTC time>Z-<random>);"
        " re-using one resumes it: measured points are kept, its MLflow runs updated",
    )
    p.add_argument("--reports", default="reports", help="report folder (default: %(default)s)")
    p.add_argument("--no-track", action="store_true", help="skip MLflow (compare against published baselines only)")
    p.add_argument(
        "--export-br",
        action="store_true",
        help="also write each point as llm-d's Benchmark Report v0.2.1 (as `benchcamp export --format llmd-br`): "
        "<execution>/benchmark_report/<point>.br.json, and the MLflow run's artifacts when tracked "
        "(sets tracking.benchmark_report=true)",
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit with status 3 when a verdict is 'regressed' (as `benchcamp compare` does)",
    )
    p.set_defaults(func=_run)


def print_campaign(result, cfg) -> None:
    """The sweep table, invalid points, headline and error of a campaign (run, bench, reproduce)."""

    from benchcamp.results.table import (
        agentx_notes,
        headline_text,
        invalid_reasons,
        replica_hit_table,
        steadiness_notes,
        sweep_table,
        trials_table,
    )
    from benchcamp.sim.fidelity import for_config

    errors = for_config(cfg)  # a simulated engine's figures carry the validation set's error
    print()
    print(sweep_table(result.points, errors) if result.points else "no sweep point was measured")
    for extra in (trials_table(result.points), replica_hit_table(result.points)):
        if extra:
            print(extra)
    reasons = invalid_reasons(result.points)
    if reasons:
        print(reasons)
    for notes in (steadiness_notes(result.points), agentx_notes(result.points)):
        if notes:
            print(notes)
    print()
    print(headline_text(result.headline, cfg.engine.kind, cfg.pricing.profile, cfg.provider.kind, errors))
    if result.error:  # "no valid point: c8: ..." already starts with its status: not said twice
        error = str(result.error)
        said = error if error.startswith(f"{result.status}:") else f"{result.status}: {error}"
        print(f"campaign {said}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    import json

    from benchcamp.campaign import judge, run_campaign, steps, target
    from benchcamp.campaign.handoff import Summary
    from benchcamp.errors import ExitCode
    from benchcamp.secrets.redaction import redact
    from benchcamp.verdicts.compare import Verdict, format_table

    if args.export_br:
        args.overrides = [*args.overrides, "tracking.benchmark_report=true"]
    cfg = config_from_args(args)
    if not args.no_track:
        from benchcamp.tracking import check_reachable

        check_reachable(cfg.tracking.mlflow_uri)  # a dead MLflow: one line now, not a traceback after the sweep
    print(
        f"[benchcamp] campaign {cfg.campaign.name} (fingerprint {cfg.fingerprint()}), "
        f"engine {cfg.engine.kind} {cfg.engine.model} on {cfg.hardware.gpu_count} x {cfg.hardware.gpu}",
        flush=True,
    )
    result = run_campaign(cfg, execution_id=args.execution_id)
    print_campaign(result, result.config)
    summary = Summary.from_dict({"status": result.status, "error": result.error})
    if result.interrupted:
        print(f"results: {result.results_dir}")
        return int(judge(summary, None)[0])

    store, layout = target(result.config, result.execution_id)
    run_id, not_tracked = None, None
    if not args.no_track:
        try:
            run_id = steps.track(result.config, store, layout)
        except Exception as exc:  # noqa: BLE001  (MLflow failed after measuring: keep the results, render the report)
            not_tracked = _one_line(exc)
    evaluation = steps.evaluate(result.config, store, layout, run_id, reports=args.reports, track=run_id is not None)
    notes = list(evaluation.notes)
    if not_tracked:
        notes.append(
            f"not tracked: {not_tracked}; the results are kept in {result.results_dir}: "
            f"log them later with `benchcamp log {result.results_dir}`"
        )
    for note in notes:
        print(f"note: {note}")
    verdicts = json.loads(store.get_text(layout.verdicts))
    if verdicts["verdicts"]:
        print()
        print(format_table([Verdict.from_dict(v) for v in verdicts["verdicts"]]))
    print()
    if run_id:
        uri = redact(cfg.tracking.mlflow_uri)  # a password in the URI stays out of the console
        print(
            f"MLflow: run {run_id} in experiment {cfg.experiment_name!r} at {uri} "
            f"(UI: uv run mlflow ui --backend-store-uri {uri})"
        )
    if cfg.tracking.benchmark_report:
        if run_id is None:  # untracked: written here, without a pointer to a run
            import tempfile
            from pathlib import Path

            with tempfile.TemporaryDirectory(prefix="benchcamp-br-") as d:
                steps.export_benchmark_reports(result, store, layout, Path(d), None)
        print(f"Benchmark Reports (llm-d v0.2.1): {store.url(layout.benchmark_reports)}")
    print(f"results: {result.results_dir}")
    print(f"report: {evaluation.report}")
    code, _ = judge(
        summary,
        [Verdict.from_dict(v) for v in verdicts["verdicts"]],
        fail_on_regression=args.fail_on_regression,
        trend=verdicts.get("trend"),
    )
    if not_tracked:
        return int(code if code != ExitCode.OK else ExitCode.FAILED)
    return int(code)


def _one_line(exc: Exception) -> str:
    """The first line of a tracking failure, secrets masked; the traceback goes to the debug log."""
    import logging

    from benchcamp.secrets.redaction import redact

    logging.getLogger(__name__).debug("tracking failed", exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return redact(first if isinstance(exc, BenchcampError) else f"{type(exc).__name__}: {first}")
