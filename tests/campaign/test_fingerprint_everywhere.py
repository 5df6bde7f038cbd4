"""One configuration, one fingerprint: the same whether the workload paths are written
relative (params.yaml, the CLI) or made absolute for the workers (the DAGs' resolve_config), and the same in
two checkouts in different folders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchcamp.campaign.form import resolve_items
from benchcamp.config import from_dict, load_config, project_relative

ROOT = Path(__file__).resolve().parents[2]
# What each checkout prints: the CLI's fingerprint (`benchcamp config show`, cwd-relative paths), the one
# resolve_config logs (the item's), and the one every worker recomputes from the item's absolute config
# (the MLflow tag, campaign.json and the report take theirs from it).
PROBE = """
import json, sys
from benchcamp.campaign.form import resolve_items
from benchcamp.config import from_dict, load_config
item = resolve_items({}, "benchcamp_campaign", "manual__probe", "params.yaml")[0]
print(json.dumps({"cli": load_config("params.yaml").fingerprint(), "item": item.fingerprint,
                  "worker": from_dict(item.config).fingerprint(), "spec": item.config["workload"]["spec"],
                  "package": __import__("benchcamp").__file__}))
"""


def test_a_worker_s_absolute_paths_hash_as_the_project_relative_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHCAMP_PROJECT_DIR", str(tmp_path))
    rel = load_config("params.yaml")
    data = rel.to_dict()
    data["workload"]["spec"] = str(tmp_path / rel.workload.spec)
    data["workload"]["data"] = str(tmp_path / rel.workload.data)
    assert from_dict(data).fingerprint() == rel.fingerprint() == "68a22db0b5ed6409"  # the pin of test_config
    # a workload outside the project is another workload: hashed as written
    data["workload"]["data"] = "/elsewhere/agentx-like.parquet"
    assert project_relative("/elsewhere/agentx-like.parquet") == "/elsewhere/agentx-like.parquet"
    assert from_dict(data).fingerprint() != rel.fingerprint()


def test_resolve_config_s_fingerprint_is_the_one_its_workers_compute():
    item = resolve_items({}, "benchcamp_campaign", "manual__x", ROOT / "params.yaml")[0]
    assert Path(item.config["workload"]["spec"]).is_absolute()
    assert item.fingerprint == from_dict(item.config).fingerprint() == load_config("params.yaml").fingerprint()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the project")
def test_two_checkouts_in_different_folders_agree(tmp_path):
    """Clones the project twice (its committed tree) and runs each clone's own code in it, with no
    BENCHCAMP_PROJECT_DIR: every fingerprint in both is the same."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCHCAMP_PROJECT_DIR", "BENCHCAMP_PARAMS")}
    seen = []
    for name in ("one", "checkout-two"):
        dest = tmp_path / name
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, env=env)
        out = subprocess.run(
            [sys.executable, "-c", PROBE],
            cwd=dest,
            env={**env, "PYTHONPATH": str(dest)},
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(out.stdout)
        assert Path(got["package"]).is_relative_to(dest)  # the clone's own code ran
        assert Path(got["spec"]).is_relative_to(dest)  # its paths were made absolute, in its own folder
        assert got["cli"] == got["item"] == got["worker"], got
        seen.append(got["cli"])
    assert seen[0] == seen[1]
