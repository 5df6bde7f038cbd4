"""The simulator's hot modules compiled with mypyc, used only when built from exactly these sources.

``make setup`` (``scripts/native/build.py``; ``make native`` is the same) compiles ``NATIVE_MODULES`` (the engine core, its KV cache,
scheduler and step-time model, the virtual clock and the topology simulation) from their unchanged Python source
into ``.native/`` with mypyc, the compiler mypy ships, and stamps the build with a digest of those sources. On
``import benchcamp``, ``install()`` puts a finder first on ``sys.meta_path`` that loads those modules from the build,
if its stamp matches the sources on disk; otherwise (a module edited since, another Python, no build, or
``BENCHCAMP_NATIVE=0``) the Python source runs, with one warning line when a build exists but is stale. Both give
the same records to the bit (``tests/sim/clock/test_native.py``); the compiled ones run the virtual clock 1.3-2.2x
faster (``bench/rack_speed.py --code both``).

Compiled classes are native: their instances cannot take new attributes and native calls between compiled
functions do not go through patched class attributes, so a test that spies on simulator internals runs on the
Python source (``BENCHCAMP_NATIVE=0`` in a subprocess).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

NATIVE_MODULES = (
    "benchcamp.sim.engine.kvcache",
    "benchcamp.sim.engine.scheduler",
    "benchcamp.sim.engine.perfmodel",
    "benchcamp.sim.engine.core",
    "benchcamp.sim.engine.hashing",
    "benchcamp.sim.engine.frontend",
    "benchcamp.sim.clock.simulate",
    "benchcamp.sim.clock.fleet",
)
ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = ROOT / ".native"
STAMP = "STAMP"
ENV = "BENCHCAMP_NATIVE"  # "0": always the Python source
REQUIRE_ENV = "BENCHCAMP_REQUIRE_NATIVE"  # "1" (CI): a failed build fails, and so does test_native
EXT = importlib.machinery.EXTENSION_SUFFIXES[0]  # e.g. .cpython-311-x86_64-linux-gnu.so

log = logging.getLogger(__name__)
state = "python"  # what install() chose: "native", or why not ("off", "no build", "stale")


def source_path(module: str, root: Path = ROOT) -> Path:
    return root / (module.replace(".", "/") + ".py")


def compiled_path(module: str, build: Path = BUILD_DIR) -> Path:
    return build / (module.replace(".", "/") + EXT)


def sources_digest(root: Path = ROOT) -> str:
    """What a build is valid for: this interpreter's extension ABI and every compiled module's source."""
    h = hashlib.sha256(EXT.encode())
    for module in NATIVE_MODULES:
        h.update(module.encode() + b"\0" + source_path(module, root).read_bytes() + b"\0")
    return h.hexdigest()


def build_state(root: Path = ROOT, build: Path | None = None) -> str:
    """ "native" when ``build`` holds a build of the sources under ``root``; else "no build" or "stale"."""
    build = build or root / BUILD_DIR.name
    stamp = build / STAMP
    if not stamp.is_file():
        return "no build"
    try:
        fresh = stamp.read_text().strip() == sources_digest(root)
    except OSError:
        return "stale"
    if not fresh or not all(compiled_path(m, build).is_file() for m in NATIVE_MODULES):
        return "stale"
    return "native"


class _Finder(importlib.abc.MetaPathFinder):
    """Loads ``NATIVE_MODULES`` from the build directory; every other import goes on as usual."""

    def __init__(self, build: Path):
        self.build = build
        self.shared = False

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None):  # type: ignore[override]
        if fullname not in NATIVE_MODULES:
            return None
        if not self.shared:  # on the first one: a process that never simulates never loads the library
            _load_shared(self.build)
            self.shared = True
        so = str(compiled_path(fullname, self.build))
        return importlib.util.spec_from_file_location(
            fullname, so, loader=importlib.machinery.ExtensionFileLoader(fullname, so)
        )


def _load_shared(build: Path) -> None:
    """mypyc puts the compiled code of all the modules in one shared library that each module's stub imports by
    its name: load it under that name."""
    for lib in build.glob(f"*__mypyc{EXT}"):
        name = lib.name[: -len(EXT)]
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, lib, loader=importlib.machinery.ExtensionFileLoader(name, str(lib))
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)


def install(build: Path = BUILD_DIR) -> str:
    """Use the compiled modules if their build is fresh (call before importing any of them); -> the state."""
    global state
    if os.environ.get(ENV, "1") == "0":
        state = "off"
        return state
    if any(m in sys.modules for m in NATIVE_MODULES) or any(isinstance(f, _Finder) for f in sys.meta_path):
        return state  # already decided in this process
    state = build_state(ROOT, build)
    if state == "stale":
        log.warning(
            "benchcamp: the compiled simulator in %s is older than its source; running the Python source "
            "(`make native` rebuilds it)",
            build,
        )
    if state != "native":
        return state
    sys.meta_path.insert(0, _Finder(build))
    return state
