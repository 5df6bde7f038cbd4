"""The report's topology block and the MLflow topology tags/params, for a 1P2D topology and the flat engine."""

from __future__ import annotations

import json
import re

from benchcamp.config import load_config
from benchcamp.report.topology import section, svg
from benchcamp.topology.resolve import topology_of
from benchcamp.tracking.log import _topology_params, _topology_tags

TOPO = {
    "prefill": {
        "instances": 1,
        "gpus_per_node": 8,
        "tensor_parallel_size": 1,
        "data_parallel_size": 8,
        "kv_connector": {"kind": "NixlConnector"},
    },
    "decode": {
        "instances": 2,
        "gpus_per_node": 8,
        "tensor_parallel_size": 2,
        "data_parallel_size": 4,
        "kv_connector": {"kind": "NixlConnector"},
    },
    "router": {"policy": "session_affinity", "pd_disaggregation": True},
}


def _cfg(sets: list[str]):
    return load_config(None, ["engine.model=deepseek-ai/DeepSeek-V3", "engine.model_profile=deepseek-v3", *sets])


def test_disaggregated_diagram_in_report_and_mlflow():
    cfg = _cfg(["hardware.gpu=b200", "hardware.gpu_count=24", "topology=" + json.dumps(TOPO)])
    html = section(cfg)
    assert "P: 1x(TP1 DP8 EP8) 8 GPU -&gt; D: 2x(TP2 DP4 EP8) 16 GPU [b200]" in html
    pic = svg(topology_of(cfg))
    assert pic.startswith("<svg") and "http" not in pic  # inline, nothing to fetch
    assert len(re.findall(r'<rect x="\d+" y="\d+" width="9"', pic)) == 24  # one square per GPU
    assert "prefill: 1x TP1 DP8 EP8" in pic and "decode: 2x TP2 DP4 EP8" in pic and ">KV<" in pic
    tags = _topology_tags(cfg)
    assert tags["topology"] == "P: 1x(TP1 DP8 EP8) 8 GPU -> D: 2x(TP2 DP4 EP8) 16 GPU [b200]"
    assert tags["topology.shape"] == "1P2D" and tags["topology.gpus"] == "24"
    assert _topology_params(cfg)["topology.decode.instances"] == "2"


def test_flat_engine_is_a_unified_diagram():
    cfg = _cfg(["hardware.gpu=h200", "hardware.gpu_count=8"])
    assert _topology_tags(cfg)["topology"] == "U: 1x(TP1 DP8 EP8) 8 GPU [h200]"
    pic = svg(topology_of(cfg))
    assert ">KV<" not in pic and len(re.findall(r'width="9"', pic)) == 8
