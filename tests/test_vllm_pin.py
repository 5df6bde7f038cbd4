"""engine.version follows the vLLM pinned in uv.lock, and is checked against an installed vLLM."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from benchcamp.commands import common
from benchcamp.config import ConfigError, load_config
from benchcamp.vllm_pin import PINNED_VLLM, check_installed

ROOT = Path(__file__).resolve().parents[1]


def test_pinned_version_is_the_lockfiles_vllm():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    assert PINNED_VLLM == locked["vllm"]
    assert load_config(None).engine.version == PINNED_VLLM
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["engine"]["version"] == PINNED_VLLM


def test_ec2_image_tag_is_derived_from_the_version():
    from benchcamp.provision.ec2 import Ec2Provider  # noqa: F401  (the tag line reads cfg.engine.version)

    text = (ROOT / "benchcamp/provision/ec2.py").read_text()
    assert 'f"{ec2.container_image}:v{cfg.engine.version}"' in text


def test_a_mismatch_with_the_installed_vllm_names_both():
    check_installed("0.33.0", installed="0.33.0")
    with pytest.raises(ConfigError, match=r"engine.version=0.11.0 but the vLLM installed here is 0.33.0; set "
                                          r"engine.version=0.33.0, or install vllm==0.11.0"):
        check_installed("0.11.0", installed="0.33.0")


def test_commands_check_a_local_vllm_engine(tmp_path, monkeypatch):
    import argparse

    from benchcamp import vllm_pin

    monkeypatch.setattr(vllm_pin, "installed_vllm", lambda: "0.34.1")   # stands in for an installed vLLM
    args = argparse.Namespace(params=str(tmp_path / "p.yaml"), overrides=["engine.kind=vllm"])
    (tmp_path / "p.yaml").write_text("")
    with pytest.raises(ConfigError, match="installed here is 0.34.1"):
        common.config_from_args(args)
    # the simulated engine, or vLLM not installed: nothing to check
    args.overrides = ["engine.kind=simulated"]
    assert common.config_from_args(args).engine.kind == "simulated"
    monkeypatch.setattr(vllm_pin, "installed_vllm", lambda: None)
    args.overrides = ["engine.kind=vllm"]
    assert common.config_from_args(args).engine.version == PINNED_VLLM


def test_benchcamp_run_stops_on_an_installed_vllm_of_another_version(tmp_path):
    """End to end: an installed vLLM as Python sees one (a real dist-info record on the path; the
    wheel itself needs CUDA, so only its package metadata is installed here), `benchcamp run`."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    (site / "vllm-0.34.1.dist-info").mkdir(parents=True)
    (site / "vllm-0.34.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "benchcamp.cli", "run", "--params", "/dev/null", "--set", "engine.kind=vllm",
         "--no-track"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"benchcamp: engine.version={PINNED_VLLM} but the vLLM installed here is 0.34.1; set "
        f"engine.version=0.34.1, or install vllm=={PINNED_VLLM}"]
    assert not (tmp_path / "results").exists()  # stopped before anything ran
