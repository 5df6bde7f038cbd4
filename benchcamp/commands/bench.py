"""`benchcamp bench run`: the load sweep against an endpoint, or against an engine
started on this machine when no endpoint is given.

Writes ``<out>/<point>/records.parquet``, ``point.json`` and ``summary.json``,
and ``<out>/summary.json`` (every point, valid or not, with its reasons).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the load sweep against an endpoint")
    s = p.add_subparsers(dest="action", required=True)
    r = s.add_parser("run", help="run every level of the load section; start a local engine when no --endpoint")
    add_config_args(r)
    r.add_argument("--endpoint", help="base URL of an OpenAI-compatible server (default: provider.endpoint.url "
                                      "when provider.kind=endpoint, else a local engine is started)")
    r.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the endpoint's API key (default: provider.endpoint.api_key_env)")
    r.add_argument("--out", help="results directory (default: <results.store>/<campaign.name>)")
    r.add_argument("--quiet", action="store_true", help="no live progress line")
    r.set_defaults(func=_run)


def _fail(msg: str, code: int = 2) -> int:
    print(f"benchcamp bench: {msg}", file=sys.stderr)
    return code


def _json_default(o: Any) -> Any:
    return None if isinstance(o, float) and math.isnan(o) else str(o)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _run(args: argparse.Namespace) -> int:
    from benchcamp import secrets
    from benchcamp.loadgen import EndpointError, run_sweep
    from benchcamp.loadgen.local_engine import local_engine
    from benchcamp.loadgen.verdict import point_summary

    cfg = config_from_args(args)
    try:
        from benchcamp.workload import ensure_workload
        workload, _, digest = ensure_workload(cfg)
    except ImportError:
        from benchcamp.workload.model import read_workload
        workload = read_workload(cfg.workload.data)
        digest = workload.digest
    except FileNotFoundError as exc:
        return _fail(str(exc))
    try:
        from benchcamp.workload.stats import workload_stats
        theoretical = workload_stats(workload).get("theoretical_hit_rate")
    except ImportError:
        theoretical = None

    out = Path(args.out) if args.out else Path(cfg.results.store) / cfg.campaign.name
    out.mkdir(parents=True, exist_ok=True)
    endpoint = args.endpoint or (cfg.provider.endpoint.url if cfg.provider.kind == "endpoint" else "")
    progress = not args.quiet

    def sweep(url: str, key: str | None, engine: str) -> list[Any]:
        print(f"bench: {engine} at {url}; workload {workload.name} ({digest[:12]}); "
              f"{cfg.load.mode} levels {cfg.load.levels}", file=sys.stderr)
        return run_sweep(cfg, workload, url, key, out, progress=progress)

    try:
        if endpoint:
            key_env = args.api_key_env or cfg.provider.endpoint.api_key_env
            key = os.environ.get(key_env) or None
            secrets.register(key)
            results = sweep(endpoint, key, "endpoint")
            engine_kind = "external"
        else:
            with local_engine(cfg, out) as (url, key):
                results = sweep(url, key, f"local {cfg.engine.kind} engine")
            engine_kind = cfg.engine.kind
    except EndpointError as exc:
        return _fail(secrets.redact(str(exc)), 3)

    points = []
    for r in results:
        summary = _clean(point_summary(cfg, r, theoretical))
        (Path(r.records_path).parent / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default))
        points.append(SimpleNamespace(label=r.label, valid=bool(summary["valid"]), summary=summary,
                                      reasons=[x for x in summary["invalid_reasons"].split("; ") if x]))
    doc = {"campaign": cfg.campaign.name, "fingerprint": cfg.fingerprint(), "engine": engine_kind,
           "workload_digest": digest, "points": [p.summary for p in points]}
    (out / "summary.json").write_text(json.dumps(doc, indent=2, default=_json_default))
    try:
        from benchcamp.summary_table import invalid_reasons, sweep_table
        print(sweep_table(points))
        bad = invalid_reasons(points)
        if bad:
            print(bad)
    except ImportError:
        for p in points:
            print(p.label, "valid" if p.valid else f"INVALID: {'; '.join(p.reasons)}")
    print(f"results: {out}")
    return 0
