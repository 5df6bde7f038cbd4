"""Where things are: the repository root, the outputs folder, the peers' cache, the CLI."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PEERS = Path.home() / ".cache" / "benchcamp" / "peers"  # the peers' venvs, never the project's


def results(script: str) -> Path:
    """``bench/results/<script>/``: the folder a script writes its quoted outputs to by default."""
    return RESULTS / script


def output(script: str, variant: str = "", suffix: str = ".json") -> Path:
    """``bench/results/<script>/<script>[.<variant>]<suffix>``: a script's default output file."""
    return results(script) / f"{script}{'.' + variant if variant else ''}{suffix}"


def benchcamp_exe() -> Path:
    """The ``benchcamp`` console script of the running environment."""
    return Path(sys.executable).parent / "benchcamp"


def command() -> str:
    """The command line that reruns this run: ``uv run python bench/<script>.py <args>``."""
    script = Path(sys.argv[0]).resolve()
    return " ".join(["uv run python", str(script.relative_to(ROOT) if script.is_relative_to(ROOT) else script),
                     *sys.argv[1:]])
