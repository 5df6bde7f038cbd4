"""Fixtures of the interop tests: the capacity tests' small simulated setup (tests/capacity/capacity_support.py) and
the peers' own output files (fixtures/, README.md there says how each was made)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capacity"))

from capacity_support import SMALL, SPEC  # noqa: E402

from benchcamp.cli import main  # noqa: E402
from benchcamp.workload.generator import generate, parse_spec  # noqa: E402
from benchcamp.workload.model import write_workload  # noqa: E402

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def tiny_workload():
    return generate(parse_spec(SPEC))


def run_campaign(tmp_path: Path, tiny_workload, *extra: str, args: tuple[str, ...] = ()) -> int:
    """`benchcamp run` of the small simulated campaign on the virtual clock, tracked in a SQLite MLflow store."""
    wl = tmp_path / "wl.parquet"
    if not wl.exists():
        write_workload(tiny_workload, wl)
    sets = SMALL + ["load.levels=[4]", "load.duration_s=10", f"results.store={tmp_path / 'results'}",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}", f"workload.data={wl}",
                    f"workload.spec={tmp_path / 'absent.yaml'}", *extra]
    return main(["run", "--params", "/dev/null", *(a for s in sets for a in ("--set", s)),
                 "--reports", str(tmp_path / "reports"), *args])
