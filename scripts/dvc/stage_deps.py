"""The code and package data each DVC stage's command runs, derived from the import graph, against dvc.yaml.

A stage whose command is ``python -m benchcamp.cli <command> ...`` runs ``benchcamp/cli.py`` (which imports every
``benchcamp/commands/*.py`` to build its parser: their module-level imports run) and then the command's module,
whose every import counts, also those inside functions (a lazy import is still code the stage may run), and so on
transitively. Importing a module runs its packages' ``__init__`` too. Files a stage reads beside its code are
the non-Python files of the packages it imports (``benchcamp/profiles/gpus/*.yaml``, ``benchcamp/data/*.yaml``,
``benchcamp/report/template.html``): the only place benchcamp keeps such files.

    python scripts/dvc/stage_deps.py            # per stage: the deps it needs, fewest paths (folders where whole)
    python scripts/dvc/stage_deps.py --check    # exit 1 naming each needed file that no dep of dvc.yaml covers
    python scripts/dvc/stage_deps.py --write    # rewrite the benchcamp/ deps of each such stage in dvc.yaml

Third-party code (uv.lock) is not a dep: a dependency bump is a change of the environment, not of a stage.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "benchcamp"
CLI = f"python -m {PACKAGE}.cli "
SKIP = {"__pycache__"}


@dataclass(frozen=True)
class Imports:
    """A module's imports of benchcamp modules: those run when it is imported, and all of them."""

    module_level: frozenset[str]
    every: frozenset[str]


def module_path(name: str, root: Path = ROOT) -> Path | None:
    base = root / name.replace(".", "/")
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _resolve(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return base


@cache
def imports(name: str, root: Path = ROOT) -> Imports:
    """The benchcamp modules ``name`` imports (``from pkg import mod`` counts ``pkg.mod`` when it is a module)."""
    path = module_path(name, root)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(n) for n in _module_level_nodes(tree)}
    module_level: set[str] = set()
    every: set[str] = set()
    for node in ast.walk(tree):
        found: set[str] = set()
        if isinstance(node, ast.Import):
            found = {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            found = {base} | {f"{base}.{a.name}" for a in node.names}
        found = {n for n in found if n.split(".")[0] == PACKAGE and module_path(n, root) is not None}
        every |= found
        if id(node) in top_level:
            module_level |= found
    return Imports(frozenset(module_level), frozenset(every))


def _module_level_nodes(tree: ast.Module) -> list[ast.AST]:
    """Statements run on import: the module body and the bodies of its top-level if/try/with blocks
    (``if TYPE_CHECKING:`` included: conservative), not function or class bodies' nested functions."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, field, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
    return out


def _with_packages(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def closure(every_from: set[str], module_level_from: set[str], root: Path = ROOT) -> set[str]:
    """Modules run: all imports followed from ``every_from``, module-level ones from ``module_level_from``."""
    full: set[str] = set()
    todo = [m for n in every_from for m in _with_packages(n)]
    while todo:
        n = todo.pop()
        if n not in full:
            full.add(n)
            todo.extend(m for i in imports(n, root).every for m in _with_packages(i))
    light: set[str] = set()
    todo = [m for n in module_level_from for m in _with_packages(n)]
    while todo:
        n = todo.pop()
        if n not in light and n not in full:
            light.add(n)
            todo.extend(m for i in imports(n, root).module_level for m in _with_packages(i))
    return full | light


def command_module(cmd: str) -> str | None:
    """``python -m benchcamp.cli bench run ...`` -> ``benchcamp.commands.bench``; None for other commands."""
    cmd = " ".join(cmd.split())
    if not cmd.startswith(CLI):
        return None
    return f"{PACKAGE}.commands.{cmd[len(CLI):].split()[0].replace('-', '_')}"


def _data_files(package_dir: Path) -> set[Path]:
    """Non-Python files of a package folder, into its sub-folders that are not packages of their own."""
    out: set[Path] = set()
    for p in package_dir.iterdir():
        if p.name in SKIP:
            continue
        if p.is_dir() and not (p / "__init__.py").exists():
            out |= _data_files(p)
        elif p.is_file() and p.suffix not in (".py", ".pyc"):
            out.add(p)
    return out


def needed_files(cmd: str, root: Path = ROOT) -> set[Path]:
    """Every file of benchcamp that the stage command ``cmd`` may run or read (absolute paths)."""
    entry = command_module(cmd)
    if entry is None:
        return set()
    commands = {f"{PACKAGE}.commands.{p.stem}" for p in (root / PACKAGE / "commands").glob("*.py")}
    modules = closure({entry, f"{PACKAGE}.cli"}, commands, root)
    files: set[Path] = set()
    for m in modules:
        path = module_path(m, root)
        assert path is not None
        files.add(path)
        if path.name == "__init__.py":
            files |= _data_files(path.parent)
    return files


def _all_files(d: Path) -> set[Path]:
    return {p for p in d.rglob("*") if p.is_file() and not SKIP & set(p.parts) and p.suffix != ".pyc"}


def fewest_paths(files: set[Path], root: Path = ROOT) -> list[str]:
    """``files`` as few repo-relative paths as possible: a folder where every file in it is needed."""
    out: list[str] = []

    def walk(d: Path) -> None:
        if _all_files(d) <= files:
            out.append(d.relative_to(root).as_posix())
            return
        for p in sorted(d.iterdir()):
            if p.is_dir() and p.name not in SKIP:
                if _all_files(p) & files:
                    walk(p)
            elif p in files:
                out.append(p.relative_to(root).as_posix())

    walk(root / PACKAGE)
    return out


def covered(path: Path, deps: list[str], root: Path = ROOT) -> bool:
    return any(path == root / d or (root / d) in path.parents for d in deps)


def stages(root: Path = ROOT) -> dict[str, dict]:
    return yaml.safe_load((root / "dvc.yaml").read_text())["stages"]


def missing(root: Path = ROOT) -> dict[str, list[str]]:
    """Per stage of dvc.yaml: the needed files (repo-relative) no dep covers."""
    out = {}
    for name, stage in stages(root).items():
        deps = [str(d) for d in stage.get("deps", [])]
        lack = sorted(p.relative_to(root).as_posix() for p in needed_files(stage["cmd"], root) if not covered(p, deps, root))
        if lack:
            out[name] = lack
    return out


def dangling(root: Path = ROOT) -> dict[str, list[str]]:
    """Per stage of dvc.yaml: its deps that name no file or folder (a moved module): `dvc repro` fails on them."""
    out = {}
    for name, stage in stages(root).items():
        gone = [str(d) for d in stage.get("deps", []) if "${" not in str(d) and not (root / str(d)).exists()]
        if gone:
            out[name] = gone
    return out


def rewrite(text: str, deps: dict[str, list[str]]) -> str:
    """dvc.yaml's text with each named stage's ``benchcamp/`` deps replaced by ``deps[stage]``, after its other
    deps (comments and layout kept): a line edit, as a YAML round trip would drop the comments."""
    out: list[str] = []
    stage: str | None = None
    pending: list[str] = []  # a deps block's generated lines, written where the block ends
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if pending and not (indent == 6 and stripped.startswith("- ")):
            out.extend(pending)
            pending = []
        if indent == 2 and stripped.endswith(":") and not stripped.startswith("#"):
            stage = stripped[:-1]
        elif indent == 4 and stripped == "deps:" and stage in deps:
            pending = [f"      - {d}\n" for d in deps[stage]]
        elif pending and stripped.startswith(f"- {PACKAGE}/"):
            continue
        out.append(line)
    return "".join(out + pending)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 naming each needed file no dep of dvc.yaml covers, and each dep that does not exist")
    ap.add_argument("--write", action="store_true", help="rewrite each stage's benchcamp/ deps in dvc.yaml")
    args = ap.parse_args(argv)
    if args.check:
        lack = missing()
        for name, files in lack.items():
            shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
            print(f"dvc.yaml: stage {name} runs or reads {shown}, which no dep covers; "
                  "run python scripts/dvc/stage_deps.py --write")
        gone = dangling()
        for name, paths in gone.items():
            print(f"dvc.yaml: stage {name} depends on {', '.join(paths)}, which does not exist; "
                  "run python scripts/dvc/stage_deps.py --write (or fix the dep by hand)")
        return 1 if lack or gone else 0
    if args.write:
        found = {n: fewest_paths(needed_files(s["cmd"])) for n, s in stages().items()}
        path = ROOT / "dvc.yaml"
        path.write_text(rewrite(path.read_text(), {n: d for n, d in found.items() if d}))
        return main(["--check"])
    for name, stage in stages().items():
        files = needed_files(stage["cmd"])
        if files:
            print(f"{name}:\n" + "".join(f"  - {p}\n" for p in fewest_paths(files)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
