"""Secrets never reach MLflow params or the logged config."""

import json

from benchcamp.config import load_config
from benchcamp.secrets.redaction import is_secret_key, mask_argv, register, safe_params, scrub


def test_secret_named_keys_are_masked_but_not_their_references_or_token_counts():
    assert is_secret_key("provider.hf_token") and is_secret_key("x.aws_secret_access_key")
    assert is_secret_key("x.password") and is_secret_key("x.api-key") and is_secret_key("x.apikey")
    assert not is_secret_key("provider.endpoint.api_key_env")  # names an env var, holds no secret
    assert not is_secret_key("provider.ec2.key_name")  # an EC2 key-pair name
    assert not is_secret_key("engine.max_num_batched_tokens") and not is_secret_key("load.max_requests")
    assert not is_secret_key("engine.long_prefill_token_threshold")  # vLLM's chunk cap, in tokens
    assert mask_argv(["vllm", "--long-prefill-token-threshold", "256"]) == ["vllm", "--long-prefill-token-threshold", "256"]
    assert is_secret_key("x.long_prefill_token") and is_secret_key("x.prefill_token")  # the exception is exact
    params = safe_params({"a.hf_token": "hf_live_123456789", "a.db_password": "hunter22", "a.empty_token": "",
                          "engine.max_num_batched_tokens": 8192})
    assert params == {"a.hf_token": "***", "a.db_password": "***", "a.empty_token": "",
                      "engine.max_num_batched_tokens": "8192"}


def test_secret_flags_in_argument_lists_and_registered_secrets_are_masked():
    key = "sk-registered-secret-value-42"
    register(key)
    argv = ["--api-key", "abc12345678", "--hf-token=hf_xyz987654", "--max-num-seqs", "64", f"--note={key}"]
    assert mask_argv(argv) == ["--api-key", "***", "--hf-token=***", "--max-num-seqs", "64", "--note=***"]
    cfg = load_config(None, {"engine.extra_args": argv, "campaign.description": f"run with {key}"})
    params = safe_params(cfg.flat())
    text = json.dumps(params)
    assert key not in text and "abc12345678" not in text and "hf_xyz987654" not in text
    assert params["engine.max_num_batched_tokens"] == str(cfg.engine.max_num_batched_tokens)
    scrubbed = scrub(cfg.to_dict())
    assert key not in json.dumps(scrubbed)
    assert scrubbed["engine"]["extra_args"][:2] == ["--api-key", "***"]
    assert scrubbed["provider"]["endpoint"]["api_key_env"] == "BENCHCAMP_API_KEY"


def test_long_param_values_are_bounded():
    assert len(safe_params({"x.notes": "y" * 10000})["x.notes"]) == 6000


def test_argv_secrets_are_the_values_mask_argv_hides():
    from benchcamp.secrets.redaction import argv_secrets
    argv = ["vllm", "serve", "m", "--hf-token", "hf_secretvalue1", "--max-num-seqs", "64",
            "--api-key=sk-secretvalue2", "--port", "8000"]
    assert argv_secrets(argv) == ["hf_secretvalue1", "sk-secretvalue2"]
    assert argv_secrets(["vllm", "serve", "--max-num-batched-tokens", "8192"]) == []
