"""The deployment topology layer: roles x instances x nodes x engines (model), the checks that need the model and
GPU profiles (validate), and the topology of a config (:func:`topology_of`)."""

from __future__ import annotations

from benchcamp.topology.model import (
    KV_CONNECTORS,
    ROLE_KINDS,
    ROUTER_POLICIES,
    SPECULATIVE_METHODS,
    KvConnector,
    NodePlacement,
    Role,
    RoleKind,
    Router,
    Speculative,
    Topology,
)
from benchcamp.topology.resolve import topology_of

__all__ = [
    "KV_CONNECTORS",
    "ROLE_KINDS",
    "ROUTER_POLICIES",
    "SPECULATIVE_METHODS",
    "KvConnector",
    "NodePlacement",
    "Role",
    "RoleKind",
    "Router",
    "Speculative",
    "Topology",
    "topology_of",
]
