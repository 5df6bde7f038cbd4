"""The simulated vLLM engine: one core (continuous batching, paged KV cache with
prefix caching, roofline step times) under two clocks: the HTTP server's wall
clock (``benchcamp.sim.engine.server``) and a virtual clock (``benchcamp.sim.clock.simulate``).

The names below are imported lazily, so ``import benchcamp.sim.engine.<module>`` (the
CLI does it to register subcommands) stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "EngineCore": "core",
    "Router": "core",
    "StepResult": "core",
    "EngineSettings": "settings",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"benchcamp.sim.engine.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'benchcamp.sim.engine' has no attribute {name!r}")
