"""A fresh copy of the project as a git + DVC repository, with a campaign small enough for a test: the same
pipeline (dvc.yaml, params.yaml's sections, the workload spec's shape), fewer sessions, one engine, short windows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=str(BIN))
FILES = ["dvc.yaml", ".dvcignore", ".dvc/config", ".dvc/.gitignore", ".gitignore", "params.yaml", "reports/.gitignore",
         "workloads/agentx-sample.json", "workloads/data/.gitignore",
         "workloads/agentx-like.yaml", "benchcamp", "scripts/dvc"]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The stages' `python` is this interpreter (its venv first on PATH), and the copy's benchcamp is the one
    imported (`python -m` puts the working folder first on sys.path; the compiled simulator is the worktree's, so
    the copy runs the Python source)."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "BENCHCAMP_NATIVE": "0", **(extra or {})}


def _run(cwd: Path, args: tuple[str, ...], timeout: float, env: dict[str, str] | None) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env(env))
    assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def run(cwd: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    """``args`` in ``cwd``; its output (stdout then stderr), asserting it succeeded."""
    proc = _run(cwd, args, timeout, env)
    return proc.stdout + proc.stderr


def run_json(cwd: Path, *args: str, timeout: float = 600) -> Any:
    """``args`` (a command with --json) in ``cwd``; its stdout parsed."""
    return json.loads(_run(cwd, args, timeout, None).stdout)


def small_campaign(params: dict) -> dict:
    """params.yaml's campaign at test size: one DP8 engine instead of the rack's topology, one low level,
    short virtual windows."""
    params["topology"] = None
    params["hardware"]["gpu_count"] = 8
    params["engine"].update(tensor_parallel_size=1, data_parallel_size=8)
    params["load"].update(levels=[8], warmup_s=5, duration_s=30, drain_s=60, min_requests=5)
    params["tracking"]["mlflow_uri"] = "sqlite:///mlflow.db"
    return params


def make_copy(root: Path) -> Path:
    """The project's pipeline files under ``root``, a git repository with one commit, the campaign small."""
    for f in FILES:
        src, dst = REPO / f, root / f
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    spec_path = root / "workloads/agentx-like.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["sessions"] = 8
    spec["session"]["task_tokens"].update(median=20000, min=8000, max=40000)
    spec["session"]["turns"].update(median=6, max=12)
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    params_path = root / "params.yaml"
    params_path.write_text(yaml.safe_dump(small_campaign(yaml.safe_load(params_path.read_text())), sort_keys=False))
    run(root, "git", "init", "-q", "-b", "main")
    run(root, "git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    run(root, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy")
    return root
