"""Start an engine on this machine for `benchcamp bench run` without --endpoint.

A thin seam over :mod:`benchcamp.deploy` (which owns the engine command line:
``benchcamp engine serve`` with the config's vLLM flags, or real vLLM when
asked for and possible), so the bench command never builds engine argv itself.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def local_engine(cfg: Any, log_dir: str | Path) -> Iterator[tuple[str, str | None]]:
    """Yield (endpoint, api_key) of a ready local engine; stop it on exit (also on Ctrl-C)."""
    from benchcamp.deploy import deploy, stop, wait_ready
    from benchcamp.provision.base import Node

    node = Node(kind="local", host=cfg.provider.local.host, node_id="bench-local", meta={})
    dep = deploy(node, cfg, log_dir=log_dir)
    try:
        wait_ready(dep, cfg.provider.local.startup_timeout_s)
        yield dep.endpoint, dep.api_key
    finally:
        stop(dep)
