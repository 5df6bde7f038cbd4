"""`benchcamp run` with load.mode=capacity and load.clock=virtual, end to end: the search is the
sweep step (every probe a point), the same fingerprint gives byte-identical records, and
capacity verdicts flag a planted slower configuration but not a rerun of the same one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from capacity_support import SMALL

from benchcamp.cli import main
from benchcamp.workload.model import write_workload

TIER = "load.tiers=[{name: fast, p90_user_tok_s: 60, p90_ttft_s: 2}]"


def _run(tmp_path: Path, wl: Path, *extra: str) -> int:
    sets = SMALL + ["load.mode=capacity", TIER, "load.capacity.resolution_rel=0.05", "load.capacity.max=1024",
                    f"results.store={tmp_path / 'results'}", f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}",
                    f"workload.data={wl}", f"workload.spec={tmp_path / 'absent.yaml'}", *extra]
    return main(["run", "--params", "/dev/null", *(a for s in sets for a in ("--set", s)),
                 "--reports", str(tmp_path / "reports"), "--fail-on-regression"])


def _executions(tmp_path: Path) -> list[Path]:
    root = tmp_path / "results" / "agentic-smoke"
    return sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name)


def test_capacity_search_campaign_reruns_identically_and_flags_a_slower_config(tmp_path, tiny_workload, capsys):
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)

    assert _run(tmp_path, wl) == 0
    first = capsys.readouterr().out
    assert "capacity (virtual clock" in first and "fast" in first
    (ex1,) = _executions(tmp_path)
    cap = json.loads((ex1 / "capacity.json").read_text())
    assert cap["clock"] == "virtual" and cap["tiers"][0]["max_agents"] > 0
    probes = [p["label"] for p in cap["probes"]]
    summary = json.loads((ex1 / "summary.json").read_text())
    assert summary["capacity"]["tiers"][0]["tier"] == "fast"
    assert {p["point"] for p in summary["points"]} == set(probes)   # every probe is a point of the campaign

    assert _run(tmp_path, wl) == 0                                  # the same fingerprint again
    second = capsys.readouterr().out
    ex2 = next(e for e in _executions(tmp_path) if e != ex1)
    for label in probes:                                            # virtual clock: identical records
        assert (ex1 / label / "records.parquet").read_bytes() == (ex2 / label / "records.parquet").read_bytes()
    assert "capacity.fast.max_agents" in second
    assert "REGRESSED" not in second

    assert _run(tmp_path, wl, "engine.max_num_seqs=4") == 3        # planted: 4 sequences per step
    third = capsys.readouterr().out
    line = next(ln for ln in third.splitlines() if ln.startswith("capacity.fast.max_agents"))
    assert "REGRESSED" in line


def _sets(tmp_path: Path, wl: Path, *extra: str) -> list[str]:
    """`--set` arguments as a user passes them to `benchcamp compare` / `report` after `_run`."""
    sets = SMALL + ["load.mode=capacity", TIER, f"results.store={tmp_path / 'results'}",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}", f"workload.data={wl}", *extra]
    return ["--params", "/dev/null", *(a for s in sets for a in ("--set", s))]


def _capacity_line(out: str) -> str:
    return next((ln for ln in out.splitlines() if ln.startswith("capacity.fast.max_agents")), "")


def test_compare_and_report_from_mlflow_judge_and_show_capacity(tmp_path, tiny_workload, capsys):
    """`benchcamp compare` and `benchcamp report` rebuild the campaign from MLflow: the capacity
    search must come back with it (its verdicts, the report's capacity section)."""
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    assert _run(tmp_path, wl) == 0 and _run(tmp_path, wl) == 0       # a search and a rerun of it
    rerun_id = re.findall(r"MLflow: run (\w+)", capsys.readouterr().out)[-1]
    assert main(["compare", *_sets(tmp_path, wl)]) == 0
    rerun = _capacity_line(capsys.readouterr().out)
    assert "unchanged" in rerun, rerun

    assert _run(tmp_path, wl, "engine.max_num_seqs=4") == 3          # planted: 4 sequences per step
    capsys.readouterr()
    assert main(["compare", *_sets(tmp_path, wl, "engine.max_num_seqs=4"), "--baseline", "history"]) == 3
    slower = _capacity_line(capsys.readouterr().out)
    assert "REGRESSED" in slower, slower
    # judged again later, the rerun is compared with what came before it, not with the slower run
    assert main(["compare", *_sets(tmp_path, wl), rerun_id]) == 0
    again = capsys.readouterr().out
    assert "unchanged" in _capacity_line(again) and "history (1 search(es))" in _capacity_line(again), again

    assert main(["report", *_sets(tmp_path, wl), "--out", str(tmp_path / "r"), "--no-log"]) == 0
    page = next((tmp_path / "r").rglob("index.html")).read_text()
    assert "Capacity at service tiers" in page and "Capacity search probes" in page
