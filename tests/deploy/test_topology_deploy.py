"""Deploying a topology (benchcamp.deploy.roles) on the local provider.

The argv per role, node and rank (pure: what vLLM would be started with); a 2P1D campaign of simulated
engines behind the router, run by `benchcamp run` end to end (real processes over loopback); a role that
fails to start stops every process of the deployment and removes the KV connector's folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchcamp.config import from_dict, load_config
from benchcamp.deploy import deploy, execution_engines, stop, wait_ready
from benchcamp.deploy.roles import front, plan
from benchcamp.errors import EngineError
from benchcamp.provision import Node

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "campaign"))

from campaign_support import HTTP_PARAMS, tiny_sets  # noqa: E402

SPEC = {"method": "mtp", "num_speculative_tokens": 3, "acceptance": "synthetic", "acceptance_length": 2.5}
NIXL = {"kind": "NixlConnector"}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _record_class(prefill_instances: int = 1) -> Any:
    """DeepSeek-V3 on H200: N x 8-GPU DP8+EP prefill engines, one 2-node DP16+EP decode engine, MTP on both."""
    return from_dict({
        "hardware": {"gpu_count": 8 * prefill_instances + 16},
        "topology": {
            "prefill": {"instances": prefill_instances, "data_parallel_size": 8, "kv_connector": NIXL,
                        "speculative": SPEC, "all2all_backend": "deepep_high_throughput"},
            "decode": {"nodes_per_instance": 2, "data_parallel_size": 16, "kv_connector": NIXL, "speculative": SPEC,
                       "all2all_backend": "deepep_low_latency", "enable_eplb": True},
            "router": {"policy": "session_affinity", "pd_disaggregation": True},
        },
    })


def _ports():
    n = iter(range(9000, 9100))
    return lambda: next(n)


def test_real_vllm_argv_per_role_node_and_rank():
    cfg = _record_class(prefill_instances=2)
    procs = plan(cfg, cfg.topology, "10.0.0.1", free_port=_ports(), storage=None, executable="vllm",
                 model="deepseek-ai/DeepSeek-V3")
    assert [(p.name, p.head) for p in procs] == [
        ("engine-p0", True), ("engine-p1", True), ("engine-d0", True), ("engine-d0-node1", False), ("router", True)]
    p0, p1, d0, d1, router = procs
    # prefill: one node each, DP8 + EP, high-throughput all-to-all, no decode graphs
    assert _flag(p0.argv, "--data-parallel-size") == "8"
    assert "--data-parallel-size-local" not in p0.argv and "--headless" not in p0.argv
    assert "--enable-expert-parallel" in p0.argv and _flag(p0.argv, "--all2all-backend") == "deepep_high_throughput"
    assert "--compilation-config" not in p0.argv and "--enable-eplb" not in p0.argv
    # decode: a head and a headless peer, ranks 0-7 and 8-15, the same coordinator address and port
    assert [_flag(d0.argv, f) for f in ("--data-parallel-size", "--data-parallel-size-local",
                                         "--data-parallel-address")] == ["16", "8", "10.0.0.1"]
    assert d1.argv[-3:] == ["--headless", "--data-parallel-start-rank", "8"]
    assert _flag(d1.argv, "--data-parallel-rpc-port") == _flag(d0.argv, "--data-parallel-rpc-port")
    assert json.loads(_flag(d0.argv, "--compilation-config")) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert "--enable-eplb" in d0.argv and _flag(d0.argv, "--all2all-backend") == "deepep_low_latency"
    # connector and speculative decoding, as vLLM's JSON flags
    assert json.loads(_flag(d0.argv, "--kv-transfer-config")) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert json.loads(_flag(p1.argv, "--speculative-config")) == {
        "method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5}
    # NIXL's side channel: one port per instance (instances share a host on the local provider)
    ports = {p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for p in (p0, p1, d0)}
    assert len(ports) == 3 and d1.env == d0.env
    # the router: every prefill head and the decode head, session affinity on the topology's header
    assert [router.argv[i + 1] for i, a in enumerate(router.argv) if a == "--prefill"] == [p0.endpoint, p1.endpoint]
    assert [router.argv[i + 1] for i, a in enumerate(router.argv) if a == "--decode"] == [d0.endpoint]
    assert _flag(router.argv, "--policy") == "session_affinity" and front(procs) is router
    assert all("--api-key" not in p.argv for p in procs)  # the key travels in the environment


def test_one_unified_engine_needs_no_router_and_several_do():
    one = from_dict({"engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "model_profile": "llama-3.1-8b"},
                     "hardware": {"gpu_count": 1},
                     "topology": {"unified": {"gpus_per_node": 1, "data_parallel_size": 1,
                                              "enable_expert_parallel": False}}})
    [engine] = plan(one, one.topology, "127.0.0.1", free_port=_ports(), storage=None)
    assert engine.argv[3:5] == ["engine", "serve"] and front([engine]) is engine
    two = one.model_copy(update={"topology": one.topology.model_copy(update={
        "unified": one.topology.unified.model_copy(update={"instances": 2})})})
    *engines, router = plan(two, two.topology, "127.0.0.1", free_port=_ports(), storage=None)
    assert [router.argv[i + 1] for i, a in enumerate(router.argv) if a == "--backend"] == [e.endpoint for e in engines]


def _layout_procs(engine: dict[str, Any], gpus: int, unified: dict[str, Any], model: str) -> list[Any]:
    cfg = from_dict({"engine": engine, "hardware": {"gpu": "h200", "gpu_count": gpus}, "topology": {"unified": unified}})
    return plan(cfg, cfg.topology, "10.0.0.1", free_port=_ports(), storage=None, executable="vllm", model=model)


def test_vllm_argv_of_each_dp_layout():
    """vLLM's flags per DP layout (benchcamp.topology.model.dp_layout; vLLM picks the layout from these flags and the
    model): MoE DP without --enable-expert-parallel (experts TP over DP x TP), MoE DP + EP (lockstep), a dense DP
    engine (independent engine cores behind vLLM's own balancer, one process) and dense replicas behind the router."""
    v3 = {"model": "deepseek-ai/DeepSeek-V3", "model_profile": "deepseek-v3"}
    [moe_tp] = _layout_procs(v3, 8, {"tensor_parallel_size": 2, "data_parallel_size": 4,
                                     "enable_expert_parallel": False}, "deepseek-ai/DeepSeek-V3")
    assert [_flag(moe_tp.argv, f) for f in ("--tensor-parallel-size", "--data-parallel-size")] == ["2", "4"]
    assert "--enable-expert-parallel" not in moe_tp.argv
    [moe_ep] = _layout_procs(v3, 8, {"data_parallel_size": 8, "enable_expert_parallel": True}, "deepseek-ai/DeepSeek-V3")
    assert _flag(moe_ep.argv, "--data-parallel-size") == "8" and "--enable-expert-parallel" in moe_ep.argv
    llama = {"model": "meta-llama/Llama-3.1-70B-Instruct", "model_profile": "llama-3.1-70b"}
    [dense_dp] = _layout_procs(llama, 8, {"tensor_parallel_size": 4, "data_parallel_size": 2},
                               "meta-llama/Llama-3.1-70B-Instruct")
    assert [_flag(dense_dp.argv, f) for f in ("--tensor-parallel-size", "--data-parallel-size")] == ["4", "2"]
    *replicas, router = _layout_procs(llama, 8, {"instances": 2, "tensor_parallel_size": 4, "data_parallel_size": 1,
                                                 "gpus_per_node": 4}, "meta-llama/Llama-3.1-70B-Instruct")
    assert [[_flag(r.argv, f) for f in ("--tensor-parallel-size", "--data-parallel-size")] for r in replicas] == [
        ["4", "1"], ["4", "1"]]
    assert [router.argv[i + 1] for i, a in enumerate(router.argv) if a == "--backend"] == [r.endpoint for r in replicas]


def _pd_sets(tmp: Path, prefill: int, decode_extra: list[str] | None = None) -> list[str]:
    role = {"gpus_per_node": 1, "data_parallel_size": 1, "enable_expert_parallel": False, "kv_connector": NIXL,
            "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_length": 2.0}}
    topo = {"prefill": {**role, "instances": prefill}, "decode": {**role, "extra_args": decode_extra or []},
            "router": {"policy": "session_affinity", "pd_disaggregation": True}}
    return [*tiny_sets(tmp, **{"hardware.gpu_count": prefill + 1}), "topology=" + json.dumps(topo)]


@pytest.mark.slow
def test_a_2p1d_campaign_runs_end_to_end_with_per_role_counters(tmp_path):
    argv = [sys.executable, "-m", "benchcamp.cli", "run", "--params", str(HTTP_PARAMS),
            "--reports", str(tmp_path / "reports")]
    for s in _pd_sets(tmp_path, prefill=2):
        argv += ["--set", s]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "on 3 x h200" in out.stdout  # tokens/s/GPU over prefill + decode GPUs
    [run] = [p for p in (tmp_path / "results" / "tiny").iterdir() if p.is_dir()]
    delta = json.loads((run / "c2" / "point.json").read_text())["server_metrics_delta"]
    assert delta["prefill/vllm:prompt_tokens"] > 0 and delta["decode/vllm:generation_tokens"] > 0
    assert delta["prefill/vllm:generation_tokens"] == delta["prefill/vllm:request_success"]  # 1 token per prefill
    assert delta["decode/vllm:external_prefix_cache_hits"] > 0  # the decode pulled the prefills' KV
    log = (run / "engine.log").read_text()
    assert all(f"==> {n} (" in log for n in ("router", "engine-p0", "engine-p1", "engine-d0"))
    [engines] = list((tmp_path / "benchcamp-engines").iterdir())
    assert not list(engines.glob("kv-shared-*"))  # the connector's folder went with the deployment
    assert not execution_engines(run.name)


def test_a_role_that_cannot_start_stops_the_whole_topology(tmp_path):
    cfg = load_config(None, _pd_sets(tmp_path, prefill=1, decode_extra=["--max-num-seqs", "0"]))
    node = Node(kind="local", node_id="local", host="127.0.0.1", meta={"execution_id": "topo-fail-test"})
    dep = deploy(node, cfg, log_dir=tmp_path / "engines", die_with_parent=True, results_root=tmp_path)
    try:
        assert len(dep.handle["peers"]) == 2 and dep.handle["topology"].startswith("1P(")
        with pytest.raises(EngineError, match="engine-d0 exited"):
            wait_ready(dep, timeout=60)
    finally:
        stop(dep)
    assert not execution_engines("topo-fail-test")
    assert not list((tmp_path / "engines").glob("kv-shared-*"))


@pytest.mark.slow
def test_sigterm_mid_sweep_stops_every_process_of_a_1p1d(tmp_path):
    import os
    import signal
    import time

    argv = [sys.executable, "-m", "benchcamp.cli", "run", "--no-track", "--params", str(HTTP_PARAMS),
            "--reports", str(tmp_path / "reports")]
    for s in [*_pd_sets(tmp_path, prefill=1), "load.duration_s=60"]:
        argv += ["--set", s]
    log = open(tmp_path / "run.log", "w+")  # noqa: SIM115  (closed with tmp_path)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    run, procs = None, []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        runs = [p for p in (tmp_path / "results" / "tiny").glob("tiny-*") if p.is_dir()]
        if runs and list(runs[0].glob("c2/records.*.partial.arrows")):  # measuring through the router
            run, procs = runs[0], execution_engines(runs[0].name)
            break
        time.sleep(0.3)
    assert run is not None and len(procs) == 3, (tmp_path / "run.log").read_text()[-3000:]  # prefill, decode, router
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 130, (tmp_path / "run.log").read_text()[-3000:]
    assert not execution_engines(run.name)
    assert not list((tmp_path / "benchcamp-engines").glob("*/kv-shared-*"))
