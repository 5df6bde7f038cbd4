"""Functions of the load generator, the virtual clock and the domain layer that read the config take it typed
(a ``benchcamp.config`` section or ``Config`` where the layers allow the import, a small Protocol below it),
never as ``cfg: Any``: a reader sees what they read, and mypy checks it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULES = [
    "benchcamp/loadgen/spec.py",
    "benchcamp/loadgen/capacity_probe.py",
    "benchcamp/loadgen/sweep.py",
    "benchcamp/sim/clock/virtual_point.py",
    "benchcamp/deploy/keys.py",
    "benchcamp/secrets/refs.py",
    "benchcamp/pricing.py",
    "benchcamp/report/diagram.py",
    "benchcamp/workload/__init__.py",
    "benchcamp/topology/validate.py",
    "benchcamp/planning/planner.py",
    "benchcamp/verdicts/compare.py",
    "benchcamp/metrics.py",
    "benchcamp/report/render.py",
    "benchcamp/sim/fidelity.py",
    "benchcamp/commands/plan.py",
]


def _untyped_config_parameters(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                untyped = a.annotation is None or ast.unparse(a.annotation) in ("Any", "object")
                named = a.arg in ("cfg", "config", "settings", "capabilities") or a.arg.endswith("_cfg")
                if named and untyped:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({a.arg})")
    return found


def test_no_config_parameter_is_any():
    assert [hit for m in MODULES for hit in _untyped_config_parameters(ROOT / m)] == []
