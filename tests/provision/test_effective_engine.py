"""What really runs is what the results say: engine.kind=vllm without vLLM or a GPU runs simulated."""

from __future__ import annotations

import pytest

from benchcamp.config import load_config
from benchcamp.deploy import effective_config, real_vllm_available


@pytest.mark.skipif(real_vllm_available(), reason="vLLM and a GPU are present here: the real engine would run")
def test_vllm_requested_without_vllm_or_gpu_is_tagged_simulated():
    asked = load_config(None, ["engine.kind=vllm"])
    ran = effective_config(asked)
    assert ran.engine.kind == "simulated"
    assert ran.fingerprint() != asked.fingerprint()       # a different thing was measured
    assert ran.engine.model_copy(update={"kind": "vllm"}) == asked.engine   # nothing else changed


def test_other_providers_and_simulated_are_left_alone():
    for sets in (["engine.kind=simulated"],
                 ["engine.kind=vllm", "provider.kind=endpoint", "provider.endpoint.url=http://gpu:8000"]):
        cfg = load_config(None, sets)
        assert effective_config(cfg) is cfg
