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
