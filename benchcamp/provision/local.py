"""The local provider: the engine runs as a subprocess of this machine.

There is nothing to create, so provisioning only names the node; deprovision
kills any engine still running for the execution (the safety net behind
``deploy.stop``, e.g. when the stop task itself failed or the handle was lost).
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
        from benchcamp.deploy.local import kill_execution_engines

        if node.meta.get("execution_id"):
            kill_execution_engines(node.meta["execution_id"])
