"""The report's topology block and the MLflow topology tags/params, for a 1P2D topology and the flat engine."""

from __future__ import annotations

import json
import re

from benchcamp.config import load_config, topology_of
from benchcamp.report.diagram import section, svg
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


def test_unequal_roles_in_report_and_mlflow():
    """The planner's sized split 3p1d:8/48 (3 prefill engines of 8 GPUs, 1 decode engine of 48) on one NVL72."""
    from benchcamp.topology.candidates import Split, candidates

    (o,) = candidates(["gb300"], [72], [1], [True], [64], [8192], [Split(3, 1, 8, 48)], node_gpus={"gb300": 72})
    cfg = _cfg(["hardware.gpu=gb300", "hardware.gpu_count=72", "topology=" + json.dumps(o["topology"])])
    assert "P: 3x(TP1 DP8 EP8) 24 GPU -&gt; D: 1x(TP1 DP48 EP48) 48 GPU [gb300]" in section(cfg)
    pic = svg(topology_of(cfg))
    assert len(re.findall(r'<rect x="\d+" y="\d+" width="9"', pic)) == 72
    assert "prefill: 3x TP1 DP8 EP8" in pic and "decode: 1x TP1 DP48 EP48" in pic
    # alternate prefill engines shaded: 8 squares each
    prefill = re.findall(r'fill="#dd8452" opacity="([\d.]+)"', pic)
    assert prefill == ["1.0"] * 8 + ["0.6"] * 8 + ["1.0"] * 8
    tags, params = _topology_tags(cfg), _topology_params(cfg)
    assert tags["topology.shape"] == "3P1D" and tags["topology.gpus"] == "72"
    assert (params["topology.prefill.gpus"], params["topology.prefill.gpus_per_instance"]) == ("24", "8")
    assert (params["topology.decode.gpus"], params["topology.decode.dp"]) == ("48", "48")
    assert topology_of(cfg).describe() == "3P(DP8 TP1 EP8, 8 GPUs) + 1D(DP48 TP1 EP48, 48 GPUs) = 72 GPUs"
