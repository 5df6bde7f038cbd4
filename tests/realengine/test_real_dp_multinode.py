"""vLLM's multi-node data-parallel launch, on loopback, deployed, measured and torn down by `benchcamp run`:
a head (`--data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-address 127.0.0.1
--data-parallel-rpc-port P`, serving the API) and a `--headless --data-parallel-start-rank 1` peer, each
a process tree of its own. The CPU build runs it (both ranks' workers pin core 0 on 2 cores). A headless
peer does not exit when its head stops: the teardown must stop it too. The tiny model is dense: its ranks run as
independent engines (no lockstep), as benchcamp's simulator now runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest
from realengine_support import PRESET, ROOT, engine_processes, real_sets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _per_engine(metrics: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in re.finditer(rf'^{re.escape(name)}\{{[^}}]*engine="(\d+)"[^}}]*\}} ([0-9.e+]+)$', metrics, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def test_a_head_and_a_headless_peer_serve_together_and_stop_together(vllm_install, tmp_path, no_engine_leftovers):
    sets = real_sets(tmp_path, **{"engine.data_parallel_size": 2, "engine.data_parallel_size_local": 1,
                                  "hardware.gpu_count": 2, "load.levels": "[4]", "load.duration_s": 20,
                                  "load.warmup_s": 2})
    argv = [sys.executable, "-m", "benchcamp.cli", "run", "--params", str(PRESET), *(a for s in sets for a in ("--set", s))]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, endpoint, metrics, trees = [], None, "", []
    try:
        for line in proc.stdout:
            lines.append(line)
            if m := re.search(r"engine ready at (http://\S+)", line):
                endpoint = m.group(1)
            if endpoint and "measure t=" in line and not metrics:   # both ranks serving: look at them
                trees = [p.name() for p in engine_processes(tmp_path)]
                with urllib.request.urlopen(endpoint + "/metrics", timeout=10) as r:
                    metrics = r.read().decode()
        proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    assert "headline" in out and "on 2 x cpu" in out

    (engine_dir,) = [p for p in (tmp_path / "benchcamp-engines").iterdir()]
    head = json.loads((engine_dir / "engine-argv.json").read_text())["argv"]
    peer = json.loads((engine_dir / "engine-peer1-argv.json").read_text())["argv"]
    assert [head[head.index(f) + 1] for f in ("--data-parallel-size", "--data-parallel-size-local",
                                                "--data-parallel-address")] == ["2", "1", "127.0.0.1"]
    assert peer[-3:] == ["--headless", "--data-parallel-start-rank", "1"]
    assert peer[peer.index("--data-parallel-rpc-port") + 1] == head[head.index("--data-parallel-rpc-port") + 1]
    # Two trees: the head's API server with its engine core (rank 0), the peer with its own (rank 1).
    assert sum(name.startswith("VLLM::EngineCor") for name in trees) == 2, trees
    # Requests went to both ranks: each engine's series counts tokens it generated.
    waiting = _per_engine(metrics, "vllm:num_requests_running") or _per_engine(metrics, "vllm:num_requests_waiting")
    assert set(waiting) == {"0", "1"}, metrics[:2000]
    run = next(p for p in (tmp_path / "results" / "real-cpu-smoke").iterdir() if p.is_dir())
    peer_log = (engine_dir / "engine-peer1.log").read_text()
    assert "EngineCore_DP1" in peer_log   # rank 1 ran in the peer
    # A dense model's DP rank is an independent engine (what the simulator runs: Router.many_clocks): vLLM's
    # run_engine_core makes it an EngineCoreProc with reconfigure_for_independent_dp_rank() (data_parallel_size 1,
    # "Non-MoE DP ranks are completely independent"), not a lockstep DPEngineCoreProc, and logs that config.
    init = [ln for ln in peer_log.splitlines() if "Initializing a V1 LLM engine" in ln]
    assert init and all("data_parallel_size=1," in ln for ln in init), init
    point = json.loads((run / "c4" / "point.json").read_text())
    assert point["server_metrics_delta"]["vllm:generation_tokens"] > 0
