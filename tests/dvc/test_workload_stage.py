"""The `workload` stage of dvc.yaml on a fresh copy of the repo: repro, push, pull (real dvc, real git)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from dvc_repo import DVC, make_copy, run


@pytest.mark.slow
def test_workload_stage_repro_push_pull_on_fresh_copy(tmp_path):
    root = make_copy(tmp_path / "repo")
    dvc = [DVC, "--quiet"]
    run(root, *dvc, "repro", "workload")
    out = root / "workloads/data/agentx-like.parquet"
    metrics = root / "workloads/data/agentx-like.json"
    assert out.exists() and metrics.exists()
    assert "agentx-like.parquet" in (root / "workloads/data/.gitignore").read_text()
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["workload"]
    assert lock["params"]["params.yaml"]["workload"]["spec"] == "workloads/agentx-like.yaml"
    assert len(json.loads(metrics.read_text())["digest"]) == 64
    original = out.read_bytes()

    run(root, *dvc, "push", "workload")
    assert (root / ".dvc-remote").is_dir()  # the default remote from .dvc/config
    out.unlink()
    shutil.rmtree(root / ".dvc/cache")
    run(root, *dvc, "pull", "workload")
    assert out.read_bytes() == original
