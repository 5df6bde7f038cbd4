"""The import layering of DESIGN.md, read from the source: dags -> tasks -> benchcamp, never
backwards, no airflow inside benchcamp, and no import cycle among benchcamp's modules.

Every import statement counts, also those inside functions (a lazy import is still a
dependency). A package's own ``__init__`` is not counted as a dependency of its submodules.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def test_every_module_imports(tmp_path):
    """In a fresh interpreter, with a private AIRFLOW_HOME (tasks/ and dags/ import airflow)."""
    names = [*_modules("benchcamp"), *_modules("tasks"), *(f"dags.{p.stem}" for p in sorted((ROOT / "dags").glob("*.py")))]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint('imported', len(sys.argv) - 1)"
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"imported {len(names)}" in out.stdout
