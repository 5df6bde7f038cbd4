"""The secrets registry: flags, env vars, URL passwords, config keys; engine secrets by env; log redaction."""

from __future__ import annotations

import logging

import pytest

from benchcamp.errors import ConfigError
from benchcamp.secrets import redaction
from benchcamp.sim.engine.cli_args import parse_serve_args, redacted_argv


def test_split_engine_secrets_moves_them_to_the_variables_vllm_reads():
    argv = ["vllm", "serve", "m", "--hf-token", "hf_splitsecret1", "--max-num-seqs", "64",
            "--api-key=sk-splitsecret2", "--hf_token", "hf_splitsecret3", "--port", "8000"]
    rest, env = redaction.split_engine_secrets(argv)
    assert rest == ["vllm", "serve", "m", "--max-num-seqs", "64", "--port", "8000"]
    assert env == {"HF_TOKEN": "hf_splitsecret3", "VLLM_API_KEY": "sk-splitsecret2"}
    assert redaction.redact("x hf_splitsecret1 y") == "x *** y"  # registered on the way


def test_a_bare_hf_token_flag_stays_and_hides_nothing_after_it():
    argv = ["serve", "m", "--hf-token", "--max-num-seqs", "64"]
    assert redaction.split_engine_secrets(argv) == (argv, {})
    assert redaction.mask_argv(argv) == argv


def test_a_secret_flag_the_engine_reads_from_no_variable_is_an_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"engine.extra_args: --db-password would put a secret in the engine's argv"):
        redaction.split_engine_secrets(["serve", "m", "--db-password", "hunter2hunter2"])


def test_url_passwords_are_redacted_registered_or_not():
    text = "tracking at http://bench:s3cr3t-pw-unregistered@mlflow:5000/x and postgresql://u:p%40ss@db/m"
    out = redaction.redact(text)
    assert "s3cr3t-pw-unregistered" not in out and "p%40ss" not in out
    assert "http://bench:***@mlflow:5000/x" in out and "https://example.com/a@b" == redaction.redact("https://example.com/a@b")


def test_register_config_finds_keys_flags_urls_referenced_and_secret_env_vars(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_from_environment_1")
    monkeypatch.setenv("MY_GITHUB_TOKEN", "ghp_from_environment_2")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://u:envurlpassword3@mlflow.example")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent-path-not-a-secret")
    monkeypatch.setenv("ENDPOINT_KEY_VAR", "sk-referenced-by-api-key-env-4")
    monkeypatch.setenv("REGION_VAR", "eu-central-1-not-secret")
    found = redaction.register_config({
        "provider": {"endpoint": {"api_key_env": "ENDPOINT_KEY_VAR", "region_env": "REGION_VAR"}},
        "engine": {"extra_args": ["--hf-token", "hf_from_extra_args_5"]},
        "custom": {"db_password": "config-password-6", "note_token": "no"},
        "tracking": {"mlflow_uri": "http://bench:config-url-password-7@127.0.0.1:5000"},
    })
    for value in ("hf_from_environment_1", "ghp_from_environment_2", "envurlpassword3", "sk-referenced-by-api-key-env-4",
                  "hf_from_extra_args_5", "config-password-6", "config-url-password-7"):
        assert value in found
        assert value not in redaction.redact(f"<{value}>")
    assert "/tmp/ssh-agent-path-not-a-secret" not in found and "no" not in found
    assert "eu-central-1-not-secret" not in found  # a *_env key that names no secret


def test_every_log_record_is_redacted_whatever_handler_writes_it(caplog):
    redaction.register("sk-log-record-secret-8")
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").info("connecting with %s to %s", "sk-log-record-secret-8",
                                               "http://u:logged-url-password@host")
    assert caplog.records[-1].getMessage() == "connecting with *** to http://u:***@host"


def test_simulated_engine_masks_every_secret_flag_and_reads_hf_token_from_env(monkeypatch):
    argv = ["m", "--hf-token", "hf_engine_log_1", "--api-key=sk-engine-log-2", "--some-secret", "s3cr3t-unknown-3"]
    shown = " ".join(redacted_argv(argv))
    assert "hf_engine_log_1" not in shown and "sk-engine-log-2" not in shown and "s3cr3t-unknown-3" not in shown
    monkeypatch.setenv("HF_TOKEN", "hf_from_env_for_engine")
    assert parse_serve_args(["m"]).args.hf_token == "hf_from_env_for_engine"


def test_the_shells_working_directory_variables_are_not_secrets(monkeypatch):
    # PWD's last word is "pwd" (a password's abbreviation in config keys); treating the shell's working
    # directory as a secret masked every path in benchcamp's logs as "***/results/...".
    monkeypatch.setenv("PWD", "/home/someone/benchcamp-checkout")
    monkeypatch.setenv("OLDPWD", "/home/someone/previous-dir")
    monkeypatch.setenv("DB_PWD", "hunter2hunter2")
    assert "/home/someone/benchcamp-checkout" not in redaction.env_secrets()
    assert "/home/someone/previous-dir" not in redaction.env_secrets()
    assert "hunter2hunter2" in redaction.env_secrets()
