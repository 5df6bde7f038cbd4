"""`benchcamp engine serve|simulate`: the simulated vLLM engine.

``serve`` takes ``vllm serve``'s command line verbatim (``benchcamp engine serve
MODEL --tensor-parallel-size 8 ...``), so its arguments are passed through
untouched to :func:`benchcamp.sim.engine.server.run_server`; ``serve --help`` lists
them. ``simulate`` runs a workload in virtual time (the engine core's
``benchcamp.sim.clock.simulate``) and is registered only when that module exists.
"""

from __future__ import annotations

import argparse
import importlib.util


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engine", help="the simulated vLLM engine (serve over HTTP, or simulate in virtual time)")
    s = p.add_subparsers(dest="action", required=True)
    # prefix_chars="+": every `--flag` after `serve` is vLLM's, collected verbatim.
    serve = s.add_parser(
        "serve",
        prefix_chars="+",
        add_help=False,
        help="OpenAI-compatible server with `vllm serve` flags (see `serve --help`)",
    )
    serve.add_argument("argv", nargs=argparse.REMAINDER)
    serve.set_defaults(func=_serve)
    if importlib.util.find_spec("benchcamp.sim.clock.simulate") is not None:
        sim = s.add_parser("simulate", help="run a workload through the engine core in virtual time")
        from benchcamp.commands.common import add_config_args
        from benchcamp.sim.clock import cli as simulate_cli

        add_config_args(sim)
        simulate_cli.add_arguments(sim)
        sim.set_defaults(func=_simulate)


def _serve(args: argparse.Namespace) -> int:
    from benchcamp.sim.engine.server import run_server

    return run_server(args.argv)


def _simulate(args: argparse.Namespace) -> int:
    from benchcamp.commands.common import config_from_args
    from benchcamp.sim.clock.cli import run_from_args

    cfg = config_from_args(args)
    if not args.workload:
        # As `benchcamp run` does: build the params' workload when it is missing or stale.
        from benchcamp.workload import ensure_workload

        _, path, _ = ensure_workload(cfg.workload)
        args.workload = str(path)
    return int(run_from_args(args, cfg) or 0)
