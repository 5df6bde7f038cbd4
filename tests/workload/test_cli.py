"""`benchcamp workload build/stats` and ensure_workload (build if missing or stale, else read)."""

from __future__ import annotations

import json
import os

import yaml

from benchcamp.cli import main
from benchcamp.config import load_config
from benchcamp.workload import ensure_workload


def _write_spec(tmp_path, spec) -> str:
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def test_build_and_stats(tmp_path, small_spec, capsys):
    spec = _write_spec(tmp_path, small_spec)
    out = tmp_path / "data" / "tiny.parquet"
    assert main(["workload", "build", "--spec", spec, "--out", str(out)]) == 0
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["name"] == "tiny-agentic" and side["seed"] == 11
    capsys.readouterr()
    assert main(["workload", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["digest"] == side["digest"] and stats == dict(side["stats"], digest=side["digest"])
    assert main(["workload", "stats", str(out), "--block-size", "8"]) == 0
    assert "hit_rate_block_size        8" in capsys.readouterr().out
    # the seed override changes the data
    assert main(["workload", "build", "--spec", spec, "--out", str(tmp_path / "s.parquet"), "--seed", "5"]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["digest"] != side["digest"]


def test_build_reports_bad_spec(tmp_path, small_spec, capsys):
    small_spec["session"]["turns"] = {"kind": "uniform", "low": 2}
    spec = _write_spec(tmp_path, small_spec)
    assert main(["workload", "build", "--spec", spec, "--out", str(tmp_path / "x.parquet")]) == 2
    assert "session.turns.high: Field required" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_stats_of_missing_file(tmp_path, capsys):
    assert main(["workload", "stats", str(tmp_path / "nope.parquet")]) == 2
    assert "benchcamp workload build" in capsys.readouterr().err


def test_ensure_workload_builds_reuses_and_rebuilds(tmp_path, small_spec):
    spec = _write_spec(tmp_path, small_spec)
    data = tmp_path / "data" / "tiny.parquet"
    cfg = load_config(None, {"workload.spec": spec, "workload.data": str(data)})
    w, path, digest = ensure_workload(cfg.workload)
    assert path == data and data.exists() and digest == w.digest
    os.utime(data, (1, 1))
    w2, _, digest2 = ensure_workload(cfg.workload)
    assert digest2 == digest and data.stat().st_mtime == 1  # fresh: read, not rebuilt
    small_spec["sessions"] = 3
    _write_spec(tmp_path, small_spec)
    w3, _, digest3 = ensure_workload(cfg.workload)
    assert digest3 != digest and len(w3.top_level()) == 3  # stale: rebuilt
    os.remove(spec)
    assert ensure_workload(cfg.workload)[2] == digest3  # data only (e.g. after `dvc pull`): used as is
