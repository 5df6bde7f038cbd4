"""Virtual-clock points: byte-identical records for one fingerprint, in the load generator's format."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from benchcamp.loadgen.spec import PointResult, PointSpec
from benchcamp.metrics import summarize, validity
from benchcamp.pricing import prices_for
from benchcamp.results.records import SCHEMA, read_records
from benchcamp.sim.clock.virtual_point import run_point_virtual


def test_same_fingerprint_gives_byte_identical_records(tmp_path, small_cfg, tiny_workload):
    cfg = small_cfg()
    spec = PointSpec.from_load(cfg.load, 8, "exec-a")
    a = run_point_virtual(cfg, tiny_workload, spec, tmp_path / "a")
    run_point_virtual(cfg, tiny_workload, spec, tmp_path / "b")
    assert a.requests > 20
    assert (tmp_path / "a/records.parquet").read_bytes() == (tmp_path / "b/records.parquet").read_bytes()
    # another load level gives other records (the test can fail)
    c = run_point_virtual(cfg, tiny_workload, PointSpec.from_load(cfg.load, 16, "exec-a"), tmp_path / "c")
    assert (tmp_path / "c/records.parquet").read_bytes() != (tmp_path / "a/records.parquet").read_bytes()
    assert c.label == "c16"


def test_files_are_what_the_load_generator_writes_and_the_point_is_valid(tmp_path, small_cfg, tiny_workload):
    cfg = small_cfg()
    spec = PointSpec.from_load(cfg.load, 8, "exec-a")
    res = run_point_virtual(cfg, tiny_workload, spec, tmp_path)
    assert pq.read_schema(tmp_path / "records.parquet").remove_metadata() == SCHEMA
    loaded = PointResult.load(tmp_path)
    assert (loaded.label, loaded.window, loaded.requests) == (res.label, res.window, res.requests)
    assert json.loads((tmp_path / "point.json").read_text())["clock"] == "virtual"
    assert res.client_health["clock"] == "virtual" and res.client_health["cpu_max"] is None
    records = read_records(res.records_path)
    s = summarize(records, res.window, 1, prices_for(cfg.pricing), cfg.hardware.usd_per_gpu_hour, cfg.slo,
                  server_delta=res.server_metrics_delta, client_health=res.client_health)
    v = validity(s, res.client_health, cfg.load)
    assert v["valid"], v["reasons"]
    assert s["client_lag_p99_ms"] == 0.0 and s["total_tokens_per_s_per_gpu"] > 0
    assert s["cache_hit_rate_server"] > 0.3


def test_virtual_retry_runs_a_longer_window_under_its_own_label(tmp_path, small_cfg, tiny_workload):
    from benchcamp.sim.clock.virtual_point import virtual_measure

    cfg = small_cfg("load.mode=capacity")
    measure = virtual_measure(cfg, tiny_workload, tmp_path)
    first, retry = measure(2, 0), measure(2, 1)
    assert (first.label, retry.label) == ("c2", "c2.retry1")
    assert retry.window[1] - retry.window[0] == 2 * (first.window[1] - first.window[0])
    assert retry.summary["requests"] > first.summary["requests"]
    assert (tmp_path / "c2.retry1" / "records.parquet").exists() and first.summary["clock"] == "virtual"


def test_probe_spec_is_closed_loop_and_a_retry_has_its_own_label_window_and_salt(small_cfg):
    from benchcamp.loadgen.spec import probe_spec

    cfg = small_cfg("load.mode=capacity")
    first, retry = probe_spec(cfg.load, 16, 0, "ex"), probe_spec(cfg.load, 16, 1, "ex")
    assert (first.mode, first.level, first.label, retry.label) == ("closed", 16.0, "c16", "c16.retry1")
    assert retry.duration_s == 2 * first.duration_s and retry.drain_s == 2 * first.drain_s
    assert len({first.salt, retry.salt, probe_spec(cfg.load, 16, 0, "other").salt}) == 3
