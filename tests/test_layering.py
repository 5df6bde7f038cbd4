"""The import layering of DESIGN.md, read from the source: dags -> tasks -> benchcamp, never
backwards, no airflow inside benchcamp, no import cycle among benchcamp's modules, and between
benchcamp's folders (and its top-level modules, each a unit of its own) imports run one way: down
:data:`LAYERS`, never up, and no two units import each other.

Every import statement counts, also those inside functions and under ``TYPE_CHECKING`` (a lazy
import is still a dependency). A package's own ``__init__`` is not counted as a dependency of its
submodules.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# benchcamp's units (a folder, or a top-level module) from the top down; a unit imports only units of its own
# layer or below (and, within a layer, never in a loop). A new folder or module must be placed here.
LAYERS: list[tuple[str, set[str]]] = [
    ("the command line", {"cli", "commands"}),
    ("drivers", {"campaign", "calibrate", "planning.planner"}),
    ("what a campaign runs and writes", {"deploy", "sim.clock", "report", "verdicts.notify", "interop"}),
    ("engines, clients, nodes, records' homes", {"sim.engine", "loadgen", "provision", "tracking",
                                                 "verdicts.compare"}),
    ("one point's outcome and the config", {"results.outcome", "config", "planning.capacity", "results.table",
                                           "results.records", "results.store", "secrets.refs"}),
    ("the domain", {"topology", "workload", "metrics", "pricing", "verdicts.baselines", "verdicts.guard", "profiles",
                    "router", "secrets.redaction", "results.atomic", "results.trials", "sim.fidelity"}),
    ("leaves", {"errors", "sim.native", "data", "benchcamp", "results.jsonsafe"}),
]

# Packages that group units by concern (where a reader looks for a thing) without being a unit themselves: each of
# their subpackages or modules is a unit of its own, placed in LAYERS as ``group.name``.
GROUPS = {"sim", "results", "secrets", "verdicts", "planning"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(top: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / top).rglob("*.py"))}


def _imports(path: Path, name: str) -> set[str]:
    """Absolute names imported by the module at ``path`` (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return out


@functools.cache
def _graph(tops: tuple[str, ...]) -> dict[str, set[str]]:
    known = {n: p for top in tops for n, p in _modules(top).items()}
    return {n: {i for i in _imports(p, n) if i in known and i != n and not n.startswith(i + ".")}
            for n, p in known.items()}


def test_benchcamp_never_imports_airflow_tasks_or_dags():
    bad = {n: sorted(i for i in _imports(p, n) if i.split(".")[0] in ("airflow", "tasks", "dags"))
           for n, p in _modules("benchcamp").items()}
    assert {n: i for n, i in bad.items() if i} == {}


def test_tasks_never_import_dags():
    bad = {n: sorted(i for i in _imports(p, n) if i.split(".")[0] == "dags") for n, p in _modules("tasks").items()}
    assert {n: i for n, i in bad.items() if i} == {}


def test_no_import_cycle_among_benchcamp_modules():
    graph = _graph(("benchcamp",))
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert cycles == []


def _unit(module: str) -> str:
    """benchcamp.<unit>[.rest] -> unit (benchcamp.<group>.<unit>[.rest] -> group.unit); the package's own ``__init__`` is
    the unit ``benchcamp``."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in GROUPS:
        return f"{parts[1]}.{parts[2]}" if len(parts) > 2 else "benchcamp"  # a group's __init__ holds no code
    return parts[1] if len(parts) > 1 else "benchcamp"


def folder_graph() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the module imports behind that edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for n, deps in _graph(("benchcamp",)).items():
        for i in deps:
            a, b = _unit(n), _unit(i)
            if a != b and b != "benchcamp":
                edges.setdefault((a, b), []).append(f"{n} -> {i}")
    return edges


def test_every_unit_of_benchcamp_has_a_layer():
    placed = [u for _, units in LAYERS for u in units]
    assert len(placed) == len(set(placed)), "a unit is in two layers"
    units = {_unit(n) for n in _modules("benchcamp")} | {
        p.name for p in (ROOT / "benchcamp").iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in GROUPS
    }
    assert sorted(units - set(placed)) == [], "place each new folder or module in LAYERS (and DESIGN.md's table)"
    assert sorted(set(placed) - units) == [], "LAYERS names a unit that no longer exists"


def test_imports_between_folders_run_down_the_layers():
    layer = {u: i for i, (_, units) in enumerate(LAYERS) for u in units}
    up = {
        f"{a} ({LAYERS[layer[a]][0]}) -> {b} ({LAYERS[layer[b]][0]})": sorted(why)
        for (a, b), why in folder_graph().items()
        if layer[a] > layer[b]
    }
    assert up == {}


def test_no_two_folders_import_each_other_even_through_others():
    graph: dict[str, set[str]] = {}
    for a, b in folder_graph():
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    # strongly connected components (Tarjan): each one larger than a unit is a loop between folders
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    edges = folder_graph()
    assert {", ".join(c): sorted(e for (a, b), es in edges.items() if a in c and b in c for e in es) for c in loops} == {}


def test_every_module_imports(tmp_path):
    """In a fresh interpreter, with a private AIRFLOW_HOME (tasks/ and dags/ import airflow)."""
    names = [*_modules("benchcamp"), *_modules("tasks"), *(f"dags.{p.stem}" for p in sorted((ROOT / "dags").glob("*.py")))]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint('imported', len(sys.argv) - 1)"
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"imported {len(names)}" in out.stdout
