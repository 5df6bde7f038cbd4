"""`benchcamp compare RUN_A RUN_B [--html PATH]`: two real campaigns (the simulated engine on the virtual
clock, logged to a real SQLite MLflow store) side by side: their headline metrics, B / A, and the verdicts
logged with each; it writes nothing to MLflow and the HTML page says the same as the terminal."""

from __future__ import annotations

import re
from pathlib import Path

from capacity_support import SMALL

from benchcamp.cli import main
from benchcamp.tracking.store import client
from benchcamp.workload.model import write_workload


def _run(tmp_path: Path, wl: Path, *extra: str) -> int:
    sets = SMALL + ["load.levels=[4]", "load.duration_s=10", f"results.store={tmp_path / 'results'}",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}", f"workload.data={wl}",
                    f"workload.spec={tmp_path / 'absent.yaml'}", *extra]
    return main(["run", "--params", "/dev/null", *(a for s in sets for a in ("--set", s)),
                 "--reports", str(tmp_path / "reports")])


def _snapshot(uri: str) -> list[tuple]:
    """Every run of the store with its tags, params, metrics and end time: what compare must not change."""
    c = client(uri)
    return sorted((r.info.run_id, r.info.end_time, sorted(r.data.tags.items()), sorted(r.data.params.items()),
                   sorted(r.data.metrics.items()))
                  for e in c.search_experiments() for r in c.search_runs([e.experiment_id]))


def test_two_campaigns_side_by_side_in_the_terminal_and_as_html(tmp_path, tiny_workload, capsys):
    wl = tmp_path / "wl.parquet"
    write_workload(tiny_workload, wl)
    assert _run(tmp_path, wl) == 0
    assert _run(tmp_path, wl, "engine.max_num_seqs=2") in (0, 3)  # 2 sequences per step: slower, judged by history
    a, b = re.findall(r"MLflow: run (\w+)", capsys.readouterr().out)[-2:]
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    before = _snapshot(uri)
    page = tmp_path / "out" / "side-by-side.html"

    assert main(["compare", a, b, "--html", str(page), "--tracking-uri", uri, "--params", "/dev/null"]) == 0
    out = capsys.readouterr().out
    assert _snapshot(uri) == before  # read only: no tag, param, metric or run added
    rows = {ln.split("  ")[0].strip(): ln for ln in out.splitlines()}
    assert a in rows["run id"] and b in rows["run id"]
    for title in ("tok/s/GPU", "P90 user tok/s", "TTFT p90 s", "cache hit", "revenue $/GPU-h", "error rate", "valid"):
        assert title in rows, (title, out)
    # the slower configuration reads worse on throughput, B / A below 1 and said so
    ratio = re.search(r"(\d+\.\d\d)x \((better|worse)\)", rows["tok/s/GPU"])
    assert ratio and float(ratio[1]) < 1 and ratio[2] == "worse", rows["tok/s/GPU"]
    # each run's verdicts as logged with it: A's history is itself alone, B's is A and B (history), too short
    # for the nightly guard to judge either
    b_tags = client(uri).get_run(b).data.tags
    status = b_tags["benchcamp.verdict.total_tokens_per_s_per_gpu.history"]
    line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("total_tokens_per_s_per_gpu")
                and " history " in ln)
    assert status == "insufficient", b_tags
    assert "insufficient (nightly series (1 nights))" in line and "insufficient (nightly series (2 nights))" in line
    assert "any regression" in out
    html = page.read_text()
    assert html.startswith("<!doctype html>") and a in html and b in html and status in html
    assert not list(page.parent.glob(".*.tmp"))  # written atomically: no temporary file left


def test_side_by_side_bad_input_is_one_line(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["--tracking-uri", uri, "--params", "/dev/null"]
    assert main(["compare", "a" * 32, "b" * 32, "--write-tags", *args]) == 2
    assert "--write-tags judge one run" in capsys.readouterr().err
    assert main(["compare", "a" * 32, "--html", str(tmp_path / "x.html"), *args]) == 2
    assert "give two run ids" in capsys.readouterr().err
    assert main(["compare", "a" * 32, "b" * 32, *args]) == 2
    assert "not found" in capsys.readouterr().err
