"""benchcamp.config: schema errors name the key and the fix; overrides; fingerprint."""

from __future__ import annotations

import pytest

from benchcamp.cli import main
from benchcamp.config import ConfigError, apply_overrides, load_config, parse_override


def _params(tmp_path, text: str):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p


def test_defaults_and_repo_params_are_valid():
    cfg = load_config(None)
    assert cfg.engine.tensor_parallel_size * cfg.engine.data_parallel_size == cfg.hardware.gpu_count
    assert load_config("params.yaml").workload.spec == "workloads/agentic-coding.yaml"


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(_params(tmp_path, "engine:\n  max_num_seqz: 3\n"))
    assert "engine.max_num_seqz: unknown key" in str(err.value)
    with pytest.raises(ConfigError, match="valid keys: .*max_num_seqs"):
        load_config(None, ["engine.max_num_seqz=3"])
    with pytest.raises(ConfigError, match="unknown key 'enginee'"):
        load_config(None, ["enginee.tensor_parallel_size=2"])


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(_params(tmp_path, "engine:\n  max_num_seqs: lots\n"))
    assert "engine.max_num_seqs" in str(err.value) and "'lots'" in str(err.value)
    with pytest.raises(ConfigError, match="engine.kind"):
        load_config(None, ["engine.kind=tgi"])


def test_parallel_layout_must_match_gpu_count():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["engine.tensor_parallel_size=3", "engine.data_parallel_size=2", "hardware.gpu_count=8"])
    msg = str(err.value)
    assert "tensor_parallel_size=3" in msg and "gpu_count=8" in msg and "tp x dp = gpu_count" in msg
    ok = load_config(None, ["engine.tensor_parallel_size=4", "engine.data_parallel_size=2", "hardware.gpu_count=8"])
    assert ok.engine.tensor_parallel_size == 4


def test_set_parsing():
    assert parse_override("engine.max_num_seqs=256") == (["engine", "max_num_seqs"], 256)
    assert parse_override("engine.enable_prefix_caching=false")[1] is False
    assert parse_override("load.levels=[1, 4, 16]")[1] == [1, 4, 16]
    assert parse_override("campaign.description=a=b")[1] == "a=b"  # only the first '=' splits
    assert parse_override("tracking.experiment=")[1] == ""
    for bad, why in [("engine.max_num_seqs", "expected KEY=VALUE"), ("engine..x=1", "dotted"),
                     ("load.levels=[1, 2", "not valid YAML")]:
        with pytest.raises(ConfigError, match=why):
            parse_override(bad)
    data = apply_overrides({"engine": {"max_num_seqs": 1}}, ["engine.max_num_seqs=64"])
    assert data == {"engine": {"max_num_seqs": 64}}
    assert load_config(None, ["load.levels=[2, 4]"]).load.levels == [2, 4]


def test_fingerprint_tracks_what_is_measured():
    base = load_config(None)
    assert base.fingerprint() == load_config(None).fingerprint()
    assert load_config(None, ["engine.max_num_seqs=128"]).fingerprint() != base.fingerprint()
    assert load_config(None, ["engine.enable_prefix_caching=false"]).fingerprint() != base.fingerprint()
    assert load_config(None, ["tracking.mlflow_uri=http://127.0.0.1:1"]).fingerprint() == base.fingerprint()


def test_config_show_cli(tmp_path, capsys):
    assert main(["config", "show", "--params", str(tmp_path / "absent.yaml"), "--set", "engine.max_num_seqs=7"]) == 0
    out = capsys.readouterr().out
    assert "max_num_seqs: 7" in out and "# fingerprint: " in out
    assert main(["config", "show", "--params", str(tmp_path / "absent.yaml"), "--set", "engine.nope=1"]) == 2
    assert "engine.nope: unknown key" in capsys.readouterr().err


def test_names_of_shipped_profiles_and_baselines_are_checked_at_load():
    with pytest.raises(ConfigError, match=r"pricing.profile='deepseek-v9' is unknown; use one of .*deepseek-v3-offpeak"):
        load_config(None, ["pricing.profile=deepseek-v9"])
    with pytest.raises(ConfigError, match=r"baselines.published: nope unknown"):
        load_config(None, ["baselines.published=[nope]"])
    # explicit prices make the profile name a label only
    cfg = load_config(None, {"pricing.profile": "my-contract",
                             "pricing.usd_per_mtok": {"cached_input": 0.1, "uncached_input": 0.5, "output": 2}})
    assert cfg.pricing.profile == "my-contract"


def test_a_level_listed_twice_is_rejected():
    with pytest.raises(ConfigError, match=r"load.levels=\[8.0, 8.0\]: a level appears twice"):
        load_config(None, ["load.levels=[8, 8]"])
