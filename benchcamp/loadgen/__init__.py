"""The benchmark client: replays a workload's sessions against an OpenAI-compatible
endpoint and writes per-request records (see docs/interfaces.md, Load generator)."""

from benchcamp.loadgen.preflight import preflight
from benchcamp.loadgen.spec import EndpointError, PointResult, PointSpec, default_workers, point_label
from benchcamp.loadgen.sweep import run_point, run_sweep

__all__ = [
    "EndpointError",
    "PointResult",
    "PointSpec",
    "default_workers",
    "point_label",
    "preflight",
    "run_point",
    "run_sweep",
]
