"""Local provider + deploy with the simulated engine over real loopback HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import psutil
import pytest

from benchcamp.config import load_config
from benchcamp.deploy import (
    EngineError,
    deploy,
    execution_engines,
    log_tail,
    simulated_argv,
    stop,
    vllm_argv,
    wait_ready,
)
from benchcamp.provision import get_provider
from benchcamp.secrets import redaction


def _cfg(**over):
    return load_config(None, {"engine.model": "meta-llama/Llama-3.1-8B-Instruct", "engine.model_profile": "llama-3.1-8b",
                              "engine.data_parallel_size": 1, "hardware.gpu_count": 1, **over})


def _get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None


def test_vllm_argv_has_every_engine_flag_and_no_key():
    cfg = load_config(None, {"engine.enable_prefix_caching": False, "engine.max_model_len": 4096,
                             "engine.extra_args": ["--seed", "1"], "provider.local.port": 8123})
    argv = vllm_argv(cfg)
    assert argv[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
    pairs = dict(zip(argv[3::], argv[4::]))
    assert pairs["--tensor-parallel-size"] == "1" and pairs["--data-parallel-size"] == "8"
    assert pairs["--max-num-seqs"] == "256" and pairs["--max-num-batched-tokens"] == "8192"
    assert pairs["--max-model-len"] == "4096" and pairs["--port"] == "8123" and pairs["--host"] == "127.0.0.1"
    assert "--no-enable-prefix-caching" in argv and "--enable-expert-parallel" in argv
    assert "--enable-prompt-tokens-details" in argv and argv[-2:] == ["--seed", "1"]
    assert not any("api-key" in a for a in argv)
    sim = simulated_argv(cfg)
    assert sim[1:5] == ["-m", "benchcamp.cli", "engine", "serve"] and sim[5:5 + len(argv) - 2] == argv[2:]
    assert sim[-8:] == ["--gpu", "h200", "--num-gpus", "8", "--model-profile", "deepseek-v3",
                        "--engine-profile", "vllm"]
    cpu = simulated_argv(load_config(None, {"hardware.gpu": "cpu"}))
    assert cpu[-2:] == ["--engine-profile", "vllm-cpu"]          # the default for vLLM's CPU build
    picked = simulated_argv(load_config(None, {"hardware.gpu": "cpu", "engine.engine_profile": "sglang"}))
    assert picked[-2:] == ["--engine-profile", "sglang"]
    assert "--num-gpu-blocks-override" not in argv                     # vLLM sizes its KV cache itself
    cfg = load_config(None, {"engine.num_gpu_blocks_override": 64})
    argv = vllm_argv(cfg)
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "64"
    assert "--long-prefill-token-threshold" not in argv                 # 0: vLLM's default, not passed
    argv = vllm_argv(load_config(None, {"engine.long_prefill_token_threshold": 2048}))
    assert argv[argv.index("--long-prefill-token-threshold") + 1] == "2048"


def test_a_local_deployment_runs_the_found_vllm_and_serves_its_model_folder():
    """The real engine's argv: the found executable, the model's folder, the config's served name."""
    cfg = _cfg(**{"engine.model": "benchcamp/tiny-llama"})
    argv = vllm_argv(cfg, "127.0.0.1", 8000, executable="/env/bin/vllm", model="/env/models/tiny-llama")
    assert argv[:3] == ["/env/bin/vllm", "serve", "/env/models/tiny-llama"]
    assert argv[argv.index("--served-model-name") + 1] == "benchcamp/tiny-llama"


def test_local_simulated_engine_ready_requires_key_and_stop_leaves_no_process(tmp_path):
    cfg = _cfg()
    provider = get_provider(cfg)
    node = provider.provision("test-local-1")
    dep = deploy(node, cfg, log_dir=tmp_path)
    try:
        wait_ready(dep, timeout=60)
        assert _get(dep.endpoint + "/v1/models")[0] == 401
        assert _get(dep.endpoint + "/v1/models", "wrong-key-123")[0] == 401
        status, body = _get(dep.endpoint + "/v1/models", dep.api_key)
        assert status == 200 and cfg.served_model_name in [m["id"] for m in body["data"]]
        proc = psutil.Process(dep.handle["pid"])
        assert dep.api_key not in " ".join(proc.cmdline())  # key travels by env, not argv
        assert dep.api_key not in repr(dep)
        assert [p.pid for p in execution_engines("test-local-1")] == [dep.handle["pid"]]
    finally:
        stop(dep)
    assert not psutil.pid_exists(dep.handle["pid"]) or psutil.Process(dep.handle["pid"]).status() == psutil.STATUS_ZOMBIE
    assert execution_engines("test-local-1") == []
    assert (tmp_path / "engine.log").exists() and json.loads((tmp_path / "engine-argv.json").read_text())["engine"] == "simulated"
    stop(dep)  # idempotent


def test_the_deprovision_step_kills_an_engine_whose_stop_never_ran(tmp_path):
    """The engines' safety net is the campaign's deprovision step (deploy's kill, then the provider's release)."""
    from benchcamp.campaign import steps
    from benchcamp.campaign.handoff import Node
    from benchcamp.campaign.layout import StoreLayout
    from benchcamp.results.store import LocalStore

    cfg = _cfg()
    node = get_provider(cfg).provision("test-local-2")
    dep = deploy(node, cfg, log_dir=tmp_path)
    wait_ready(dep, timeout=60)
    assert execution_engines("test-local-2") != []
    get_provider(cfg).deprovision(node)  # the local provider has nothing to release: the engine still runs
    assert execution_engines("test-local-2") != []
    steps.deprovision(cfg, LocalStore(tmp_path / "results"), StoreLayout.for_execution("t", "test-local-2"),
                      Node.of_provider(node))
    assert execution_engines("test-local-2") == []


def test_engine_that_dies_at_start_raises_with_its_log_tail_and_no_key(tmp_path):
    cfg = _cfg(**{"engine.extra_args": ["--fault", "no-such-fault=1"]})
    dep = deploy(get_provider(cfg).provision("test-local-3"), cfg, log_dir=tmp_path)
    with open(dep.log_path, "a") as f:  # the key must be redacted even if the engine printed it
        f.write(f"debug: key={dep.api_key}\n")
    with pytest.raises(EngineError) as err:
        wait_ready(dep, timeout=60)
    stop(dep)
    msg = str(err.value)
    assert "exited before it was ready" in msg and "last" in msg and "lines of" in msg
    assert dep.api_key not in msg and redaction.MASK in "\n".join(log_tail(dep))


def test_wait_ready_times_out_with_a_clear_message(tmp_path):
    from benchcamp.deploy import Deployment, free_port
    dep = Deployment(endpoint=f"http://127.0.0.1:{free_port()}", api_key=None, log_path=None, handle={"kind": "endpoint"})
    with pytest.raises(EngineError, match="not ready after 1s"):
        wait_ready(dep, timeout=1)


def test_endpoint_provider_key_from_argument_or_env(monkeypatch):
    cfg = load_config(None, {"provider.kind": "endpoint", "provider.endpoint.url": "http://127.0.0.1:9/",
                             "provider.endpoint.api_key_env": "MY_BENCH_KEY"})
    node = get_provider(cfg).provision("e1")
    assert node.host == "http://127.0.0.1:9"
    monkeypatch.setenv("MY_BENCH_KEY", "from-env-abcdefgh")
    assert deploy(node, cfg).api_key == "from-env-abcdefgh"
    assert deploy(node, cfg, api_key="from-conn-abcdefgh").api_key == "from-conn-abcdefgh"
    bad = load_config(None, {"provider.kind": "endpoint", "provider.endpoint.url": "http://h:1/v1"})
    with pytest.raises(Exception, match="drop the trailing /v1"):
        get_provider(bad).provision("e2")


def test_redact_replaces_registered_secrets():
    key = redaction.new_api_key()
    assert redaction.redact(f"Authorization: Bearer {key}") == "Authorization: Bearer ***"
    assert redaction.redact("short abc", ["abc"]) == "short abc"  # too short to be a secret
