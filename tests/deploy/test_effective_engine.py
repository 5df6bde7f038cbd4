"""What runs is what was asked for: engine.kind=vllm on the local provider runs the vLLM found here
(BENCHCAMP_VLLM, the real-engine environment, PATH), checked against engine.version and hardware.gpu;
with none, or another, one line names the fix and nothing runs in its place.

The installations here are real environments as far as benchcamp looks: an executable and the
`vllm` distribution's metadata (dist-info) in its site-packages; the executable is never run."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchcamp.config import ConfigError, load_config
from benchcamp.deploy import check_engine, find_vllm


def fake_install(root: Path, version: str, models: tuple[str, ...] = ()) -> Path:
    """bin/vllm + lib/python3.11/site-packages/vllm-<version>.dist-info, as pip leaves them."""
    exe = root / "venv" / "bin" / "vllm"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    dist = root / "venv" / "lib" / "python3.11" / "site-packages" / f"vllm-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    for m in models:
        (root / "models" / m).mkdir(parents=True)
    return exe


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No vLLM at all: no real-engine environment, nothing on PATH, no BENCHCAMP_VLLM."""
    monkeypatch.setenv("BENCHCAMP_REAL_ENGINE_HOME", str(tmp_path / "no-home"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("BENCHCAMP_VLLM", raising=False)
    return tmp_path


def test_vllm_asked_for_and_none_here_names_the_make_target(nowhere):
    assert find_vllm() is None
    with pytest.raises(ConfigError, match=r"no vLLM here; build the real CPU engine with `make real-engine`"):
        check_engine(load_config(None, ["engine.kind=vllm"]))


def test_the_real_engine_environment_is_found_with_its_version_and_models(nowhere, monkeypatch):
    home = nowhere / "home"
    exe = fake_install(home / "vllm-cpu", "0.32.0+cpu", models=("tiny-llama",))
    (home / "vllm-cpu" / "stamp.json").write_text("{}")
    monkeypatch.setenv("BENCHCAMP_REAL_ENGINE_HOME", str(home))
    found = find_vllm()
    assert (found.executable, found.version, found.release, found.cpu) == (exe, "0.32.0+cpu", "0.32.0", True)
    assert found.model_path("benchcamp/tiny-llama") == str(home / "vllm-cpu" / "models" / "tiny-llama")
    assert found.model_path("benchcamp/other") == "benchcamp/other"   # not built: as given
    assert found.model_path("meta-llama/Llama-3.1-8B") == "meta-llama/Llama-3.1-8B"
    ok = load_config(None, ["engine.kind=vllm", "engine.version=0.32.0", "hardware.gpu=cpu", "engine.block_size=32",
                            "engine.data_parallel_size=1", "hardware.gpu_count=1"])
    assert check_engine(ok) == found
    # a half-built environment (no stamp: the build did not finish) is not taken
    (home / "vllm-cpu" / "stamp.json").unlink()
    assert find_vllm() is None


@pytest.mark.parametrize(("sets", "message"), [
    (["engine.version=0.33.0", "hardware.gpu=cpu", "engine.block_size=32"],
     r"engine.version=0.33.0 but the vLLM installed here is 0.32.0 \(vllm 0.32.0\+cpu at .*\); "
     r"set engine.version=0.32.0, or install vllm==0.33.0"),
    (["engine.version=0.32.0", "hardware.gpu=h200", "engine.block_size=32"],
     r"hardware.gpu=h200 but the vLLM here is a CPU build .*; set hardware.gpu=cpu"),
    (["engine.version=0.32.0", "hardware.gpu=cpu", "engine.block_size=16"],
     r"engine.block_size=16: the CPU build of vLLM takes KV blocks of a multiple of 32 tokens; "
     r"set engine.block_size=32"),
])
def test_a_cpu_build_checks_version_hardware_and_block_size(nowhere, monkeypatch, sets, message):
    monkeypatch.setenv("BENCHCAMP_VLLM", str(fake_install(nowhere / "env", "0.32.0+cpu")))
    cfg = load_config(None, ["engine.kind=vllm", "engine.data_parallel_size=1", "hardware.gpu_count=1", *sets])
    with pytest.raises(ConfigError, match=message):
        check_engine(cfg)


def test_a_gpu_build_on_path_must_not_stand_for_the_cpu(nowhere, monkeypatch):
    exe = fake_install(nowhere / "gpu-env", "0.33.0")
    monkeypatch.setenv("PATH", str(exe.parent))
    assert find_vllm().source == "PATH" and not find_vllm().cpu
    assert check_engine(load_config(None, ["engine.kind=vllm"])).version == "0.33.0"
    with pytest.raises(ConfigError, match=r"hardware.gpu=cpu but the vLLM here is a GPU build .*; set the GPU's"):
        check_engine(load_config(None, ["engine.kind=vllm", "hardware.gpu=cpu"]))


def test_a_benchcamp_vllm_that_is_no_installation_is_refused(nowhere, monkeypatch):
    monkeypatch.setenv("BENCHCAMP_VLLM", str(nowhere / "missing" / "vllm"))
    with pytest.raises(ConfigError, match=r"BENCHCAMP_VLLM=.*: no vllm executable with vLLM's package metadata"):
        find_vllm()


def test_other_providers_the_simulated_engine_and_the_virtual_clock_check_nothing(nowhere):
    for sets in (["engine.kind=simulated"], ["load.clock=virtual"],
                 ["engine.kind=vllm", "provider.kind=endpoint", "provider.endpoint.url=http://gpu:8000"]):
        assert check_engine(load_config(None, sets)) is None
