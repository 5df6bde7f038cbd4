"""`benchcamp workload build | stats | import-mooncake | import-agentx | import-agentperf`."""

from __future__ import annotations

import argparse
import json
import sys

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workload", help="build, import and inspect workloads")
    s = p.add_subparsers(dest="action", required=True)

    b = s.add_parser("build", help="generate the workload file from its spec (default: params' workload section)")
    add_config_args(b)
    b.add_argument("--spec", help="spec YAML or Mooncake .jsonl (default: workload.spec)")
    b.add_argument("--out", help="output Parquet (default: workload.data)")
    b.add_argument("--seed", type=int, help="override the spec's seed")
    b.set_defaults(func=_build)

    st = s.add_parser("stats", help="statistics of a workload file, incl. the theoretical prefix-cache hit rate")
    st.add_argument("path", help="workload Parquet file")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="cache block size for the hit rate (must divide the workload's; default: the workload's)",
    )
    st.set_defaults(func=_stats)

    m = s.add_parser("import-mooncake", help="convert a Mooncake JSONL trace into a workload file")
    m.add_argument("trace", help="Mooncake trace (.jsonl)")
    m.add_argument("--out", required=True, help="output Parquet path")
    m.add_argument("--name", help="workload name (default: the trace file's stem)")
    m.set_defaults(func=_import)

    a = s.add_parser(
        "import-agentperf",
        help="convert an AA-AgentPerf replay (agentperf-local's package data) into a workload file",
    )
    a.add_argument(
        "replay",
        nargs="?",
        default="agentperf-default-v1",
        help="replay name or folder (default: agentperf-default-v1)",
    )
    a.add_argument("--out", required=True, help="output Parquet path")
    a.add_argument(
        "--from",
        dest="folder",
        help="folder holding the replays (default: the installed agentperf_local package's, "
        "else ~/.cache/benchcamp/agentperf-local from `make agentperf-data`)",
    )
    a.add_argument("--name", help="workload name (default: the replay's)")
    a.set_defaults(func=_import_agentperf)

    x = s.add_parser(
        "import-agentx", help="convert SemiAnalysis AgentX (Weka) trace JSON (a file or a folder) into a workload file"
    )
    x.add_argument("trace", help="AgentX trace .json (one trace, or a list) or a folder of them")
    x.add_argument("--out", required=True, help="output Parquet path")
    x.add_argument("--name", help="workload name (default: the trace file's or folder's stem)")
    x.set_defaults(func=_import, reader="agentx")


def _fail(msg: str) -> int:
    print(f"benchcamp workload: {msg}", file=sys.stderr)
    return 2


def _build(args: argparse.Namespace) -> int:
    from benchcamp.workload import build_workload, sidecar_path
    from benchcamp.workload.generator import SpecError
    from benchcamp.workload.mooncake import TraceError

    cfg = config_from_args(args)
    spec, out = args.spec or cfg.workload.spec, args.out or cfg.workload.data
    try:
        w, digest, stats = build_workload(spec, out, args.seed)
    except (SpecError, TraceError, FileNotFoundError, ValueError) as exc:
        return _fail(str(exc))
    print(
        f"wrote {out} ({stats['sessions']} sessions, {stats['requests']} requests, "
        f"theoretical hit rate {stats['theoretical_hit_rate']:.1%}) and {sidecar_path(out)}"
    )
    print(f"digest {digest}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from benchcamp.workload import read_workload
    from benchcamp.workload.stats import format_stats, workload_stats

    try:
        w = read_workload(args.path)
        stats = dict(workload_stats(w, args.block_size), digest=w.digest)
    except (FileNotFoundError, ValueError) as exc:
        return _fail(str(exc))
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats), end="\n" if args.json else "")
    return 0


def _import(args: argparse.Namespace) -> int:
    from benchcamp.workload import write_sidecar
    from benchcamp.workload.agentx.traces import read_agentx
    from benchcamp.workload.model import write_workload
    from benchcamp.workload.mooncake import TraceError, read_mooncake
    from benchcamp.workload.stats import workload_stats

    read = read_agentx if getattr(args, "reader", "mooncake") == "agentx" else read_mooncake
    try:
        w = read(args.trace, name=args.name)
    except (TraceError, FileNotFoundError, UnicodeDecodeError) as exc:
        return _fail(f"{exc}; nothing was written")
    digest = write_workload(w, args.out)
    stats = workload_stats(w)
    write_sidecar(args.out, w, digest, stats, spec=str(args.trace))
    print(
        f"wrote {args.out} ({stats['requests']} requests, theoretical hit rate "
        f"{stats['theoretical_hit_rate']:.1%}); digest {digest}"
    )
    return 0


def _import_agentperf(args: argparse.Namespace) -> int:
    from benchcamp.workload import write_sidecar
    from benchcamp.workload.agentperf import read_agentperf
    from benchcamp.workload.model import write_workload
    from benchcamp.workload.mooncake import TraceError
    from benchcamp.workload.stats import workload_stats

    try:
        w = read_agentperf(args.replay, args.folder)
    except (TraceError, FileNotFoundError, UnicodeDecodeError) as exc:
        return _fail(f"{exc}; nothing was written")
    if args.name:
        w.name = args.name
    digest = write_workload(w, args.out)
    stats = workload_stats(w)
    write_sidecar(args.out, w, digest, stats, spec=f"agentperf-local=={w.meta['agentperf_version']}:{w.meta['replay']}")
    print(
        f"wrote {args.out} ({stats['sessions']} sessions, {stats['requests']} requests, prompt tokens "
        f"{w.meta['prompt_tokens']}, theoretical hit rate {stats['theoretical_hit_rate']:.1%}); digest {digest}"
    )
    return 0
