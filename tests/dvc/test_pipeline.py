"""DVC's commands as a user types them, after `benchcamp run` (make run), on a fresh copy of the repository:
`dvc repro`, `dvc exp run -S 'load.levels=[64]'`, `dvc exp show`, `dvc metrics diff`, `dvc plots diff`. Every
execution folder of `benchcamp run` survives them, and what DVC shows leads with the headline."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from dvc_repo import DVC, make_copy, run, run_json

from benchcamp.metrics import HEADLINE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(DVC is None or shutil.which("git") is None, reason="dvc and git are needed"),
]
HEADLINE_NAMES = list(HEADLINE)


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _commit(root: Path, message: str) -> None:
    run(root, "git", "add", "-A")
    run(root, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return make_copy(tmp_path_factory.mktemp("dvc") / "repo")


def test_run_then_repro_exp_run_keeps_every_execution_and_shows_the_headline_first(repo):
    # `make run` is `uv run benchcamp run`: the same command, in the copy
    run(repo, "python", "-m", "benchcamp.cli", "run")
    executions = repo / "results" / "agentic-smoke"
    kept = {d.name: _tree(d) for d in executions.iterdir() if d.is_dir() and not d.is_symlink()}
    assert len(kept) == 1 and all("records.parquet" in "".join(t) for t in kept.values()), kept

    out = run(repo, "dvc", "repro")
    assert "Running stage 'bench'" in out and "Running stage 'report'" in out
    assert {d: _tree(executions / d) for d in kept} == kept  # nothing of `benchcamp run` deleted or changed
    headline = json.loads((repo / "pipeline/headline.json").read_text())
    assert list(headline) == HEADLINE_NAMES and headline["total_tokens_per_s_per_gpu"] > 0, headline
    assert json.loads((repo / "pipeline/outcome.json").read_text())["status"] == "ok"
    assert (repo / "pipeline/bench/agentic-smoke/summary.json").is_file()
    assert (repo / "pipeline/reports/plots/pareto.csv").is_file()
    _commit(repo, "dvc repro")

    out = run(repo, "dvc", "exp", "run", "-S", "load.levels=[64]")
    assert "Ran experiment" in out, out
    assert {d: _tree(executions / d) for d in kept} == kept
    assert yaml.safe_load((repo / "params.yaml").read_text())["load"]["levels"] == [64]

    # as typed, on a terminal wide enough for the first columns
    shown = run(repo, "dvc", "exp", "show", "--no-pager", env={"COLUMNS": "400"})
    header = next(line for line in shown.splitlines() if "Experiment" in line)
    columns = header.split()
    assert columns[:2] == ["Experiment", "Created"], header
    assert columns[2 : 2 + len(HEADLINE_NAMES)] == HEADLINE_NAMES, header
    assert columns[2 + len(HEADLINE_NAMES)] == "campaign.name", header  # then params.yaml
    assert json.loads((repo / "pipeline/outcome.json").read_text())["point"] == "c64"
    table = run_json(repo, "dvc", "exp", "show", "--json")
    exps = [e for row in table for e in (row.get("experiments") or [])]
    assert len(exps) == 1, table
    name = exps[0]["revs"][0]["name"]

    # what changed: the headline alone (DVC sorts a file's metrics by name and leaves out the unchanged)
    diff = run(repo, "dvc", "metrics", "diff", "HEAD", name)
    rows = [line.split() for line in diff.splitlines()[1:] if line.strip()]
    assert {r[0] for r in rows} == {"pipeline/headline.json"}, diff
    changed = {"total_tokens_per_s_per_gpu", "p90_user_tokens_per_s", "ttft_p90_s", "revenue_per_gpu_hour"}
    assert changed <= {r[1] for r in rows}, diff

    # the report's plots of the two, overlaid (`dvc plots diff HEAD <exp>` renders the same data as HTML)
    plots = run_json(repo, "dvc", "plots", "diff", "HEAD", name, "--json")["data"]
    pareto = plots["pipeline/reports/plots/pareto.csv"][0]
    assert pareto["revisions"] == ["HEAD", name]
    assert {v["rev"] for v in pareto["content"]["data"]["values"] if v["source"] == "this run"} == {"HEAD", name}
    assert {d: _tree(executions / d) for d in kept} == kept
