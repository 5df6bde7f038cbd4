"""Quiet runs: the virtual clock advances several decode steps in one call where nothing can change the batch.

``Router.step(until=...)`` runs every pure-decode step that starts before the simulation's horizon and finishes
nothing (``PerfModel.decode_run`` times them, ``Scheduler.fast_forward`` advances the ranks). It must change no
result, only the number of calls: each test runs the same simulation with quiet runs off (``MAX_RUN = 0``) and
on, and asks for identical records and run statistics, and for runs to have happened.
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from benchcamp.config import from_dict
from benchcamp.sim.clock.fleet import simulation_plan
from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate
from benchcamp.sim.engine.core import Router
from benchcamp.sim.engine.perfmodel import BatchSummary, perf_model_for
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload


@pytest.mark.parametrize(
    "settings",
    [
        EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", tensor_parallel_size=2),
        EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", async_scheduling=True),
        EngineSettings(data_parallel_size=8, enable_expert_parallel=True),
        EngineSettings(
            data_parallel_size=8, enable_expert_parallel=True, speculative_tokens=3, acceptance_length=2.4,
            enable_dbo=True,
        ),
        EngineSettings(data_parallel_size=8, enable_expert_parallel=False),  # MoE TP over DP x TP: its gather
    ],
    ids=["llama-tp2", "llama-async", "v3-dp8-ep", "v3-dp8-ep-mtp-dbo", "v3-dp8-moe-tp"],
)
def test_decode_run_durations_are_bit_identical_to_cost_step_by_step(settings):
    perf = perf_model_for(settings.validate())
    rng = random.Random(settings.data_parallel_size)
    ranks = settings.data_parallel_size
    for _ in range(20):
        seqs = [rng.randrange(1, 300) for _ in range(ranks)]
        ctx0 = [n * rng.randrange(100, 150_000) for n in seqs]
        run = perf.decode_run(seqs, ctx0, 40)
        for k in (0, 1, 17, 39):
            step = [BatchSummary(decode_seqs=n, decode_ctx=c + n * k) for n, c in zip(seqs, ctx0)]
            assert run[k] == perf.cost(step).duration_s  # exactly: the same arithmetic, operation for operation


@pytest.mark.parametrize("steps", [3, 40])
def test_decode_run_times_many_undominated_ranks_alike(steps):
    """48 ranks none of which dominates another (more sequences, less context): with 40 steps decode_run takes
    its array path, with 3 its per-step one; both bit-identical to cost()."""
    settings = EngineSettings(data_parallel_size=48, enable_expert_parallel=True, enable_dbo=True).validate()
    perf = perf_model_for(settings)
    seqs = [1 + 5 * i for i in range(48)]
    ctx0 = [(48 - i) * 9_000_000 // (1 + 5 * i) * (1 + 5 * i) for i in range(48)]
    run = perf.decode_run(seqs, ctx0, steps)
    for k in range(steps):
        step = [BatchSummary(decode_seqs=n, decode_ctx=c + n * k) for n, c in zip(seqs, ctx0)]
        assert run[k] == perf.cost(step).duration_s


def test_decode_run_mirrors_the_engram_stall_of_cost():
    """DeepSeek-V4.1's host-memory Engram lookups (cpu_offload) stall a step whose lookups outlast its work. On the
    shipped GPU profiles they stay ahead of it, so the host link is made 10,000x slower here to exercise the term."""
    settings = EngineSettings(
        model="deepseek-ai/DeepSeek-V4.1-Flash", gpu="h200", data_parallel_size=8, enable_expert_parallel=True,
        kv_cache_dtype="fp8",
    ).validate()
    perf = perf_model_for(settings)
    perf._coefficients()
    assert perf._c_engram > 0
    perf._c_engram *= 1e4
    rng = random.Random(41)
    seqs = [rng.randrange(1, 256) for _ in range(8)]
    ctx0 = [n * rng.randrange(100, 100_000) for n in seqs]
    run = perf.decode_run(seqs, ctx0, 30)
    for k in range(30):
        step = [BatchSummary(decode_seqs=n, decode_ctx=c + n * k) for n, c in zip(seqs, ctx0)]
        assert run[k] == perf.cost(step).duration_s
    c = perf._c_engram
    perf._c_engram = 0.0
    assert (run > perf.decode_run(seqs, ctx0, 30)).all(), "the stall term is exercised"
    perf._c_engram = c


def _workload(n_sessions: int = 24, seed: int = 5) -> Workload:
    """Multi-turn sessions over a shared prefix, with long outputs so that decode-only stretches occur."""
    rng = random.Random(seed)
    bs, system, sessions = 16, list(range(1, 41)), []
    for i in range(n_sessions):
        ctx = system + list(range(1000 + 100 * i, 1000 + 100 * i + rng.randrange(10, 60)))
        reqs = []
        for turn in range(rng.randrange(2, 5)):
            if turn:
                ctx = ctx + list(range(50_000 + 1000 * i + 50 * turn, 50_000 + 1000 * i + 50 * turn + 8))
            plen = len(ctx) * bs - rng.randrange(0, bs)
            reqs.append(Request(turn, tuple(ctx), plen, rng.randrange(50, 400), rng.uniform(0.0, 1.5) if turn else 0.0))
        sessions.append(Session(f"s{i}", reqs))
    return Workload("quiet-runs", bs, 32000, sessions)


V3 = {"model": "deepseek-ai/DeepSeek-V3", "model_profile": "deepseek-v3", "data_parallel_size": 8,
      "enable_expert_parallel": True}
MTP = {"method": "mtp", "num_speculative_tokens": 2, "acceptance": "synthetic", "acceptance_length": 2.5}
NIXL = {"kind": "NixlConnector"}
DEPLOYMENTS = {
    "one DP8+EP engine": {"engine": V3, "hardware": {"gpu": "h200", "gpu_count": 8}},
    "two unified engines": {
        "engine": V3, "hardware": {"gpu": "h200", "gpu_count": 16},
        "topology": {"unified": {"instances": 2, "data_parallel_size": 8, "gpus_per_node": 8},
                     "router": {"policy": "least_loaded"}},
    },
    "1P2D, MTP, session affinity": {
        "engine": V3, "hardware": {"gpu": "h200", "gpu_count": 24},
        "topology": {
            "prefill": {"data_parallel_size": 8, "gpus_per_node": 8, "kv_connector": NIXL, "speculative": MTP},
            "decode": {"instances": 2, "data_parallel_size": 8, "gpus_per_node": 8, "kv_connector": NIXL,
                       "speculative": MTP},
            "router": {"policy": "session_affinity", "pd_disaggregation": True},
        },
    },
}


LLAMA = {"model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b", "data_parallel_size": 4}
# a dense model's DP ranks are independent engines: each rank on its own clock, quiet runs per rank
DEPLOYMENTS["one dense DP4 engine (independent ranks)"] = {"engine": LLAMA, "hardware": {"gpu": "h100-sxm", "gpu_count": 4}}
DEPLOYMENTS["two dense DP2 instances (independent ranks)"] = {
    "engine": LLAMA, "hardware": {"gpu": "h100-sxm", "gpu_count": 4},
    "topology": {"unified": {"instances": 2, "data_parallel_size": 2, "gpus_per_node": 2},
                 "router": {"policy": "least_loaded"}},
}
DEPLOYMENTS["dense 1P1D, DP2 each (independent ranks)"] = {
    "engine": LLAMA, "hardware": {"gpu": "h100-sxm", "gpu_count": 4},
    "topology": {
        "prefill": {"data_parallel_size": 2, "gpus_per_node": 2, "kv_connector": NIXL},
        "decode": {"data_parallel_size": 2, "gpus_per_node": 2, "kv_connector": NIXL},
        "router": {"policy": "session_affinity", "pd_disaggregation": True},
    },
}
DEPLOYMENTS["one MoE DP8 engine, experts TP over DP x TP"] = {
    "engine": {**V3, "enable_expert_parallel": False}, "hardware": {"gpu": "h200", "gpu_count": 8},
}


def _simulate(name: str) -> pd.DataFrame:
    settings, topo, per, _ = simulation_plan(from_dict(DEPLOYMENTS[name]))
    return simulate(_workload(), settings,
                    SimLoad(level=12, warmup_s=2.0, duration_s=25.0, drain_s=30.0, seed=2),
                    SimRun(topology=topo, role_settings=per))


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_quiet_runs_change_no_record_and_no_statistic(name, monkeypatch):
    # Router.MAX_RUN is read at each step, by the Python source and the compiled modules alike (benchcamp/sim/native.py)
    monkeypatch.setattr(Router, "MAX_RUN", 0)  # off: every step one by one
    slow = _simulate(name)
    monkeypatch.setattr(Router, "MAX_RUN", 4096)
    fast = _simulate(name)
    assert len(slow) > 40 and (slow.status == 200).mean() > 0.9
    assert slow.attrs["engine_calls"] == slow.attrs["steps"]
    assert fast.attrs["engine_calls"] < fast.attrs["steps"], "quiet runs of several steps happened"
    pd.testing.assert_frame_equal(slow, fast)  # itl_s included: every token's time
    for key in set(slow.attrs) - {"wall_s", "cpu_s", "engine_calls"}:
        assert slow.attrs[key] == fast.attrs[key], key
    assert np.isclose(slow.attrs["steps"], fast.attrs["steps"])
