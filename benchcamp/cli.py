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

import benchcamp.commands as commands
from benchcamp.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchcamp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"benchcamp.commands.{mod}").register(sub)
    return parser


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message already names the field and the fix: print it, no traceback."""
    from benchcamp.deploy import EngineError
    from benchcamp.loadgen.spec import EndpointError
    from benchcamp.provision.base import ProvisionError
    from benchcamp.results_store import StoreError
    from benchcamp.tracking.store import TrackingError
    from benchcamp.workload.generator import SpecError
    from benchcamp.workload.mooncake import TraceError

    return (ConfigError, EngineError, EndpointError, ProvisionError, StoreError, TrackingError, SpecError,
            TraceError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"benchcamp: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        from benchcamp.secrets import redact
        print(f"benchcamp: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("benchcamp: interrupted; records written so far are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
