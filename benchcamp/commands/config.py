"""`benchcamp config show`: the resolved configuration and its fingerprint."""

from __future__ import annotations

import argparse

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the resolved campaign configuration")
    s = p.add_subparsers(dest="action", required=True)
    show = s.add_parser("show", help="print the resolved config and its fingerprint")
    add_config_args(show)
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    from benchcamp.config import show

    print(show(config_from_args(args)), end="")
    return 0
