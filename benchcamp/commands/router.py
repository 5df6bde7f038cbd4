"""`benchcamp router ...`: the OpenAI-compatible router in front of a topology's engines
(benchcamp.router); its arguments are passed through to :func:`benchcamp.router.server.run_router`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "router",
        prefix_chars="+",
        add_help=False,
        help="router in front of engines: unified replicas or prefill/decode (see `router --help`)",
    )
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from benchcamp.router.server import run_router

    return run_router(args.argv)
