"""The topology section of params.yaml: its derived quantities, its one-line errors, its fingerprint."""

from __future__ import annotations

from typing import Any

import pytest

from benchcamp.config import ConfigError, from_dict, load_config, topology_of
from benchcamp.topology import Topology

NIXL = {"kind": "NixlConnector"}


def _pd(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A 1P1D config: one 8-GPU DP8+EP prefill engine, one 2-node DP16+EP decode engine, MTP on both."""
    spec = {"method": "mtp", "num_speculative_tokens": 3, "acceptance": "synthetic", "acceptance_length": 2.5}
    topo: dict[str, Any] = {
        "prefill": {"data_parallel_size": 8, "kv_connector": NIXL, "speculative": spec, **(prefill or {})},
        "decode": {
            "nodes_per_instance": 2,
            "data_parallel_size": 16,
            "kv_connector": NIXL,
            "speculative": spec,
            **(decode or {}),
        },
        "router": {"policy": "session_affinity", "pd_disaggregation": True},
        **top,
    }
    return {"hardware": {"gpu_count": 24}, "topology": topo}


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        from_dict(data)
    return str(info.value)


def test_flat_engine_is_the_one_role_topology() -> None:
    cfg = load_config(None)
    assert cfg.topology is None
    topo = topology_of(cfg)
    assert [k for k, _ in topo.roles()] == ["unified"]
    assert topo.total_gpus == cfg.hardware.gpu_count == 8
    assert topo.unified is not None and topo.unified.expert_parallel_size == 8
    [node] = topo.nodes()
    assert node.head and node.start_rank == 0 and node.local_ranks == 8


def test_flat_multi_node_engine_spreads_ranks_over_nodes() -> None:
    cfg = from_dict(
        {"engine": {"data_parallel_size": 16, "data_parallel_size_local": 8}, "hardware": {"gpu_count": 16}}
    )
    nodes = topology_of(cfg).nodes()
    assert [(n.head, n.start_rank, list(n.ranks)) for n in nodes] == [
        (True, 0, list(range(8))),
        (False, 8, list(range(8, 16))),
    ]


def test_1p1d_derived_quantities() -> None:
    cfg = from_dict(_pd())
    topo = topology_of(cfg)
    assert topo.disaggregated and topo.needs_router
    assert topo.gpus_by_role == {"prefill": 8, "decode": 16}
    assert topo.total_gpus == 24
    assert topo.decode is not None and topo.decode.expert_parallel_size == 16 and topo.decode.local_ranks == 8
    assert [(n.role, n.node, n.head, n.start_rank) for n in topo.nodes()] == [
        ("prefill", 0, True, 0),
        ("decode", 0, True, 0),
        ("decode", 1, False, 8),
    ]
    assert topo.describe() == "1P(DP8 TP1 EP8 mtp3, 8 GPUs) + 1D(DP16 TP1 EP16 mtp3, 2x8 GPUs) = 24 GPUs"


def test_topology_is_fingerprinted_only_when_set() -> None:
    base = load_config(None)
    assert base.fingerprint() == "fcec604a3988a9e9"  # the defaults' (pinned in tests/test_config.py)
    a, b = from_dict(_pd()), from_dict(_pd(decode={"max_num_seqs": 128}))
    assert len({base.fingerprint(), a.fingerprint(), b.fingerprint()}) == 3


def test_overrides_reach_a_role() -> None:
    cfg = load_config(
        None, {**{"topology": _pd()["topology"]}, "hardware.gpu_count": 32, "topology.prefill.instances": 2}
    )
    assert topology_of(cfg).gpus_by_role == {"prefill": 16, "decode": 16}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            _pd(decode={"data_parallel_size": 15}),
            "topology.decode.data_parallel_size=15 is not a multiple of nodes_per_instance=2",
        ),
        (
            _pd(decode={"data_parallel_size": 12}),
            "topology.decode.data_parallel_size=12 on nodes_per_instance=2 is 6 DP ranks per node x "
            "tensor_parallel_size=1 = 6 GPUs per node, but gpus_per_node=8; set data_parallel_size=16",
        ),
        (
            _pd(decode={"data_parallel_size_local": 4}),
            "topology.decode.data_parallel_size=16 != nodes_per_instance=2 x data_parallel_size_local=4; "
            "set data_parallel_size_local=8",
        ),
        (
            _pd(prefill={"tensor_parallel_size": 3}),
            "topology.prefill.tensor_parallel_size=3 does not divide gpus_per_node=8",
        ),
        (_pd(prefill={"data_parallel_size": 4}), "set data_parallel_size=8"),
        ({**_pd(), "hardware": {"gpu_count": 8}}, "hardware.gpu_count=8 does not match the topology's 24 GPUs"),
        (
            {
                "hardware": {"gpu_count": 8},
                "topology": {"prefill": {"kv_connector": NIXL}, "router": {"pd_disaggregation": True}},
            },
            "topology.prefill without topology.decode",
        ),
        (
            {"topology": {"unified": {"kv_connector": NIXL}}},
            "topology.unified.kv_connector=NixlConnector moves KV between engines, but there is no router",
        ),
        (
            _pd(router=None),
            "topology.prefill.kv_connector=NixlConnector moves KV between engines, but there is no router",
        ),
        (
            _pd(router={"policy": "round_robin"}),
            "topology.router.pd_disaggregation: prefill + decode roles need a router",
        ),
        (_pd(decode={"kv_connector": None}), "topology.decode.kv_connector: prefill/decode disaggregation needs"),
        (
            _pd(decode={"kv_connector": {"kind": "ExampleConnector"}}),
            "topology.decode.kv_connector.shared_storage_path: required with kind=ExampleConnector",
        ),
        (_pd(decode={"speculative": None}), "topology.prefill.speculative and topology.decode.speculative differ"),
        (
            _pd(decode={"speculative": {"method": "mtp", "num_speculative_tokens": 2, "acceptance": "synthetic"}}),
            "topology.decode.speculative.acceptance_length: required with acceptance=synthetic",
        ),
        (
            _pd(decode={"speculative": {"method": "mtp", "num_speculative_tokens": 2, "acceptance_length": 4}}),
            "topology.decode.speculative.acceptance_length=4.0 exceeds num_speculative_tokens+1=3",
        ),
        (
            {**_pd(), "engine": {"model": "Qwen/Qwen3-8B", "model_profile": "qwen3-8b"}},
            "topology.prefill.speculative.method=mtp: model profile qwen3-8b has no mtp head",
        ),
        (
            _pd(
                prefill={"speculative": {"method": "ngram", "num_speculative_tokens": 3}},
                decode={"speculative": {"method": "ngram", "num_speculative_tokens": 3}},
            ),
            "topology.prefill.speculative.acceptance_length: no published acceptance rate for ngram",
        ),
        (
            {**_pd(), "engine": {"model": "deepseek-ai/DeepSeek-V4.1-Flash", "model_profile": "deepseek-v4.1-flash"}},
            "topology.prefill.speculative.method=mtp: model profile deepseek-v4.1-flash has no mtp head "
            "(its checkpoint's methods: dspark)",
        ),
        (_pd(decode={"gpu": "h900"}), "topology.decode.gpu=h900: unknown GPU profile"),
        (
            {
                "hardware": {"gpu_count": 512},
                "topology": {"unified": {"nodes_per_instance": 64, "data_parallel_size": 512}},
            },
            "topology.unified: expert parallel size 512 (TP x DP) exceeds deepseek-v3's 256 routed experts",
        ),
        (
            {
                "hardware": {"gpu_count": 24},
                "topology": {"unified": {"nodes_per_instance": 3, "data_parallel_size": 24,
                                         "enable_expert_parallel": False}},
            },
            "topology.unified: without expert parallel vLLM shards each of deepseek-v3's experts over "
            "data_parallel_size x tensor_parallel_size = 24 GPUs, which does not divide its moe_intermediate_size "
            "2048; set enable_expert_parallel: true",
        ),
        ({"topology": {}}, "topology: no role"),
    ],
)
def test_bad_topologies_are_one_line_errors(data: dict[str, Any], expected: str) -> None:
    msg = _error(data)
    assert expected in msg
    assert len(msg.splitlines()) <= 2, msg  # "invalid configuration in config:" + the one line


def test_dspark_is_what_v41_flash_runs() -> None:
    dspark = {"method": "dspark", "num_speculative_tokens": 5, "acceptance": "synthetic", "acceptance_length": 3.0}
    data = _pd(prefill={"speculative": dspark}, decode={"speculative": dspark})
    data["engine"] = {"model": "deepseek-ai/DeepSeek-V4.1-Flash", "model_profile": "deepseek-v4.1-flash"}
    assert from_dict(data).topology is not None


def test_topology_model_round_trips() -> None:
    topo = from_dict(_pd()).topology
    assert topo is not None
    assert Topology.model_validate(topo.model_dump()) == topo


def test_every_gpu_profile_the_simulator_has_is_accepted_by_hardware_gpu() -> None:
    from benchcamp.profiles import available, load_gpu

    names = available("gpus")
    assert {"b300", "gb200", "gb300"} <= set(names)
    for name in names:
        assert load_config(None, {"hardware.gpu": name}).hardware.gpu == name
        g = load_gpu(name)
        assert g.nvlink_domain_gpus >= 1 and g.rdma_gbps > 0
    assert load_gpu("gb300").nvlink_domain_gpus == 72 and load_gpu("h200").nvlink_domain_gpus == 8
