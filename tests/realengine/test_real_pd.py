"""One real prefill/decode pair (1P1D) of vLLM's CPU build behind benchcamp's router, deployed from a
`topology:` by benchcamp's own deploy on loopback: both instances run vLLM's disk-backed ExampleConnector
(kv_both, one shared folder; NixlConnector fails on the CPU build: "NIXL is not available"), the router
sends the prompt to the prefill with max_tokens=1 and streams the decode's answer.

What it shows: the decode computed only the prompt's tail (cached_tokens = the whole blocks the prefill
stored, by the connector's alignment rule that the simulated connector copies), counted as vLLM's
external prefix-cache hits, and its greedy output is the prefill engine's own; then every process of the
topology and the connector's folder are gone."""

from __future__ import annotations

import json
import urllib.request

import pytest
from realengine_support import real_config, running_engine

from benchcamp.deploy import execution_engines
from benchcamp.loadgen.scrape import delta, parse_prometheus
from benchcamp.sim.engine.kv_connector import lookup_blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROMPT = list(range(2000, 2600))  # 600 tokens of the tiny model's 4096-id vocabulary, none of them in readiness's probe


def _complete(url: str, key: str, model: str, max_tokens: int) -> tuple[str, dict]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "min_tokens": max_tokens, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [json.loads(line[5:]) for line in r.read().decode().splitlines()
                  if line.startswith("data:") and "[DONE]" not in line]
    text = "".join(c["text"] for e in events for c in e.get("choices") or [])
    return text, next(e["usage"] for e in events if e.get("usage"))


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_prometheus(r.read().decode())


def test_a_real_1p1d_through_the_router(vllm_install, tmp_path, no_engine_leftovers):
    role = {"gpus_per_node": 1, "data_parallel_size": 1, "enable_expert_parallel": False, "max_num_seqs": 4,
            "max_num_batched_tokens": 2048,
            "kv_connector": {"kind": "ExampleConnector", "shared_storage_path": str(tmp_path / "kv")}}
    topo = {"prefill": role, "decode": role, "router": {"pd_disaggregation": True}}
    cfg = real_config(tmp_path, **{"hardware.gpu_count": 2, "topology": json.dumps(topo)})
    with running_engine(cfg, tmp_path, "realengine-pd") as dep:
        prefill, decode = (p for p in dep.handle["peers"])
        assert (prefill["name"], decode["name"], dep.handle["name"]) == ("engine-p0", "engine-d0", "router")
        before = _metrics(dep.endpoint)  # after readiness's probes, which went through the router too
        text, usage = _complete(dep.endpoint, dep.api_key, cfg.served_model_name, 8)
        bs = cfg.engine.block_size
        assert usage["completion_tokens"] == 8
        assert usage["prompt_tokens_details"]["cached_tokens"] == lookup_blocks(len(PROMPT), bs) * bs  # 576 of 600
        m = delta(before, _metrics(dep.endpoint))
        assert m["decode/vllm:external_prefix_cache_hits"] == lookup_blocks(len(PROMPT), bs) * bs
        assert m["prefill/vllm:generation_tokens"] == 1 and m["decode/vllm:generation_tokens"] == 8
        # greedy decoding from the transferred KV gives what the prefill engine computes on its own
        assert _complete(prefill["endpoint"], dep.api_key, cfg.served_model_name, 8)[0] == text
        assert list((tmp_path / "kv").glob("kv-shared-*/*"))  # the prefill's blocks, on disk
    assert not execution_engines("realengine-pd")
    assert not list((tmp_path / "kv").glob("kv-shared-*"))  # nothing in vLLM cleans it: the teardown did
