"""Each DVC stage's deps are what its command imports and reads (scripts/dvc/stage_deps.py derives them from the
import graph), and `dvc status` calls a stage stale when any of them changes, a params section included."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from dvc_repo import DVC, REPO, make_copy, run

from benchcamp.config import Config

spec = importlib.util.spec_from_file_location("stage_deps", REPO / "scripts/dvc/stage_deps.py")
assert spec is not None and spec.loader is not None
stage_deps = importlib.util.module_from_spec(spec)
sys.modules["stage_deps"] = stage_deps  # its dataclass looks its module up there
spec.loader.exec_module(stage_deps)

# Sections no stage's output depends on: where MLflow is (bench does not track) and `benchcamp run`'s store.
NO_STAGE_READS = {"tracking", "results"}
# Files the issue found missing from bench's deps (under their names since the move to sim/).
FOUND_MISSING = ["benchcamp/profiles/gpus/gb300.yaml", "benchcamp/sim/clock/simulate.py", "benchcamp/workload/tokencount.py",
                 "benchcamp/sim/native.py", "benchcamp/topology/model.py", "benchcamp/workload/generator.py"]


def test_every_stage_lists_what_its_command_imports_and_reads():
    assert stage_deps.missing() == {}


def test_bench_needs_what_the_issue_found_missing():
    bench = stage_deps.stages()["bench"]
    needed = {p.relative_to(REPO).as_posix() for p in stage_deps.needed_files(bench["cmd"])}
    assert set(FOUND_MISSING) <= needed
    assert "benchcamp/report/template.html" in needed  # read by the report bench run renders into its folder


def test_a_dep_left_out_is_named(tmp_path):
    """The check fails on a dvc.yaml without one of bench's deps, as on dvc.yaml before the deps were derived."""
    (tmp_path / "benchcamp").symlink_to(REPO / "benchcamp")
    text = (REPO / "dvc.yaml").read_text()
    assert "      - benchcamp/profiles\n" in text
    (tmp_path / "dvc.yaml").write_text(text.replace("      - benchcamp/profiles\n", ""))
    lack = stage_deps.missing(tmp_path)
    assert "benchcamp/profiles/gpus/gb300.yaml" in lack["bench"], lack
    assert {"bench", "report", "workload", "workload-agentx-sample"} == set(lack)


def test_stage_params_cover_every_config_section_a_stage_reads():
    used = {str(p) for s in stage_deps.stages().values() for p in s.get("params", [])}
    assert used | NO_STAGE_READS == set(Config.model_fields), sorted(set(Config.model_fields) - used - NO_STAGE_READS)


def _one_file(dep: str, needed: set[Path]) -> Path:
    """The file to edit for a dep: itself, or a file under the folder that the stage needs (data before code)."""
    path = REPO / dep
    if path.is_file():
        return path
    under = sorted((p for p in needed if path in p.parents), key=lambda p: (p.suffix == ".py", str(p)))
    assert under, dep
    return next((p for p in under if p.name == "gb300.yaml"), under[0])


def _status(root: Path) -> dict:
    return json.loads(run(root, "dvc", "status", "--json"))


@pytest.mark.slow
@pytest.mark.skipif(DVC is None or shutil.which("git") is None, reason="dvc and git are needed")
def test_dvc_status_calls_the_stage_stale_when_any_dep_or_param_changes(tmp_path):
    root = make_copy(tmp_path / "repo")
    run(root, "dvc", "repro")
    assert _status(root) == {}
    params = yaml.safe_load((root / "params.yaml").read_text())
    outs = {str(o if isinstance(o, str) else next(iter(o))) for s in stage_deps.stages().values()
            for key in ("outs", "metrics", "plots") for o in s.get(key, [])}
    edited: dict[str, set[str]] = {}
    originals: dict[Path, bytes] = {}
    for name, stage in stage_deps.stages().items():
        needed = stage_deps.needed_files(stage["cmd"])
        for dep in map(str, stage["deps"]):
            if dep in outs:
                continue  # another stage's out: that stage's change
            if dep.startswith("${"):
                section, key = dep[2:-1].split(".")
                dep = params[section][key]
            target = root / _one_file(dep, needed).relative_to(REPO)
            originals.setdefault(target, target.read_bytes())
            target.write_bytes(originals[target] + b"\n")
            edited.setdefault(name, set()).add(dep)
    status = _status(root)
    for name, deps in edited.items():
        changed = {d for entry in status.get(name, []) if isinstance(entry, dict)
                   for d in entry.get("changed deps", {})}
        assert deps <= changed, (name, sorted(deps - changed))
    # the issue's case as a user sees it
    assert "Data and pipelines are up to date" not in run(root, "dvc", "status", "bench")

    for path, data in originals.items():
        path.write_bytes(data)
    assert _status(root) == {}
    # the section bench's params had left out: a topology (the default campaign's shape) changes what it measures
    topology = {"router": {"policy": "session_affinity", "pd_disaggregation": False}}
    (root / "params.yaml").write_text(yaml.safe_dump({**params, "topology": topology}, sort_keys=False))
    bench = json.dumps(_status(root).get("bench"))
    assert "params.yaml" in bench and "topology" in bench, bench
