"""The compiled simulator (benchcamp/sim/native.py): used only when built from the sources on disk, and it gives the
records the Python source gives, to the bit."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from benchcamp.sim import native

REQUIRED = os.environ.get(native.REQUIRE_ENV) == "1"  # CI: `make test` builds it, so it must be in use


@pytest.fixture(scope="module")
def compiled():
    if native.state != "native":
        msg = f"the compiled simulator is not in use ({native.state}); `make native` builds it"
        if REQUIRED:
            pytest.fail(msg + f" ({native.REQUIRE_ENV}=1)")
        pytest.skip(msg)


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=native.ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


SIMULATE = """
    import pickle, sys
    sys.path.insert(0, "bench")
    import rack_speed
    import benchcamp.sim.engine.core as core, benchcamp.sim.native as native
    from benchcamp.config import from_dict
    from benchcamp.sim.clock.simulate import SimLoad, SimRun, simulate
    from benchcamp.sim.clock.fleet import simulation_plan
    from tests.sim.clock.test_quiet_runs import DEPLOYMENTS, _simulate, _workload
    # test_quiet_runs' deployments (one DP8+EP engine, two unified engines, 1P2D with MTP and session affinity, the
    # DP layouts: independent dense ranks alone, in instances and in 1P1D, MoE TP over DP x TP), and the 72-GPU GB300 rack of bench/rack_speed.py (3P+1D, DSpark, DBO, Engram tables in host memory)
    runs = {name: _simulate(name) for name in DEPLOYMENTS}
    settings, topo, per, _ = simulation_plan(from_dict(rack_speed.deployment(72, block_size=16)[1]))
    runs["rack"] = simulate(_workload(48), settings, SimLoad(level=48, warmup_s=5.0, duration_s=20.0, drain_s=60.0, seed=4),
                            SimRun(topology=topo, role_settings=per))
    # AgentX's cross-stream dependencies gated (the committed sample's traces, load.agentx's rules)
    from benchcamp.config import AgentxRules
    from benchcamp.sim.engine.settings import EngineSettings
    from benchcamp.workload.agentx.traces import read_agentx
    small = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_seqs=64,
                           max_num_batched_tokens=2048)
    runs["agentx"] = simulate(read_agentx("workloads/agentx-sample.json"), small,
                              SimLoad(level=8, warmup_s=0.0, duration_s=120.0, drain_s=60.0, seed=1,
                                      agentx=AgentxRules(scenario="agentx").model_dump()))
    pickle.dump((native.state, core.__file__, runs), open(OUT, "wb"))
"""


def test_the_compiled_modules_and_the_python_source_give_identical_records(compiled, tmp_path):
    runs = {}
    for mode in ("1", "0"):
        out = tmp_path / f"native-{mode}.pkl"
        res = _child(f"OUT = {str(out)!r}\n" + textwrap.dedent(SIMULATE), {native.ENV: mode})
        assert res.returncode == 0, res.stderr[-3000:]
        runs[mode] = pickle.loads(out.read_bytes())
    (state_c, file_c, compiled_runs), (state_p, file_p, source_runs) = runs["1"], runs["0"]
    assert state_c == "native" and file_c.startswith(str(native.BUILD_DIR)) and file_c.endswith(native.EXT)
    assert state_p == "off" and file_p.endswith("benchcamp/sim/engine/core.py")
    assert len(source_runs) == 9
    for name, slow in source_runs.items():
        fast = compiled_runs[name]
        assert len(slow) > 40 and (slow.status == 200).mean() > 0.9 and slow.attrs["engine_calls"] > 100, name
        pd.testing.assert_frame_equal(slow, fast)  # every token's time included (itl_s)
        for key in set(slow.attrs) - {"wall_s", "cpu_s"}:
            assert slow.attrs[key] == fast.attrs[key], (name, key)


def test_a_build_of_other_sources_is_not_used_and_says_so(compiled, tmp_path):
    """A copy of the build with another stamp stands for a build made before a module was edited."""
    stale = tmp_path / "stale"
    shutil.copytree(native.BUILD_DIR, stale)
    (stale / native.STAMP).write_text("0" * 64 + "\n")
    fresh = tmp_path / "fresh"
    shutil.copytree(native.BUILD_DIR, fresh)
    code = """
        import os, sys
        from benchcamp.sim import native  # BENCHCAMP_NATIVE=0: `import benchcamp` installs nothing
        os.environ.pop("BENCHCAMP_NATIVE")  # then the copy is installed by hand
        state = native.install(native.Path(sys.argv[1]))
        import benchcamp.sim.engine.core as core
        print(state, core.__file__)
    """
    for build, state, where in ((stale, "stale", "benchcamp/sim/engine/core.py"), (fresh, "native", str(fresh))):
        res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(build)], cwd=native.ROOT,
                             capture_output=True, text=True, timeout=120, env={**os.environ, native.ENV: "0"})
        assert res.returncode == 0, res.stderr[-3000:]
        got_state, got_file = res.stdout.split()
        assert got_state == state and where in got_file
        warned = "older than its source; running the Python source (`make native` rebuilds it)" in res.stderr
        assert warned == (state == "stale"), res.stderr


def test_the_stamp_follows_every_compiled_source(tmp_path):
    """build_state on a copy of the tree: fresh, then stale after any compiled module changes, then no build."""
    root, build = tmp_path / "root", tmp_path / "root" / ".native"
    for module in native.NATIVE_MODULES:
        src = native.source_path(module, root)
        src.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.source_path(module), src)
        lib = native.compiled_path(module, build)
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"")
    (build / native.STAMP).write_text(native.sources_digest(root) + "\n")
    assert native.build_state(root) == "native"
    for module in native.NATIVE_MODULES:
        src = native.source_path(module, root)
        text = src.read_text()
        src.write_text(text + "\n# edited\n")
        assert native.build_state(root) == "stale", module
        src.write_text(text)
    assert native.build_state(root) == "native"
    native.compiled_path("benchcamp.sim.engine.core", build).unlink()
    assert native.build_state(root) == "stale"  # a module missing from the build
    (build / native.STAMP).unlink()
    assert native.build_state(root) == "no build"
