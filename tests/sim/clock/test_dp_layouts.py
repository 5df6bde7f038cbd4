"""The DP layouts vLLM runs (benchcamp.topology.model.dp_layout), from the config through the simulator.

- MoE, DP > 1, no expert parallel: attention DP, every expert TP-sharded over the DP x TP group (vLLM's
  FusedMoEParallelConfig.make flattens TP across DP): each GPU holds 1/(DP x TP) of the experts, computes that
  share of the global batch's experts, and each MoE layer pays the gather / reduce of the group;
- a dense model's DP ranks are independent engines ("Non-MoE DP ranks are completely independent", vLLM's
  run_engine_core): one rank's long step does not hold up another's, as N replicas behind a router would not;
- MoE DP + EP: the ranks in lockstep, a step as long as the slowest rank's (vLLM's DP coordinator, dummy batches).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchcamp.config import from_dict
from benchcamp.sim.clock.fleet import simulation_plan
from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate
from benchcamp.sim.engine.core import Router
from benchcamp.sim.engine.perfmodel import GIB, BatchSummary, prefill_pairs
from benchcamp.topology import dp_layout
from benchcamp.workload.generator import generate, load_spec

ROOT = Path(__file__).resolve().parents[3]
V3 = {"model": "deepseek-ai/DeepSeek-V3", "model_profile": "deepseek-v3"}
LLAMA8 = {"model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b"}


def _engine(data: dict[str, Any], kind: str = "unified") -> Router:
    """The simulated engine (one instance) a config runs: simulation_plan's settings, as the planner builds it."""
    front, _topo, per, _ = simulation_plan(from_dict(data))
    return Router((per or {kind: front})[kind])


def test_the_layout_follows_the_model_and_enable_expert_parallel_as_vllm_decides_it():
    assert dp_layout(1, True, True) == dp_layout(1, False, False) == "single"
    assert dp_layout(4, False, True) == dp_layout(4, False, False) == "independent"  # EP means nothing to a dense model
    assert dp_layout(4, True, False) == "moe_tp"
    assert dp_layout(4, True, True) == "moe_ep"
    cfg = from_dict({"engine": {**V3, "data_parallel_size": 8, "enable_expert_parallel": False},
                     "hardware": {"gpu": "h200", "gpu_count": 8}})
    from benchcamp.config import topology_of

    role = topology_of(cfg).role("unified")
    assert role.dp_layout(is_moe=True) == "moe_tp" and role.expert_shards(is_moe=True) == 8
    assert role.dp_layout(is_moe=False) == "independent" and role.expert_shards(is_moe=False) == 1


def test_moe_dp_without_ep_holds_a_dp_share_of_the_experts_per_gpu():
    """DeepSeek-V3 on 8 H200s as DP8 TP1 without EP: each GPU holds 1/8 of every expert, as with EP (both spread the
    experts over the 8 GPUs); 8 replicas of TP1 would each need a whole copy (they do not fit: the error says so).
    DP4 TP2 without EP holds the same 1/8 (the group is DP x TP)."""
    moe_tp = _engine({"engine": {**V3, "data_parallel_size": 8, "enable_expert_parallel": False},
                      "hardware": {"gpu": "h200", "gpu_count": 8}})
    ep = _engine({"engine": {**V3, "data_parallel_size": 8, "enable_expert_parallel": True},
                  "hardware": {"gpu": "h200", "gpu_count": 8}})
    dp4tp2 = _engine({"engine": {**V3, "tensor_parallel_size": 2, "data_parallel_size": 4,
                                 "enable_expert_parallel": False},
                      "hardware": {"gpu": "h200", "gpu_count": 8}})
    p, m = moe_tp.perf, moe_tp.perf.model
    experts_gpu = m.routed_params * m.expert_bytes_per_param
    dense_gpu = (m.dense_params_b + m.embedding_params_b) * 1e9 * m.weight_bytes
    assert p.moe_tp and not p.ep and p.weight_bytes_gpu == pytest.approx(dense_gpu + experts_gpu / 8)
    assert ep.perf.weight_bytes_gpu == pytest.approx(p.weight_bytes_gpu)
    assert dp4tp2.perf.weight_bytes_gpu == pytest.approx(dense_gpu / 2 + experts_gpu / 8)
    assert moe_tp.num_blocks > 0 and moe_tp.num_blocks == ep.num_blocks
    with pytest.raises(ValueError, match="does not fit"):  # a full copy of the experts on every GPU
        _engine({"engine": V3, "hardware": {"gpu": "h200", "gpu_count": 8},
                 "topology": {"unified": {"instances": 8, "data_parallel_size": 1, "gpus_per_node": 1}}})
    assert (experts_gpu + dense_gpu) / GIB > 141  # the copy alone exceeds an H200's HBM


def test_moe_tp_over_dp_steps_are_sized_by_the_global_batch_and_pay_the_group_gather():
    """MoE GEMMs and expert reads per GPU are the global batch's / (DP x TP): a step of 8 ranks x 32 decodes reads
    the experts 8 x 32 tokens touch once, an eighth of them per GPU; every MoE layer gathers and reduces the global
    batch over the 8 GPUs (comm grows with it); an idle rank's dummy batch does not shorten the step."""
    p = _engine({"engine": {**V3, "data_parallel_size": 8, "enable_expert_parallel": False},
                 "hardware": {"gpu": "h200", "gpu_count": 8}}).perf
    one = BatchSummary(decode_seqs=32, decode_ctx=32 * 4000)
    full = p.cost([one] * 8)
    lone = p.cost([one])  # the other 7 ranks idle (dummy batches)
    assert full.comm_s > lone.comm_s > 0  # the gather carries 8x the tokens
    assert full.compute_s > lone.compute_s  # the experts' GEMMs are the global batch's
    experts = p.expected_experts(8 * 32) * p.expert_bytes / 8 / p.bandwidth
    kv = 32 * 4000 * p.kv_read_bytes_per_token_gpu / p.bandwidth
    assert full.memory_s == pytest.approx(p.dense_bytes_gpu / p.bandwidth + kv + experts)
    # without the MoE TP group each rank would read and compute its own experts, 8x the reads of one GPU's share
    assert p.expected_experts(32) * p.expert_bytes / p.bandwidth > 4 * experts


def _ranks_at_work(data: dict[str, Any]) -> tuple[Router, list[float]]:
    """Rank 0 gets a 16K-token prompt, rank 1 a short one (the router places them: the second goes to the idle
    rank); -> the engine and when each rank's first step ends."""
    eng = _engine(data)
    eng.add_request("long", list(range(1, 1025)), 16_384, 4, 0.0)
    eng.add_request("short", list(range(5000, 5004)), 64, 64, 0.0)
    assert eng.where["long"].rank != eng.where["short"].rank
    if eng.many_clocks:
        eng.start_steps(0.0, None)
        return eng, list(eng.free_at)
    end = eng.step(0.0, emit=False).end_s
    return eng, [end, end]


def test_dense_dp_ranks_are_not_held_up_by_the_slowest_rank_moe_ep_ranks_are():
    dense, ends = _ranks_at_work({"engine": {**LLAMA8, "data_parallel_size": 2},
                                  "hardware": {"gpu": "h100-sxm", "gpu_count": 2}})
    long_rank, short_rank = dense.where["long"].rank, dense.where["short"].rank
    assert dense.many_clocks and ends[short_rank] < ends[long_rank] / 4  # its own step, not the long prefill's
    steps = 0
    while dense.free_at[short_rank] < ends[long_rank]:  # the short rank steps on while the long prefill runs
        steps += len(dense.start_steps(dense.free_at[short_rank], None))
    assert steps >= 3
    moe, (a, b) = _ranks_at_work({"engine": {"model": "Qwen/Qwen3-235B-A22B", "model_profile": "qwen3-235b-a22b",
                                             "tensor_parallel_size": 4, "data_parallel_size": 2},
                                  "hardware": {"gpu": "h200", "gpu_count": 8}})
    assert not moe.many_clocks and a == b  # lockstep: one step for both ranks, as long as the prefill's
    assert a > moe.perf.cost([BatchSummary(prefill_seqs=1, prefill_tokens=64,
                                           prefill_pairs=prefill_pairs(64, 0))]).duration_s * 4


@pytest.fixture(scope="module")
def wl():  # type: ignore[no-untyped-def]
    return generate(load_spec(ROOT / "workloads/agentic-tiny.yaml"))


def _tokens_per_s(wl: Any, data: dict[str, Any]) -> float:
    settings, topo, per, _ = simulation_plan(from_dict(data))
    df = simulate(wl, settings, SimLoad(level=16, warmup_s=2, duration_s=20, drain_s=60), SimRun(topology=topo, role_settings=per))
    w0, w1 = df.attrs["window"]
    ok = df[(df.status == 200) & (df.sent_s >= w0) & (df.sent_s < w1)]
    assert len(ok) > 20
    return float(ok.completion_tokens.sum() / (w1 - w0))


def test_a_dense_dp_engine_serves_as_its_replicas_behind_a_router_do(wl: Any) -> None:
    """Llama-3.1-8B on 4 H100s: one DP4 engine (independent ranks, vLLM's balancer) and 4 TP1 replicas behind a
    cache-aware router serve within 3% at c16 (the same physics: only the front end and routing differ; the
    lockstep ranks benchcamp ran before came 4% under the replicas here)."""
    dp = _tokens_per_s(wl, {"engine": {**LLAMA8, "data_parallel_size": 4}, "hardware": {"gpu": "h100-sxm", "gpu_count": 4}})
    reps = _tokens_per_s(wl, {"engine": LLAMA8, "hardware": {"gpu": "h100-sxm", "gpu_count": 4},
                              "topology": {"unified": {"instances": 4, "data_parallel_size": 1, "gpus_per_node": 1},
                                           "router": {"policy": "cache_aware"}}})
    assert dp == pytest.approx(reps, rel=0.03), (dp, reps)


def test_the_planners_candidates_run_each_layout():
    """`benchcamp plan --ep on,off --split unified,replicas` on 8 H200s: DeepSeek-V3's DP8 candidates run MoE TP over
    DP x TP (ep off) and EP lockstep (ep on); its TP8 replicas would not exist (one engine); Llama-3.1-70B's TP4
    replicas are two engines of independent one-rank clocks, its DP2 engine one of two independent ranks."""
    from benchcamp.topology.candidates import Split, candidates

    def engines(model: dict[str, Any], tp: int) -> dict[str, Router | str]:
        """candidate id -> its engine, or the reason it does not fit"""
        out: dict[str, Router | str] = {}
        for o in candidates(["h200"], [8], [tp], [True, False], [256], [8192], [Split(0, 0), Split(0, 0, replicas=True)]):
            data: dict[str, Any] = {"engine": dict(model), "hardware": {"gpu": "h200", "gpu_count": 8}}
            for k, v in o.items():
                if k == "topology":
                    data["topology"] = v
                elif k.startswith("engine."):
                    data["engine"][k.removeprefix("engine.")] = v
            try:
                out[candidate_id(o)] = _engine(data)
            except ValueError as exc:
                out[candidate_id(o)] = str(exc)
        return out

    from benchcamp.topology.candidates import candidate_id

    v3 = engines(V3, 1)
    moe_tp, moe_ep = v3["h200x8-tp1-dp8-epoff-seqs256-mbt8192"], v3["h200x8-tp1-dp8-epon-seqs256-mbt8192"]
    assert isinstance(moe_tp, Router) and moe_tp.perf.moe_tp and not moe_tp.many_clocks
    assert isinstance(moe_ep, Router) and moe_ep.perf.ep and not moe_ep.many_clocks
    # 8 replicas of TP1: a whole V3 on each H200, which the planner skips with the engine's reason
    assert "does not fit" in str(v3["h200x8-8xunified-tp1-dp1-epon-seqs256-mbt8192"])
    llama = engines({"model": "meta-llama/Llama-3.1-70B-Instruct", "model_profile": "llama-3.1-70b"}, 4)
    dense_dp, replica = llama["h200x8-tp4-dp2-epon-seqs256-mbt8192"], llama["h200x8-2xunified-tp4-dp1-epon-seqs256-mbt8192"]
    assert isinstance(dense_dp, Router) and dense_dp.many_clocks
    assert isinstance(replica, Router) and len(replica.replicas) == 1
