"""Helpers of the interop tests: the small simulated campaign (tests/capacity/capacity_support.py) run end to end,
and the peers' own output files (fixtures/, README.md there says how each was made)."""

from __future__ import annotations

from pathlib import Path

from capacity_support import SMALL

from benchcamp.cli import main
from benchcamp.workload.model import write_workload

FIXTURES = Path(__file__).parent / "fixtures"


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
