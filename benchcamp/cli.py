"""The `benchcamp` command.

Each subcommand lives in ``benchcamp/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (args -> exit
code). Keeping them apart keeps this file small and start-up cheap: a
command's heavy imports happen inside its ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from benchcamp import commands
from benchcamp.errors import BenchcampError, ExitCode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchcamp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"benchcamp.commands.{mod}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit codes: benchcamp.errors.ExitCode (0 ok, 1 failed, 2 bad input, 3 regression, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BenchcampError as exc:
        from benchcamp.secrets.redaction import redact

        print(f"benchcamp: {redact(str(exc))}", file=sys.stderr)
        return int(exc.exit_code)
    except FileNotFoundError as exc:  # a path the user gave (params, results folder, trace)
        from benchcamp.secrets.redaction import redact

        print(f"benchcamp: {redact(str(exc))}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except KeyboardInterrupt:
        print("benchcamp: interrupted; records written so far are kept", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
