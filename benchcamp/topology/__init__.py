"""The deployment topology layer: roles x instances x nodes x engines (model), the checks that need the model and
GPU profiles (validate) and the planner's candidates; no engine code and no config (``benchcamp.config.topology_of``
gives a config's topology)."""

from __future__ import annotations

from benchcamp.topology.model import (
    DP_LAYOUTS,
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
    dp_layout,
)

__all__ = [
    "DP_LAYOUTS",
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
    "dp_layout",
]
