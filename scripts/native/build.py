"""Compile the simulator's hot modules with mypyc into .native/ (benchcamp/sim/native.py); `make setup` runs it.

Nothing to do when .native/ was built from the sources on disk. Otherwise it builds in a scratch directory and
renames that into place, so an interrupted build leaves the old build (which the stamp then marks stale) or none,
never a half-written one. A failed build is one line and the Python source runs, unless BENCHCAMP_REQUIRE_NATIVE=1
(CI), where it fails.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["BENCHCAMP_NATIVE"] = "0"  # this process reads the sources; it never needs the build it replaces

from benchcamp.sim import native  # noqa: E402


def compile_into(lib: Path, scratch: Path) -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    sources = [str(native.source_path(m).relative_to(ROOT)) for m in native.NATIVE_MODULES]
    log = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            warnings.simplefilter("ignore")  # setuptools' notes on pyproject.toml's license table
            setup(
                name="benchcamp-native",
                packages=[],
                py_modules=[],
                ext_modules=mypycify(sources, opt_level="3", multi_file=True, target_dir=str(scratch / "gen")),
                script_args=["build_ext", "--build-lib", str(lib), "--build-temp", str(scratch / "c"),
                             "--parallel", str(os.cpu_count() or 1)],
            )
    except BaseException:
        sys.stderr.write(log.getvalue()[-4000:])
        raise


def main() -> int:
    if native.build_state() == "native":
        return 0
    t0 = time.perf_counter()
    os.chdir(ROOT)  # mypyc reads the mypy settings in ./pyproject.toml
    scratch = Path(tempfile.mkdtemp(prefix=".native-", dir=ROOT))
    try:
        digest = native.sources_digest()
        compile_into(scratch / "lib", scratch)
        if native.sources_digest() != digest:
            raise RuntimeError("a compiled module changed during the build; run `make native` again")
        (scratch / "lib" / native.STAMP).write_text(digest + "\n")
        old = ROOT / ".native.old"
        shutil.rmtree(old, ignore_errors=True)
        if native.BUILD_DIR.exists():
            native.BUILD_DIR.rename(old)
        (scratch / "lib").rename(native.BUILD_DIR)
        shutil.rmtree(old, ignore_errors=True)
    except (Exception, SystemExit) as e:
        why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        print(f"native: the compiled simulator was not built ({why}); the Python source runs", file=sys.stderr)
        return 1 if os.environ.get(native.REQUIRE_ENV) == "1" else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"native: compiled {len(native.NATIVE_MODULES)} simulator modules with mypyc into .native/ "
          f"in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
