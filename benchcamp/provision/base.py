"""The provider interface: where the engine runs.

A provider turns an execution id (one campaign run, stable across Airflow
retries) into a :class:`Node` and back. ``provision`` must be idempotent per
execution id (a retried task finds the node it already made) and must clean up
after itself when it fails after creating something, because Airflow skips a
teardown whose setup failed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from benchcamp.errors import ProvisionError  # noqa: F401  (re-exported)


@dataclass
class Node:
    kind: str  # "local" | "ec2" | "endpoint" | "slurm"
    host: str  # address the engine is reached at
    node_id: str  # instance id, Slurm job id, or a synthetic id for local/endpoint
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        return cls(kind=data["kind"], host=data["host"], node_id=data["node_id"], meta=dict(data.get("meta") or {}))


class NodeBoot(Protocol):
    """What a node runs from its first boot, handed to a provider that launches machines: the boot scripts of
    ``benchcamp.deploy.remote`` (what runs on a node is deploy's job; where it runs is provision's)."""

    def engine_env(self) -> dict[str, str]:
        """The engine's environment: its secrets (a fresh API key, an HF token), never in argv."""
        ...

    def script(self, env: dict[str, str] | None = None, parameter: str | None = None) -> str:
        """The boot script of a one-node deployment (secrets from ``env``, or from the SSM ``parameter``)."""
        ...

    def node_script(
        self, placement: Any, head_ip: str | None, env: dict[str, str] | None, parameter: str | None
    ) -> str:
        """The boot script of one node (a ``NodePlacement``) of a multi-node deployment."""
        ...


class Provider:
    """Interface; see local.py, ec2.py, endpoint.py, slurm.py."""

    kind = "base"
    _boot: Any = None  # what a provider that launches nodes or submits jobs runs there (benchcamp.deploy.remote)

    @property
    def boot(self) -> Any:
        """What each launched node (or submitted job) runs: only launching needs it, teardown never does."""
        if self._boot is None:
            raise ProvisionError(
                f"{type(self).__name__}: no node boot to launch with; pass boot=benchcamp.deploy.remote.node_boot(cfg) "
                "(the campaign's provision step does)"
            )
        return self._boot

    def provision(self, execution_id: str) -> Node:  # pragma: no cover - interface
        raise NotImplementedError

    def deprovision(self, node: Node) -> None:  # pragma: no cover - interface
        raise NotImplementedError


_SAFE = re.compile(r"[^A-Za-z0-9._:-]")


def check_execution_id(execution_id: str) -> str:
    """Execution ids end up in tags, file names and env vars: keep them tame."""
    if not execution_id or not isinstance(execution_id, str):
        raise ProvisionError("execution_id: required; pass the Airflow run id or `benchcamp run --execution-id`")
    if len(execution_id) > 200:
        raise ProvisionError(f"execution_id: {len(execution_id)} chars; use at most 200")
    return execution_id


def safe_name(text: str) -> str:
    """``text`` reduced to characters safe in file names and tag values."""
    return _SAFE.sub("_", text)
