"""The `workload` stage of dvc.yaml on a fresh copy of the repo: repro, push, pull (real dvc, real git)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DVC = shutil.which("dvc", path=str(Path(sys.executable).parent))
FILES = ["dvc.yaml", ".dvcignore", ".dvc/config", ".dvc/.gitignore", ".gitignore", "params.yaml",
         "workloads/agentx-like.yaml", "benchcamp"]


def _run(cwd: Path, *args: str) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(DVC is None or shutil.which("git") is None, reason="dvc and git are needed")
def test_workload_stage_repro_push_pull_on_fresh_copy(tmp_path):
    root = tmp_path / "repo"
    for f in FILES:
        src, dst = REPO / f, root / f
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    # Same stage, smaller spec so the test stays fast; the pipeline is what is tested here.
    spec_path = root / "workloads/agentx-like.yaml"  # params.yaml's workload
    spec = yaml.safe_load(spec_path.read_text())
    spec["sessions"] = 6
    spec_path.write_text(yaml.safe_dump(spec))
    _run(root, "git", "init", "-q")

    dvc = [DVC, "--quiet"]
    _run(root, *dvc, "repro", "workload")
    out = root / "workloads/data/agentx-like.parquet"
    metrics = root / "workloads/data/agentx-like.json"
    assert out.exists() and metrics.exists()
    assert "agentx-like.parquet" in (root / "workloads/data/.gitignore").read_text()
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["workload"]
    assert lock["params"]["params.yaml"]["workload"]["spec"] == "workloads/agentx-like.yaml"
    assert len(json.loads(metrics.read_text())["digest"]) == 64
    original = out.read_bytes()

    _run(root, *dvc, "push", "workload")
    assert (tmp_path / "repo/.dvc-remote").is_dir()  # the default remote from .dvc/config
    out.unlink()
    shutil.rmtree(root / ".dvc/cache")
    _run(root, *dvc, "pull", "workload")
    assert out.read_bytes() == original
