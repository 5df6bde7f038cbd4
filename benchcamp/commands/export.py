"""`benchcamp export RUN --format llmd-br [--out DIR]`: each point of a campaign as llm-d's Benchmark Report v0.2.1.

RUN is an execution folder (holding campaign.json, or a campaign folder: its latest execution), as `benchcamp log`
takes it, or an MLflow run id, as `benchcamp compare` takes it (its records are downloaded). Each point's report is
built and validated by ``llmd-benchmark-report``'s own models (benchcamp.interop.br_export says what goes where)
and written as ``<point>.br.json``: into ``<folder>/benchmark_report/`` for a folder, ``./benchmark-reports/
<execution id>/`` for a run id, or ``--out``. A report from a run id points back to that run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

FORMATS = ("llmd-br",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a campaign's points in another tool's format (llm-d's Benchmark Report)")
    p.add_argument("run", metavar="RUN", help="an execution folder (holds campaign.json) or an MLflow run id")
    p.add_argument("--format", required=True, choices=FORMATS, help="llmd-br: llm-d's Benchmark Report v0.2.1 (JSON)")
    p.add_argument("--out", metavar="DIR", help="where the files go (default: see above)")
    p.add_argument("--tracking-uri", help="with a run id: MLflow tracking URI (default: tracking.mlflow_uri)")
    p.add_argument("--params", default=None, help="with a run id: the params file naming tracking.mlflow_uri")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from benchcamp.interop.br_export import RunPointer, execution_of, write_reports

    folder = Path(args.run)
    if folder.is_dir():
        from benchcamp.commands.log import load_kept

        campaign = load_kept(folder)
        out = Path(args.out) if args.out else Path(campaign.results_dir) / "benchmark_report"
        files = write_reports(campaign.config, execution_of(campaign), campaign.points, out)
    else:
        from benchcamp.campaign.result import to_campaign_result
        from benchcamp.commands.common import check_tracking_reachable
        from benchcamp.config import DEFAULT_PARAMS, load_config
        from benchcamp.tracking import get_run

        uri = args.tracking_uri or load_config(args.params or DEFAULT_PARAMS, []).tracking.mlflow_uri
        check_tracking_reachable(uri, args)
        run = get_run(uri, args.run)
        with tempfile.TemporaryDirectory(prefix="benchcamp-export-") as d:
            campaign = to_campaign_result(run, d)
            out = Path(args.out) if args.out else Path("benchmark-reports") / campaign.execution_id
            files = write_reports(
                campaign.config, execution_of(campaign), campaign.points, out, RunPointer(uri, run.run_id)
            )
    if not files:
        print(f"benchcamp export: no point of {args.run} has records to export")
        return 1
    for f in files:
        print(f"Benchmark Report v0.2.1: {f}")
    return 0
