"""Secret references (benchcamp.secrets.refs) and the refusal of secrets given as values."""

from __future__ import annotations

import os

import pytest

from benchcamp.config import load_config
from benchcamp.deploy import Deployment
from benchcamp.errors import ConfigError
from benchcamp.secrets import redaction
from benchcamp.secrets import refs as secret_refs

TOKEN = "hf_refProbeToken_0123456789"


def test_env_and_file_references_resolve_and_register(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHCAMP_PROBE_HF", TOKEN)
    assert secret_refs.resolve("env:BENCHCAMP_PROBE_HF") == TOKEN
    assert redaction.redact(f"x {TOKEN}") == "x ***"
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    assert secret_refs.resolve(f"file:{f}") == TOKEN
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others.*chmod 600"):
        secret_refs.resolve(f"file:{f}", "engine.hf_token_ref")
    with pytest.raises(ConfigError, match="BENCHCAMP_PROBE_MISSING is not set"):
        secret_refs.resolve("env:BENCHCAMP_PROBE_MISSING")


def test_airflow_references_need_the_resolvers_tasks_install(monkeypatch):
    monkeypatch.setattr(secret_refs, "_resolvers", {})
    with pytest.raises(ConfigError, match="inside Airflow tasks only"):
        secret_refs.resolve("airflow-variable:hf_token")
    got = []
    monkeypatch.setattr(secret_refs, "_resolvers", {"airflow-variable": lambda key: TOKEN if key == "hf" else None})
    monkeypatch.setattr(secret_refs, "_sinks", [got.append])
    assert secret_refs.resolve("airflow-variable:hf") == TOKEN and got == [TOKEN]
    with pytest.raises(ConfigError, match="empty or does not exist"):
        secret_refs.resolve("airflow-variable:other")


def test_hf_token_ref_takes_references_only_and_never_echoes_a_token():
    cfg = load_config(None, {"engine.hf_token_ref": "airflow-variable:hf_token"})
    assert cfg.engine.hf_token_ref == "airflow-variable:hf_token"
    assert cfg.fingerprint() == load_config(None).fingerprint()  # where the token lives is not what is measured
    assert not redaction.is_secret_key("engine.hf_token_ref")
    with pytest.raises(ConfigError) as exc:
        load_config(None, {"engine.hf_token_ref": TOKEN})
    assert "engine.hf_token_ref: expected a reference" in str(exc.value) and TOKEN not in str(exc.value)


def test_engine_secret_env_maps_the_reference_to_hf_token(monkeypatch):
    monkeypatch.setenv("BENCHCAMP_PROBE_HF", TOKEN)
    cfg = load_config(None, {"engine.hf_token_ref": "env:BENCHCAMP_PROBE_HF"})
    assert secret_refs.engine_secret_env(cfg.engine.hf_token_ref) == {"HF_TOKEN": TOKEN}
    assert secret_refs.engine_secret_env(load_config(None).engine.hf_token_ref) == {}


def test_literal_secrets_name_the_place_and_the_fix_never_the_value():
    conf = {"matrix": [{"engine.extra_args": ["--max-num-seqs", "8", "--hf-token", TOKEN]}],
            "overrides": {"engine.extra_args": ["--api-key=sk-literal-123456789"]},
            "endpoint_url": "http://user:pw-literal-123456@host:8000", "notify": "log"}
    found = redaction.literal_secrets(conf)
    assert len(found) == 3, found
    assert all(TOKEN not in f and "sk-literal" not in f and "pw-literal" not in f for f in found)
    assert found[0].startswith("matrix[0].engine.extra_args: --hf-token takes a secret") and "hf_token_ref" in found[0]
    assert "--api-key" in found[1] and "airflow_conn_id" in found[1]
    assert found[2].startswith("endpoint_url: a password in a URL")
    # references and bare flags are fine
    assert redaction.literal_secrets({"engine.hf_token_ref": "env:HF_TOKEN", "x": ["--hf-token", "--y", "1"],
                                    "provider.endpoint.api_key_env": "BENCHCAMP_API_KEY"}) == []


def test_deployment_dict_carries_the_key_reference_not_the_key(monkeypatch):
    from benchcamp.deploy.keys import deployment_api_key

    dep = Deployment(endpoint="http://h:1", api_key="k" * 43, log_path=None, handle={"kind": "endpoint"},
                     api_key_ref="env:BENCHCAMP_PROBE_KEY")
    d = dep.to_dict()
    assert "api_key" not in d and "k" * 43 not in str(d) and "k" * 43 not in repr(dep)
    monkeypatch.setenv("BENCHCAMP_PROBE_KEY", "from-env-key-123456")
    assert deployment_api_key(None, d) == "from-env-key-123456"
    kept = Deployment(endpoint="http://h:1", api_key=None, log_path=None,
                      api_key_ref=secret_refs.keep_in_process("kept-here-123456")).to_dict()
    assert deployment_api_key(None, kept) == "kept-here-123456"
    assert deployment_api_key(None, {"endpoint": "", "api_key_ref": None}) is None
    assert os.environ.get("BENCHCAMP_PROBE_KEY")


@pytest.mark.parametrize("ref", ["ec2:exec-1", "slurm:exec-1"])
def test_a_provider_kept_key_without_the_config_names_what_is_missing(ref):
    from benchcamp.deploy.keys import deployment_api_key

    with pytest.raises(ConfigError, match=f"API key \\({ref}\\) is kept by its provider: pass the campaign's config"):
        deployment_api_key(None, {"endpoint": "http://h:1", "api_key_ref": ref})
