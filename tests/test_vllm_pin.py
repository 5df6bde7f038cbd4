"""engine.version follows the vLLM pinned in uv.lock, and is checked against an installed vLLM."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from benchcamp.config import PINNED_VLLM, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_pinned_version_is_the_lockfiles_vllm():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    assert PINNED_VLLM == locked["vllm"]
    assert load_config(None).engine.version == PINNED_VLLM
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["engine"]["version"] == PINNED_VLLM


def test_ec2_image_tag_is_derived_from_the_version():
    from benchcamp.deploy.remote import engine_command, user_data

    for version in (PINNED_VLLM, "0.11.0"):
        cfg = load_config(None, {"provider.kind": "ec2", "provider.ec2.install": "container", "engine.version": version})
        script = user_data(cfg, engine_command(cfg)[0], parameter="/benchcamp/engine-env/x")
        assert f"{cfg.provider.ec2.container_image}:v{version} " in script


def test_benchcamp_run_stops_on_an_installed_vllm_of_another_version(tmp_path):
    """End to end: a vLLM installation of another version (its executable and package metadata; the
    executable is never run), named by BENCHCAMP_VLLM, and `benchcamp run` stops before anything runs."""
    import os
    import subprocess
    import sys

    exe = tmp_path / "env" / "bin" / "vllm"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 1\n")
    dist = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "vllm-0.34.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.1\n")
    env = {**os.environ, "BENCHCAMP_VLLM": str(exe)}
    done = subprocess.run(
        [sys.executable, "-m", "benchcamp.cli", "run", "--params", "/dev/null", "--set", "engine.kind=vllm",
         "--no-track"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"benchcamp: engine.version={PINNED_VLLM} but the vLLM installed here is 0.34.1 (vllm 0.34.1 at {exe} "
        f"(BENCHCAMP_VLLM)); set engine.version=0.34.1, or install vllm=={PINNED_VLLM}"]
    assert not (tmp_path / "results").exists()  # stopped before anything ran
