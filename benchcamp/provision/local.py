"""The local provider: the engine runs as a subprocess of this machine.

There is nothing to create or release: provisioning only names the node. The engines a deployment left
running on this machine are deploy's to stop (``deploy.stop``, and ``deploy.kill_execution_engines``, which the
campaign's deprovision step runs as a safety net before releasing the node).
"""

from __future__ import annotations

import socket

from benchcamp.config import Config
from benchcamp.provision.base import Node, Provider, check_execution_id


class LocalProvider(Provider):
    kind = "local"

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def provision(self, execution_id: str) -> Node:
        check_execution_id(execution_id)
        return Node(
            kind="local",
            host=self.cfg.provider.local.host,
            node_id=f"local:{socket.gethostname()}",
            meta={"execution_id": execution_id},
        )

    def deprovision(self, node: Node) -> None:
        """Nothing to release (see the module's docstring)."""
