"""Corrupt workload files and hostile trace lines: one line naming the file and the fix."""

from __future__ import annotations

import json

import pytest
import yaml

from benchcamp.cli import main
from benchcamp.errors import TraceError
from benchcamp.workload.model import read_workload
from benchcamp.workload.mooncake import parse_line, read_mooncake


def _line(**kw) -> str:
    d = {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}
    d.update(kw)
    return json.dumps(d)


@pytest.mark.parametrize("text, named", [
    ('{"timestamp": NaN, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}', "NaN"),
    ('{"timestamp": Infinity, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}', "Infinity"),
    (_line(timestamp=1e308), "timestamp must be milliseconds from 0 to"),
    (_line(output_length=10**12), "output_length must be an integer from 1 to 10,000,000"),
    (_line(input_length=10**12, hash_ids=[1]), "input_length must be an integer from 1 to 10,000,000"),
    ("[" * 100000, "nested too deeply"),
])
def test_hostile_trace_values_are_trace_errors(text, named):
    with pytest.raises(TraceError, match=named) as err:
        parse_line(text, "t.jsonl line 1")
    assert str(err.value).startswith("t.jsonl line 1: ")


def test_import_of_a_trace_with_a_huge_output_length_is_one_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(_line() + "\n" + _line(output_length=10**12) + "\n")
    assert main(["workload", "import-mooncake", str(trace), "--out", str(tmp_path / "w.parquet")]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl line 2: output_length" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "w.parquet").exists()
    trace.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(TraceError, match="not UTF-8"):
        read_mooncake(trace)


@pytest.mark.parametrize("content", [b"", b"PAR1 this is not parquet PAR1", b"\x00" * 4096])
def test_a_corrupt_workload_file_names_the_file_and_the_fix(tmp_path, capsys, content):
    bad = tmp_path / "w.parquet"
    bad.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_workload(bad)
    msg = str(err.value)
    assert str(bad) in msg and "benchcamp workload build" in msg and "dvc repro workload" in msg
    assert main(["workload", "stats", str(bad)]) == 2
    out = capsys.readouterr().err
    assert str(bad) in out and len(out.splitlines()) == 1


def test_a_parquet_that_is_not_a_workload_names_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}).replace_schema_metadata({"benchcamp": '{"name": "x"}'}), bad)
    with pytest.raises(TraceError, match=f"workload file {bad} is not a benchcamp workload"):
        read_workload(bad)


def test_a_run_on_a_corrupt_workload_stops_before_measuring(tmp_path, small_spec, capsys, monkeypatch):
    """`benchcamp engine simulate` reads the params' workload: a corrupt one is one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(small_spec))
    data = tmp_path / "w.parquet"
    data.write_bytes(b"PAR1 corrupt")
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"workload": {"spec": "gone.yaml", "data": str(data)}}))
    assert main(["engine", "simulate", "--params", str(params), "--level", "2", "--duration-s", "5"]) == 2
    err = capsys.readouterr().err
    assert str(data) in err and "dvc repro workload" in err and len(err.splitlines()) == 1


def test_engine_simulate_builds_a_missing_workload_as_run_does(tmp_path, small_spec, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(small_spec))
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"workload": {"spec": "spec.yaml", "data": "data/w.parquet"},
                                      "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct",
                                                 "model_profile": "llama-3.1-8b", "data_parallel_size": 1},
                                      "hardware": {"gpu_count": 1}}))
    assert main(["engine", "simulate", "--params", str(params), "--level", "2", "--warmup-s", "1",
                 "--duration-s", "5", "--drain-s", "5"]) == 0
    assert (tmp_path / "data" / "w.parquet").exists()


@pytest.mark.parametrize("path, value, named", [
    (("sessions",), 10**9, "sessions: Input should be less than or equal to 1000000"),
    (("session", "think_s"), float("inf"), "session.think_s"),
    (("arrival",), {"kind": "poisson", "rate_per_s": float("inf")}, "arrival.rate_per_s"),
])
def test_spec_numbers_are_finite_and_bounded(small_spec, path, value, named):
    from benchcamp.errors import SpecError
    from benchcamp.workload.generator import parse_spec

    node = small_spec
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(SpecError, match=named):
        parse_spec(small_spec, "spec.yaml")
