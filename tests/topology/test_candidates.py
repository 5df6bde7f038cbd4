"""The planner's candidate grid, the topology diagram and the throughput Pareto front (pure functions)."""

from __future__ import annotations

import pytest

from benchcamp.errors import ConfigError
from benchcamp.topology import Topology
from benchcamp.topology.candidates import (
    Split,
    candidate_id,
    candidates,
    diagram,
    parse_specs,
    parse_splits,
    throughput_front,
    topology_params,
)

DSPARK = {"method": "dspark", "num_speculative_tokens": 5, "acceptance": "synthetic", "acceptance_length": 3.5}


def test_grid_lays_out_only_what_divides():
    out = candidates(["gb300"], [8, 24], [1, 2, 16], [True], [64], [8192], [(0, 0), (1, 2)])
    ids = [candidate_id(o) for o in out]
    # TP16 fits no engine here except... none: 24 / 3 = 8 GPUs per xPyD engine, 8 or 24 GPUs unified
    assert not any("tp16" in i for i in ids)
    # 8 GPUs are not three engines of equal size: no 1p2d on 8
    assert "gb300x8-1p2d-tp1-dp2-epon-seqs64-mbt8192" not in ids
    assert ids == [
        "gb300x8-tp1-dp8-epon-seqs64-mbt8192",
        "gb300x8-tp2-dp4-epon-seqs64-mbt8192",
        "gb300x24-tp1-dp24-epon-seqs64-mbt8192",
        "gb300x24-1p2d-tp1-dp8-epon-seqs64-mbt8192",
        "gb300x24-tp2-dp12-epon-seqs64-mbt8192",
        "gb300x24-1p2d-tp2-dp4-epon-seqs64-mbt8192",
    ]


def test_grid_topology_overrides_validate_and_count_every_gpu():
    out = candidates(["b300"], [24], [1], [True], [128], [8192], [(1, 2)], [DSPARK], [64.0])
    (o,) = out
    assert candidate_id(o) == "b300x24-1p2d-tp1-dp8-epon-seqs128-mbt8192-dspark5a3.5-kv64"
    topo = Topology.model_validate(o["topology"])
    assert topo.disaggregated and topo.total_gpus == o["hardware.gpu_count"] == 24
    assert topo.gpus_by_role == {"prefill": 8, "decode": 16}
    assert topo.role("decode").instances == 2 and topo.role("decode").kv_offloading_size_gib == 64.0
    assert topo.router is not None and topo.router.policy == "session_affinity"
    # speculative on, one engine: a unified topology, not the flat engine section
    (u,) = candidates(["b300"], [8], [1], [True], [128], [8192], [(0, 0)], [DSPARK])
    assert set(u["topology"]) == {"unified"} and "engine.tensor_parallel_size" not in u


def test_grid_is_bounded():
    with pytest.raises(ConfigError, match="more than 4 candidates"):
        candidates(["b300"], [8, 16, 24], [1, 2], [True], [64], [8192], [(0, 0)], limit=4)


def test_parse_axes():
    assert parse_splits("unified,1p1d, 2P1D") == [Split(0, 0), Split(1, 1), Split(2, 1)]
    assert parse_splits(None) == [Split(0, 0), Split(0, 0, replicas=True)]  # the default: unified and replicas
    assert str(parse_splits("replicas")[0]) == "replicas"
    (rack,) = parse_splits("3p1d:8/48")
    assert rack == Split(3, 1, 8, 48) and rack.gpus == 72 and str(rack) == "3p1d:8/48"
    assert parse_specs("off,dspark:5:3.5") == [None, DSPARK]
    for bad in ("1p0d", "3p1d:8", "3p1d:0/48", "unified:8/8", "3p1d:8/48/2"):
        with pytest.raises(ConfigError, match=r"^--split .* e\.g\. --split unified,replicas,1p1d,3p1d:8/48$"):
            parse_splits(bad)
    with pytest.raises(ConfigError, match="--spec"):
        parse_specs("dspark:5")


def test_diagram_and_params():
    (o,) = candidates(["gb300"], [24], [1], [True], [64], [8192], [(1, 2)], [DSPARK])
    topo = Topology.model_validate(o["topology"])
    assert diagram(topo, "gb300") == ("P: 1x(TP1 DP8 EP8) 8 GPU -> D: 2x(TP1 DP8 EP8 dspark5 A3.5) 16 GPU [gb300]")
    p = topology_params(topo)
    assert p["topology.shape"] == "1P2D" and p["topology.gpus"] == "24"
    assert p["topology.decode.gpus"] == "16" and p["topology.decode.speculative"] == "dspark:5"
    assert p["topology.prefill.ep"] == "8"


def test_throughput_front():
    pts = [
        {"config": "a", "tokens_per_s_per_gpu": 1000.0, "rate": 200.0},
        {"config": "b", "tokens_per_s_per_gpu": 5000.0, "rate": 120.0},
        {"config": "c", "tokens_per_s_per_gpu": 4000.0, "rate": 100.0},  # dominated by b
        {"config": "d", "tokens_per_s_per_gpu": 9000.0, "rate": 40.0},
        {"config": "e", "tokens_per_s_per_gpu": float("nan"), "rate": 500.0},  # no figure: left out
        {"config": "f", "tokens_per_s_per_gpu": 1000.0, "rate": 150.0},  # dominated by a
    ]
    assert [p["config"] for p in throughput_front(pts)] == ["a", "b", "d"]
    assert throughput_front([]) == []


def test_engines_larger_than_a_node_span_nodes():
    # B300: 8 GPUs per NVLink domain (a node); 24-GPU engines span 3 nodes, TP16 cannot stay inside one
    out = candidates(["b300"], [72], [8, 16], [True], [64], [8192], [(1, 2)], [DSPARK], node_gpus={"b300": 8})
    (o,) = out
    role = o["topology"]["decode"]
    assert (role["nodes_per_instance"], role["gpus_per_node"], role["data_parallel_size"]) == (3, 8, 3)
    topo = Topology.model_validate(o["topology"])
    assert topo.total_gpus == 72 and topo.total_nodes == 9
    assert diagram(topo) == (
        "P: 1x(TP8 DP3 EP24) 24 GPU, 3 nodes each -> D: 2x(TP8 DP3 EP24 dspark5 A3.5) 48 GPU, 3 nodes each"
    )
    # GB300 NVL72: one 72-GPU domain, so a 24-GPU engine is one "node"
    (g,) = candidates(["gb300"], [72], [8], [True], [64], [8192], [(1, 2)], [DSPARK], node_gpus={"gb300": 72})
    assert g["topology"]["decode"]["nodes_per_instance"] == 1 and g["topology"]["decode"]["gpus_per_node"] == 24


def test_per_role_tp():
    # --tp 1 (unified) --tp-prefill 4,8 --tp-decode 1,2 on 16 GPUs as 1p1d: every (prefill, decode) pair
    out = candidates(["b200"], [16], [1], [True], [64], [8192], [(0, 0), (1, 1)], prefill_tps=[4, 8],
                     decode_tps=[1, 2], node_gpus={"b200": 8})
    ids = [candidate_id(o) for o in out]
    assert ids == [
        "b200x16-1p1d-ptp4-pdp2-dtp1-ddp8-epon-seqs64-mbt8192",
        "b200x16-1p1d-ptp4-pdp2-dtp2-ddp4-epon-seqs64-mbt8192",
        "b200x16-1p1d-ptp8-pdp1-dtp1-ddp8-epon-seqs64-mbt8192",
        "b200x16-1p1d-ptp8-pdp1-dtp2-ddp4-epon-seqs64-mbt8192",
        "b200x16-tp1-dp16-epon-seqs64-mbt8192",  # unified: --tp
    ]
    topo = Topology.model_validate(out[2]["topology"])
    assert (topo.role("prefill").tensor_parallel_size, topo.role("decode").tensor_parallel_size) == (8, 1)
    assert diagram(topo) == "P: 1x(TP8 DP1 EP8) 8 GPU -> D: 1x(TP1 DP8 EP8) 8 GPU"
    # one role given: the other takes --tp's sizes; the same TP on both roles keeps the short id
    one = candidates(["b200"], [16], [1, 2], [True], [64], [8192], [(1, 1)], decode_tps=[2])
    assert [candidate_id(o) for o in one] == [
        "b200x16-1p1d-ptp1-pdp8-dtp2-ddp4-epon-seqs64-mbt8192",
        "b200x16-1p1d-tp2-dp4-epon-seqs64-mbt8192",
    ]
    # without per-role sizes both roles share --tp (no cross product)
    assert len(candidates(["b200"], [16], [1, 2], [True], [64], [8192], [(1, 1)])) == 2


def test_unequal_gpu_shares():
    # the record-class rack: 3 prefill engines of 8 GPUs (DP8) + 1 decode engine of 48 (DP48) on a GB300 NVL72
    out = candidates(["gb300"], [24, 72], [1], [True], [64], [8192], [(1, 2), Split(3, 1, 8, 48)], [DSPARK],
                     node_gpus={"gb300": 72})
    assert [candidate_id(o) for o in out] == [
        "gb300x24-1p2d-tp1-dp8-epon-seqs64-mbt8192-dspark5a3.5",
        "gb300x72-1p2d-tp1-dp24-epon-seqs64-mbt8192-dspark5a3.5",
        "gb300x72-3p1d-ptp1-pdp8-dtp1-ddp48-epon-seqs64-mbt8192-dspark5a3.5",  # sized: on 72 only
    ]
    topo = Topology.model_validate(out[2]["topology"])
    assert topo.gpus_by_role == {"prefill": 24, "decode": 48} and topo.total_gpus == 72
    assert diagram(topo, "gb300") == (
        "P: 3x(TP1 DP8 EP8) 24 GPU -> D: 1x(TP1 DP48 EP48 dspark5 A3.5) 48 GPU [gb300]"
    )
    assert topo.describe() == "3P(DP8 TP1 EP8 dspark5, 8 GPUs) + 1D(DP48 TP1 EP48 dspark5, 48 GPUs) = 72 GPUs"
    p = topology_params(topo)
    assert (p["topology.prefill.gpus"], p["topology.prefill.gpus_per_instance"]) == ("24", "8")
    assert (p["topology.decode.gpus"], p["topology.decode.dp"], p["topology.decode.ep"]) == ("48", "48", "48")
    # on 8-GPU B300 nodes the 48-GPU decode engine spans 6 nodes; per-role TP with sizes: TP8 prefill, TP2 decode
    (b,) = candidates(["b300"], [72], [1], [True], [64], [8192], [Split(3, 1, 8, 48)], prefill_tps=[8],
                      decode_tps=[2], node_gpus={"b300": 8})
    assert candidate_id(b) == "b300x72-3p1d-ptp8-pdp1-dtp2-ddp24-epon-seqs64-mbt8192"
    dec = b["topology"]["decode"]
    assert (dec["nodes_per_instance"], dec["gpus_per_node"], dec["data_parallel_size"]) == (6, 8, 24)
    assert Topology.model_validate(b["topology"]).total_nodes == 9
    # equal sizes given explicitly are the unsized split: one candidate, not two
    assert len(candidates(["b200"], [16], [1], [True], [64], [8192], [(1, 1), Split(1, 1, 8, 8)])) == 1
    # a size that TP does not divide is left out, like an unsized split's
    assert candidates(["b200"], [16], [1], [True], [64], [8192], [Split(1, 1, 6, 10)], prefill_tps=[4]) == []


def test_per_role_bad_input():
    with pytest.raises(ConfigError, match=r"^--split 3p1d:8/48: 3 x 8 \+ 1 x 48 = 72 GPUs, but --gpus .* gives "
                       r"16,24; add 72 to --gpus"):
        candidates(["gb300"], [16, 24], [1], [True], [64], [8192], [Split(3, 1, 8, 48)])
    with pytest.raises(ConfigError, match=r"^--tp-decode: .* --split gives only unified; add an xPyD split"):
        candidates(["b200"], [8], [1], [True], [64], [8192], [(0, 0)], decode_tps=[2])
    with pytest.raises(ConfigError, match="more than 3 candidates; .*--tp-prefill/--tp-decode"):
        candidates(["b200"], [16], [1], [True], [64], [8192], [(1, 1)], prefill_tps=[1, 2, 4, 8],
                   decode_tps=[1, 2], limit=3)


def test_replicas_are_independent_one_tp_group_engines_behind_a_router():
    """--split replicas: GPUs / TP engines of one TP group (DP1) each, topology.unified.instances, a session-affinity
    router; none where one engine would take every GPU (the unified candidate is that one)."""
    from benchcamp.config import from_dict

    out = candidates(["h200"], [8], [4, 8], [True], [256], [8192], [Split(0, 0), Split(0, 0, replicas=True)])
    ids = [candidate_id(o) for o in out]
    assert ids == [
        "h200x8-tp4-dp2-epon-seqs256-mbt8192",
        "h200x8-2xunified-tp4-dp1-epon-seqs256-mbt8192",
        "h200x8-tp8-dp1-epon-seqs256-mbt8192",
    ]
    rep = out[1]["topology"]
    assert rep["unified"]["instances"] == 2 and rep["unified"]["tensor_parallel_size"] == 4
    assert rep["router"] == {"policy": "session_affinity"}
    o = out[1]
    cfg = from_dict({"engine": {"model": "meta-llama/Llama-3.1-70B-Instruct", "model_profile": "llama-3.1-70b"},
                     "hardware": {"gpu": o["hardware.gpu"], "gpu_count": o["hardware.gpu_count"]},
                     "topology": o["topology"]})
    assert cfg.topology.total_gpus == 8 and cfg.topology.needs_router
    assert diagram(cfg.topology) == "U: 2x(TP4 DP1 EP4) 8 GPU"
