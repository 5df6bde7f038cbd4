"""Wall-clock capacity probes: ``measure(level, attempt)`` for ``benchcamp.planning.capacity.search_capacity``
that runs each probe with the load generator against a live endpoint (``load.clock: wall``).

All probes of a search share one engine; each gets its own prompt salt (``probe_spec``), so
no probe finds another's prompts in the prefix cache. The virtual-clock twin is
``benchcamp.sim.clock.virtual_point.virtual_measure``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchcamp.config import Config
    from benchcamp.results.outcome import PointOutcome
    from benchcamp.workload.model import Workload


def wall_measure(
    cfg: Config,
    workload: Workload,
    endpoint: str,
    api_key: str | None,
    out_root: str | Path,
    execution_id: str = "",
    theoretical_hit_rate: float | None = None,
    progress: Any = None,
    why_dead: Callable[[], str | None] | None = None,
) -> Callable[[int, int], Any]:  # Any: planning.capacity.Outcome declares summary a Mapping, PointOutcome a dict
    """``why_dead``: what ended the engine when a probe finds it gone (run_point's)."""
    from benchcamp.loadgen.preflight import probe
    from benchcamp.loadgen.spec import probe_spec
    from benchcamp.loadgen.sweep import run_point
    from benchcamp.results.outcome import summarize_point

    out_root = Path(out_root)
    caps = probe(endpoint, api_key, cfg.served_model_name)  # what the endpoint accepts, once

    def measure(level: int, attempt: int = 0) -> PointOutcome:
        spec = probe_spec(cfg.load, level, attempt, execution_id, capabilities=caps)
        res = run_point(
            endpoint,
            api_key,
            cfg.served_model_name,
            workload,
            spec,
            out_root / spec.label,
            progress=progress,
            why_dead=why_dead,
        )
        return summarize_point(cfg, res, theoretical_hit_rate)

    return measure
