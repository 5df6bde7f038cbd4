"""Helpers shared by the subcommands (not a subcommand itself)."""

from __future__ import annotations

import argparse

from benchcamp.config import DEFAULT_PARAMS, Config, load_config


def register(sub: argparse._SubParsersAction) -> None:  # not a command
    return None


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=DEFAULT_PARAMS, help="params file (default: %(default)s)")
    add_set_arg(p, "override a parameter, e.g. --set engine.max_num_seqs=256")


def add_set_arg(p: argparse.ArgumentParser, help_: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``, as ``config_from_args`` reads it."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=f"{help_} (repeatable)"
    )


def check_tracking_reachable(uri: str, args: argparse.Namespace) -> None:
    """One line now when the MLflow store at ``uri`` does not answer, naming where ``uri`` came
    from (``--tracking-uri`` or the config); for commands that need MLflow (no ``--no-track``)."""
    from benchcamp.tracking import check_reachable

    check_reachable(uri, setting="--tracking-uri" if args.tracking_uri else "tracking.mlflow_uri", can_skip=False)


def config_from_args(args: argparse.Namespace) -> Config:
    from benchcamp.secrets.redaction import register_config

    cfg = load_config(args.params, args.overrides)
    register_config(cfg.to_dict())  # its secrets, and the environment's, are redacted from all output
    return cfg
