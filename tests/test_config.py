"""benchcamp.config: schema errors name the key and the fix; overrides; fingerprint."""

from __future__ import annotations

import re

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
    assert load_config("params.yaml").workload.spec == "workloads/agentx-like.yaml"
    assert load_config("tests/params-http.yaml").workload.spec == "workloads/agentic-coding.yaml"


def test_the_default_campaigns_fingerprint_is_pinned():
    """The fingerprints of params.yaml and tests/params-http.yaml are pinned, so a change to what a config
    measures (a new field with a default, a changed default, a new section that is fingerprinted when unset) fails
    here, not silently in the nightly's history: runs of different fingerprints are never compared. params.yaml
    sets a topology section, so a new topology field with a default changes its fingerprint
    (UNSET_NOT_FINGERPRINTED covers top-level section keys only). A change made on purpose updates the pins here
    and says why in CHANGELOG.md."""
    assert load_config("params.yaml").fingerprint() == "68a22db0b5ed6409"
    assert load_config("tests/params-http.yaml").fingerprint() == "300607e4822a2b71"


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
    empty = _params(tmp_path, "")
    assert main(["config", "show", "--params", str(empty), "--set", "engine.max_num_seqs=7"]) == 0
    out = capsys.readouterr().out
    assert "max_num_seqs: 7" in out and "# fingerprint: " in out
    assert main(["config", "show", "--params", str(empty), "--set", "engine.nope=1"]) == 2
    assert "engine.nope: unknown key" in capsys.readouterr().err


def test_an_explicit_params_file_that_does_not_exist_is_an_error(tmp_path, capsys, monkeypatch):
    assert main(["config", "show", "--params", str(tmp_path / "nonexistent.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"--params {tmp_path / 'nonexistent.yaml'}: no such file" in err and len(err.splitlines()) == 1
    # only the default name may be absent: the embedded defaults
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show"]) == 0
    assert main(["config", "show", "--params", "/dev/null"]) == 0    # explicitly empty: the defaults


@pytest.mark.parametrize("override, named", [
    ("load.levels=[.inf]", "load.levels.0: must be a finite number"),
    ("load.levels=[.nan]", "load.levels.0: must be a finite number"),
    ("load.duration_s=.inf", "load.duration_s: must be a finite number"),
    ("load.warmup_s=.nan", "load.warmup_s: must be a finite number"),
    ("slo.ttft_s=.inf", "slo.ttft_s: must be a finite number"),
    ("hardware.usd_per_gpu_hour=.inf", "hardware.usd_per_gpu_hour: must be a finite number"),
    ("regression.per_metric={p90_tpot_s: .nan}", "regression.per_metric.p90_tpot_s: must be a finite number"),
])
def test_infinite_and_nan_numbers_are_rejected_naming_the_field(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(None, [override])


def test_a_bad_override_is_not_blamed_on_the_params_file(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("campaign:\n  name: ok\n")
    with pytest.raises(ConfigError) as err:
        load_config(params, ["load.levels=[.inf]"])
    assert str(err.value).startswith(f"invalid configuration in {params} with --set overrides:")


@pytest.mark.parametrize("override, named", [
    ("load.levels=[1e9]", "load.levels=[1000000000.0]: closed-loop levels are concurrent sessions, at most 100,000"),
    ("load.levels=[200000]", "at most 100,000"),
    ("load.duration_s=700000", "load.duration_s=700000: at most 7 days"),
    ("load.drain_s=1e12", "at most 7 days"),
    ("engine.max_num_seqs=10000000", "engine.max_num_seqs=10000000: at most 1,000,000"),
    ("provider.ec2.ttl_hours=1000", "at most 168 hours"),
])
def test_numbers_past_their_sensible_maximum_say_why(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(None, [override])
    assert load_config(None, ["load.levels=[100000]"]).load.levels == [100000]


def test_levels_of_other_modes_are_bounded_too():
    with pytest.raises(ConfigError, match="session arrivals per second, at most 100,000"):
        load_config(None, ["load.mode=open", "load.levels=[1e6]"])
    with pytest.raises(ConfigError, match="time scales"):
        load_config(None, ["load.mode=trace", "load.levels=[5000]"])


def test_kv_cache_dtypes_of_the_pinned_vllm():
    for dtype in ("fp8_ds_mla", "nvfp4", "fp8_inc", "float16"):
        assert load_config(None, [f"engine.kv_cache_dtype={dtype}"]).engine.kv_cache_dtype == dtype
    with pytest.raises(ConfigError, match="engine.kv_cache_dtype"):
        load_config(None, ["engine.kv_cache_dtype=fp7"])


def test_names_of_shipped_profiles_and_baselines_are_checked_at_load():
    with pytest.raises(ConfigError, match=r"pricing.profile='deepseek-v9' is unknown; use one of .*deepseek-v3-offpeak"):
        load_config(None, ["pricing.profile=deepseek-v9"])
    with pytest.raises(ConfigError, match=r"baselines.published: nope unknown"):
        load_config(None, ["baselines.published=[nope]"])
    # explicit prices make the profile name a label only
    cfg = load_config(None, {"pricing.profile": "my-contract",
                             "pricing.usd_per_mtok": {"cached_input": 0.1, "uncached_input": 0.5, "output": 2}})
    assert cfg.pricing.profile == "my-contract"


def test_hardware_gpu_accepts_every_gpu_profile_and_names_them_when_unknown(tmp_path, monkeypatch):
    from benchcamp.profiles import available

    monkeypatch.delenv("BENCHCAMP_PROFILE_PATH", raising=False)
    shipped = available("gpus")
    assert {"a100-sxm", "b200", "b300", "cpu", "h100-sxm", "h200", "mi300x", "mi355x"} <= set(shipped)
    for gpu in shipped:
        assert load_config(None, [f"hardware.gpu={gpu}"]).hardware.gpu == gpu
    with pytest.raises(ConfigError) as err:
        load_config(None, ["hardware.gpu=h300"])
    msg = str(err.value)
    assert "\n" not in msg
    assert f"hardware.gpu=h300: unknown GPU profile; available: {', '.join(shipped)}; " in msg
    assert "BENCHCAMP_PROFILE_PATH at a folder with gpus/h300.yaml (benchcamp calibrate --out writes one)" in msg
    # a user folder's profile (what `benchcamp calibrate --out` writes) is a GPU type like a shipped one
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "h300.yaml").write_text("name: h300\n")
    monkeypatch.setenv("BENCHCAMP_PROFILE_PATH", str(tmp_path))
    assert load_config(None, ["hardware.gpu=h300"]).hardware.gpu == "h300"


def test_engine_profile_defaults_by_hardware_and_is_checked(tmp_path, monkeypatch):
    from benchcamp.sim.engine.settings import EngineSettings

    monkeypatch.delenv("BENCHCAMP_PROFILE_PATH", raising=False)
    base = load_config(None)
    assert base.engine.engine_profile == "" and base.engine_profile == "vllm"
    cpu = load_config(None, ["hardware.gpu=cpu"])
    assert cpu.engine_profile == "vllm-cpu" and EngineSettings.from_config(cpu).engine_profile == "vllm-cpu"
    picked = load_config(None, ["hardware.gpu=cpu", "engine.engine_profile=vllm"])
    assert picked.engine_profile == "vllm" and EngineSettings.from_config(picked).engine_profile == "vllm"
    with pytest.raises(ConfigError) as err:
        load_config(None, ["engine.engine_profile=tgi"])
    msg = str(err.value)
    assert "\n" not in msg
    assert "engine.engine_profile=tgi: unknown engine profile; available: sglang, vllm, vllm-cpu; " in msg
    assert "BENCHCAMP_PROFILE_PATH at a folder with engines/tgi.yaml" in msg


def test_an_unset_engine_profile_keeps_the_fingerprint():
    """engine.engine_profile is left out of the fingerprint while unset (UNSET_NOT_FINGERPRINTED), so a config
    that does not set it keeps the fingerprint pinned for the defaults; set, it is part of what is measured."""
    base = load_config(None)
    assert base.fingerprint() == "fcec604a3988a9e9"
    assert load_config(None, ["engine.engine_profile=sglang"]).fingerprint() != base.fingerprint()
    assert base.to_dict()["engine"]["engine_profile"] == ""   # still shown and logged


def test_a_level_listed_twice_is_rejected():
    with pytest.raises(ConfigError, match=r"load.levels=\[8.0, 8.0\]: a level appears twice"):
        load_config(None, ["load.levels=[8, 8]"])
