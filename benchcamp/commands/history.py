"""`benchcamp history [--campaign NAME] [--metric M ...] [--html PATH]`: each headline metric over nights,
per campaign lineage and point, as the nightly guard sees it: the noise band, the change points with the
night each began and the configuration diff across it, and tonight's verdict. ``--mlflow`` also (re)writes
each lineage's trend run, whose metrics MLflow's run view draws as lines.

Exit status: 0, or 2 on bad input (unknown metric, unreachable store)."""

from __future__ import annotations

import argparse
import sys

from benchcamp.commands.common import add_config_args, check_tracking_reachable, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="headline metrics over nights, change points and their config diff")
    p.add_argument("--campaign", metavar="NAME", help="one campaign (default: campaign.name; 'all' for every one)")
    p.add_argument("--metric", action="append", metavar="METRIC", help="a headline metric (repeatable; default: all)")
    p.add_argument("--html", metavar="PATH", help="also write the trend page (inline SVG charts) here")
    p.add_argument("--mlflow", action="store_true", help="also log each lineage's series to its MLflow trend run")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: tracking.mlflow_uri)")
    add_config_args(p)
    p.set_defaults(func=_history)


def _history(args: argparse.Namespace) -> int:
    from benchcamp.metrics import HEADLINE
    from benchcamp.report.trend import chart, write_html
    from benchcamp.tracking.trend import lineages, log_trend
    from benchcamp.verdicts.compare import guard_rule

    cfg = config_from_args(args)
    metrics = args.metric or list(HEADLINE)
    unknown = [m for m in metrics if m not in HEADLINE]
    if unknown:
        print(
            f"benchcamp: --metric {unknown[0]}: not a headline metric; use one of {', '.join(HEADLINE)}",
            file=sys.stderr,
        )
        return 2
    uri = args.tracking_uri or cfg.tracking.mlflow_uri
    check_tracking_reachable(uri, args)
    campaign = None if args.campaign == "all" else (args.campaign or cfg.campaign.name)
    found = lineages(uri, campaign)
    if not found:
        print(f"no valid campaign run{f' of {campaign!r}' if campaign else ''} with a named point in {uri}")
    charts = []
    for lin in found:
        print(f"\n{lin.label}: {len(lin.runs)} nights")
        for m in metrics:
            c = chart(lin.label, m, lin.series(m), guard_rule(cfg.regression, m))
            if not c.nights:
                continue
            charts.append(c)
            fmt = HEADLINE[m].fmt
            values = " ".join(fmt.format(n.figure) for n in c.nights[-12:])
            print(f"  {m}: {values}")
            print(f"    tonight: {c.verdict.status}: {c.verdict.reason}")
            for cp in c.verdict.change_points:
                diff = ", ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in cp.diff.items()) or "no config change"
                print(f"    change point {cp.night}: {cp.delta_rel:+.1%} (p={cp.pvalue:.2g}); {diff}")
        if args.mlflow:
            print(f"  trend run: {log_trend(uri, lin, metrics)}")
    if args.html:
        title = f"benchcamp history: {campaign or 'all campaigns'}"
        print(f"trend: {write_html(title, charts, args.html)}")
    return 0
