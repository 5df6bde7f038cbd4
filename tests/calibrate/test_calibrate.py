"""benchcamp calibrate: the fit recovers factors it was given (records the simulator made with known profiles)."""

from __future__ import annotations

import json
import math

import pytest

from benchcamp.calibrate.fit import (
    MeasuredPoint,
    Profiles,
    error_table,
    figures_of,
    fit,
    histogram_median,
    server_figures,
    simulate_point,
)
from benchcamp.profiles import load_engine, load_gpu
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

BLOCK = 64


def agentic(n: int = 12) -> Workload:
    """Sessions with a shared 1K-token prefix, growing contexts, short outputs and think times."""
    sessions, nxt = [], 100
    shared = tuple(range(1, 17))  # 1,024 tokens every session starts with
    for i in range(n):
        blocks, reqs = list(shared), []
        for t in range(5):
            extra = 3 + (i * 7 + t * 3) % 9  # 192-704 new tokens per turn
            blocks += range(nxt, nxt + extra)
            nxt += extra
            reqs.append(Request(t, tuple(blocks), len(blocks) * BLOCK, 16 + (i * 5 + t * 11) % 40, 0.1 + 0.05 * (t % 3)))
        sessions.append(Session(f"s{i}", reqs))
    return Workload("synthetic", BLOCK, 4096, sessions)


def settings(**kw) -> EngineSettings:
    return EngineSettings(model="benchcamp/tiny-llama", gpu="cpu", engine_profile="vllm-cpu", tensor_parallel_size=1,
                          data_parallel_size=1, block_size=32, max_num_seqs=kw.pop("seqs", 16),
                          max_num_batched_tokens=2048).validate()


LOAD = {"mode": "closed", "warmup_s": 1.0, "duration_s": 20.0, "drain_s": 10.0, "seed": 0}


def measured(truth: Profiles, levels=(1, 4, 12), server: bool = True) -> list[MeasuredPoint]:
    wl, out = agentic(), []
    for c in levels:
        p = MeasuredPoint(f"c{c}", "synthetic", settings(), wl, dict(LOAD, level=c), {}, server)
        df = simulate_point(p, truth)
        p.measured = figures_of(df, tuple(df.attrs["window"]), server)
        out.append(p)
    return out


BASE = Profiles(load_gpu("cpu"), load_engine("vllm-cpu"))


def test_fit_recovers_known_factors():
    truth = BASE.with_factors({"step_overhead_ms": 4.5, "seq_overhead_us": 400.0, "compute_efficiency": 0.12})
    points = measured(truth)
    res = fit(points, BASE, ("step_overhead_ms", "seq_overhead_us", "compute_efficiency"), max_evaluations=250)
    assert res.score_start > 0.1  # the defaults are off ...
    assert res.score < 0.03  # ... the fit is not (0.022 when written; the replays' own jitter is ~0.02)
    assert res.fitted["step_overhead_ms"] == pytest.approx(4.5, rel=0.1)
    assert res.fitted["seq_overhead_us"] == pytest.approx(400.0, rel=0.25)
    assert res.fitted["compute_efficiency"] == pytest.approx(0.12, rel=0.15)
    errs = error_table(res.rows)
    assert set(errs) == {"throughput", "tpot", "ttft"} and all(e["median_abs_err"] < 0.05 for e in errs.values())


def test_the_fitted_profile_predicts_a_point_it_did_not_see():
    truth = BASE.with_factors({"step_overhead_ms": 4.5, "seq_overhead_us": 400.0})
    # c1 and c8 tell the per-step and per-sequence costs apart (c1 and c4 did not: 5.5 ms and 12 us fitted them)
    fit_points = measured(truth, levels=(1, 8))
    res = fit(fit_points, BASE, ("step_overhead_ms", "seq_overhead_us"), max_evaluations=150)
    (unseen,) = measured(truth, levels=(4,))
    from benchcamp.calibrate.fit import log_errors, score

    assert score(log_errors([unseen], res.profiles)) < 0.05
    assert score(log_errors([unseen], BASE)) > 0.1


def test_unknown_factor_and_empty_input_are_errors():
    with pytest.raises(ValueError, match="unknown factor"):
        fit(measured(BASE, levels=(1,)), BASE, ("layer_overhead_us",))
    with pytest.raises(ValueError, match="no measured point"):
        fit([], BASE)


def test_server_histogram_figures():
    delta = {"vllm:request_time_per_output_token_seconds_sum": 2.0,
             "vllm:request_time_per_output_token_seconds_count": 100.0,
             "vllm:time_to_first_token_seconds_sum": 5.0, "vllm:time_to_first_token_seconds_count": 50.0,
             "vllm:time_to_first_token_seconds_bucket:0.05": 10.0, "vllm:time_to_first_token_seconds_bucket:0.1": 40.0,
             "vllm:time_to_first_token_seconds_bucket:+Inf": 50.0}
    assert server_figures(delta) == {"tpot": 0.02, "ttft": 0.1}
    assert histogram_median(delta, "vllm:time_to_first_token_seconds") == pytest.approx(0.05 + 0.05 * 15 / 30)
    assert server_figures({}) == {} and math.isnan(histogram_median({}, "x"))


def _results_folder(tmp_path, truth: Profiles, levels=(2, 6)):
    """A virtual-clock execution folder measured with ``truth``, as a campaign writes it."""
    from benchcamp.results.records import write_records
    from benchcamp.sim.clock.cli import records_rows

    ex = tmp_path / "results" / "camp" / "ex1"
    points = []
    for p in measured(truth, levels=levels):
        df = simulate_point(p, truth)
        (ex / p.label).mkdir(parents=True)
        write_records(records_rows(df), ex / p.label / "records.parquet")
        spec = dict(p.load, label=p.label)
        (ex / p.label / "point.json").write_text(json.dumps(
            {"label": p.label, "window": list(df.attrs["window"]), "spec": spec, "server_metrics_delta": {}}))
        points.append({"label": p.label, "valid": True, "reasons": []})
    config = {"engine": {"model": "benchcamp/tiny-llama", "tensor_parallel_size": 1, "data_parallel_size": 1,
                         "max_num_seqs": 16, "max_num_batched_tokens": 2048, "block_size": 32},
              "hardware": {"gpu_count": 1}, "workload": {"data": str(tmp_path / "wl.parquet")}}
    (ex / "campaign.json").write_text(json.dumps({"config": config, "points": points,
                                                  "workload_path": str(tmp_path / "wl.parquet")}))
    return tmp_path / "results"


def test_calibrate_command_on_a_results_folder(tmp_path, monkeypatch, capsys):
    """End to end through the CLI: a virtual-clock execution folder in, a profile with its provenance out."""
    from benchcamp.calibrate import sources
    from benchcamp.cli import main

    results = _results_folder(tmp_path, BASE.with_factors({"step_overhead_ms": 6.0}))
    wl = agentic()
    monkeypatch.setattr(sources, "_workload", lambda path, cache: wl)
    out = tmp_path / "profiles"
    rc = main(["calibrate", "--results", str(results), "--gpu", "cpu", "--engine-profile", "vllm-cpu",
               "--factors", "step_overhead_ms", "--name", "cpu-test", "--out", str(out)])
    assert rc == 0, capsys.readouterr()
    text = (out / "gpus" / "cpu-test.yaml").read_text()
    assert "FITTED here: step_overhead_ms 3 -> " in text and "name: cpu-test" in text
    assert not (out / "engines").exists()  # no engine factor fitted
    monkeypatch.setenv("BENCHCAMP_PROFILE_PATH", str(out))
    load_gpu.cache_clear()
    try:
        assert load_gpu("cpu-test").step_overhead_ms == pytest.approx(6.0, rel=0.05)
    finally:
        load_gpu.cache_clear()


TINY = ["engine.model=benchcamp/tiny-llama", "engine.model_profile=tiny-llama", "engine.tensor_parallel_size=1",
        "engine.data_parallel_size=1", "engine.enable_expert_parallel=false", "engine.max_num_seqs=16",
        "engine.max_num_batched_tokens=2048", "engine.block_size=32", "hardware.gpu_count=1",
        "load.warmup_s=1", "load.duration_s=20", "load.drain_s=10", "load.min_requests=5", "load.clock=virtual",
        "baselines.published=[]"]


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


@pytest.fixture
def calibrated(tmp_path, monkeypatch, capsys):
    """`benchcamp calibrate --out DIR` fits a GPU and an engine factor and writes both profiles as cpu-cal."""
    from benchcamp.calibrate import sources
    from benchcamp.cli import main

    results = _results_folder(tmp_path, BASE.with_factors({"step_overhead_ms": 6.0, "seq_overhead_us": 300.0}))
    wl = agentic()
    monkeypatch.setattr(sources, "_workload", lambda path, cache: wl)
    out = tmp_path / "profiles"
    rc = main(["calibrate", "--results", str(results), "--gpu", "cpu", "--factors", "step_overhead_ms,seq_overhead_us",
               "--max-replays", "40", "--name", "cpu-cal", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "Base profiles: gpu cpu, engine vllm-cpu" in (out / "engines" / "cpu-cal.yaml").read_text()  # cpu's default
    assert "--set hardware.gpu=cpu-cal --set engine.engine_profile=cpu-cal" in text   # says how to select it
    monkeypatch.setenv("BENCHCAMP_PROFILE_PATH", str(out))
    load_gpu.cache_clear(), load_engine.cache_clear()
    from benchcamp.workload.model import write_workload

    write_workload(wl, tmp_path / "wl.parquet")
    yield out
    load_gpu.cache_clear(), load_engine.cache_clear()


def test_a_calibrated_profile_is_selectable_in_a_virtual_campaign(tmp_path, calibrated, capsys):
    from benchcamp.cli import main

    def run(tag: str, *extra: str) -> dict:
        store = tmp_path / f"results-{tag}"
        rc = main(["run", "--params", "/dev/null", "--reports", str(tmp_path / f"reports-{tag}"), *_sets(
            *TINY, "load.levels=[4]", f"results.store={store}", f"tracking.mlflow_uri=sqlite:///{tmp_path / 'm.db'}",
            f"workload.data={tmp_path / 'wl.parquet'}", f"workload.spec={tmp_path / 'absent.yaml'}",
            f"campaign.name=cal-{tag}", *extra)])
        assert rc == 0, capsys.readouterr()
        (ex,) = [p for p in (store / f"cal-{tag}").iterdir() if p.is_dir()]
        return {"campaign": json.loads((ex / "campaign.json").read_text()),
                "summary": json.loads((ex / "summary.json").read_text())}

    cal = run("cal", "hardware.gpu=cpu-cal", "engine.engine_profile=cpu-cal")
    base = run("base", "hardware.gpu=cpu")
    config = cal["campaign"]["config"]
    assert config["hardware"]["gpu"] == "cpu-cal" and config["engine"]["engine_profile"] == "cpu-cal"
    assert base["campaign"]["config"]["engine"]["engine_profile"] == ""   # the default: vllm-cpu on cpu
    from benchcamp.config import from_dict

    used = EngineSettings.from_config(from_dict(config))
    assert used.engine_spec().seq_overhead_us == pytest.approx(300, rel=0.1)   # the fitted engine profile's
    assert used.gpu_profile().step_overhead_ms == pytest.approx(6, rel=0.05)
    (pc,), (pb,) = cal["summary"]["points"], base["summary"]["points"]
    assert pc["clock"] == "virtual"
    # the fitted profiles (twice the step overhead, 3x the per-sequence cost) are the ones simulated: slower
    assert pc["tpot_p50_s"] > 1.3 * pb["tpot_p50_s"], (pc["tpot_p50_s"], pb["tpot_p50_s"])


def test_plan_searches_a_calibrated_profile_and_unknown_names_fail_in_one_line(tmp_path, calibrated, capsys):
    from benchcamp.cli import main

    plan = ["plan", "--params", "/dev/null", "--workload", str(tmp_path / "wl.parquet"), "--out", str(tmp_path / "plan")]
    tier = "load.tiers=[{name: slow, p90_user_tok_s: 2, p90_ttft_s: 10}]"
    rc = main([*plan, "--gpu", "cpu-cal", "--max-num-seqs", "4,16", *_sets(
        *TINY, tier, "engine.engine_profile=cpu-cal", "load.capacity.max=32", "load.capacity.resolution_rel=0.25")])
    assert rc == 0, capsys.readouterr()
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert [c["status"] for c in doc["configs"]] == ["searched", "searched"]
    assert doc["best"]["slow"]["config"].startswith("cpu-calx1-")
    capsys.readouterr()

    for cmd, sets, line in (
        (["run", "--params", "/dev/null"], ["hardware.gpu=h300"], "hardware.gpu=h300: unknown GPU profile; "),
        (["run", "--params", "/dev/null"], ["engine.engine_profile=nope"], "engine.engine_profile=nope: unknown engine"),
        ([*plan, "--gpu", "cpu-cal,h300"], TINY, "--gpu=h300: unknown GPU profile; available: "),
    ):
        assert main([*cmd, *_sets(*sets)]) == 2
        err = capsys.readouterr().err.strip()
        assert line in err and len(err.splitlines()) == 1, err
        assert "cpu-cal" in err or "engine" in line          # the calibrated profile is among the available
