"""AgentX (Weka) trace import: files written in the real format (agentx_traces.py) -> workload,
exact to the block; the committed sample; the CLI; the optional Parquet columns."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentx_traces import BS, make_trace, sample_traces  # noqa: E402

from benchcamp.cli import main  # noqa: E402
from benchcamp.errors import TraceError  # noqa: E402
from benchcamp.workload import build_workload, read_workload  # noqa: E402
from benchcamp.workload.agentx.traces import read_agentx  # noqa: E402
from benchcamp.workload.generator import generate, load_spec  # noqa: E402
from benchcamp.workload.model import SCHEMA, to_table, workload_digest, write_workload  # noqa: E402
from benchcamp.workload.stats import workload_stats  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, doc, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_trace_maps_to_sessions_exact_to_the_block(tmp_path):
    doc = make_trace("trace_x", 7, turns=6)
    w = read_agentx(_write(tmp_path, doc))
    assert w.block_size == BS == 64
    by = {s.id: s for s in w.sessions}
    root = by["trace_x"]
    assert root.kind == "main" and root.parent is None
    top = [r for r in doc["requests"] if r["type"] in ("n", "s") and r["model"] == doc["requests"][0]["model"]]
    assert [(q.prompt_len, q.output_len) for q in root.requests] == [(r["in"], r["out"]) for r in top]
    # equal hash ids -> equal block ids (shared prefixes), blocks = ceil(in / 64)
    for q, r in zip(root.requests, top):
        assert len(q.blocks) == -(-r["in"] // BS)
    for (a, ra), (b, rb) in zip(zip(root.requests, top), zip(root.requests[1:], top[1:])):
        n = sum(1 for x, y in zip(ra["hash_ids"], rb["hash_ids"]) if x == y)
        assert a.blocks[:n] == b.blocks[:n] and a.blocks[n : n + 1] != b.blocks[n : n + 1]
    # think times are end-to-start: t - (t_prev + api_time_prev), after a join from the children's end
    assert root.requests[1].think_s == pytest.approx(top[1]["t"] - (top[0]["t"] + top[0]["api_time"]))
    assert root.requests[0].think_s == 0.0
    # the joined Explore subagent, after main turn 1; its think times end-to-start too
    sa = by["trace_x::sa:agent_007a"]
    entry = next(r for r in doc["requests"] if r.get("agent_id") == "agent_007a")
    assert (sa.kind, sa.parent, sa.parent_turn, sa.joined) == ("subagent", "trace_x", 1, True)
    assert [q.prompt_len for q in sa.requests] == [r["in"] for r in entry["requests"]]
    assert sa.requests[0].think_s == pytest.approx(entry["requests"][0]["t"] - (top[1]["t"] + top[1]["api_time"]))
    sa_end = entry["t"] + entry["duration_ms"] / 1000
    assert root.requests[2].think_s == pytest.approx(top[2]["t"] - sa_end)
    # the background subagent (relative inner t, no duration) outlives the next turn's start: not joined
    bg = by["trace_x::sa:agent_007b"]
    assert (bg.parent_turn, bg.joined, len(bg.requests)) == (3, False, 1)
    # the Haiku one-off on a fresh context is an aux sidecar after turn 3, not a main turn
    aux = by["trace_x::aux:000"]
    assert (aux.kind, aux.parent_turn, aux.joined, aux.requests[0].prompt_len) == ("aux", 3, True, 1500)
    # tool + system prefix (1856 + 2304 tokens) = 65 whole blocks shared by a cache-bust marker
    assert root.fixed_blocks == 4160 // BS == 65
    assert w.meta["agentx"]["background_children"] == 1 and w.meta["agentx"]["aux_requests"] == 1


def test_traces_never_alias_and_missing_hash_ids_are_fresh_blocks(tmp_path):
    a, b = make_trace("ta", 1, turns=3, subagents=False), make_trace("tb", 1, turns=3, subagents=False)
    assert a["requests"][0]["hash_ids"] == b["requests"][0]["hash_ids"]  # same local ids in both files
    short = a["requests"][1]
    short["hash_ids"] = short["hash_ids"][:3]  # the rest of `in` is not covered by ids
    w = read_agentx(_write(tmp_path, [a, b]))
    by = {s.id: s for s in w.sessions}
    ra, rb = by["ta"].requests, by["tb"].requests
    assert not set(ra[0].blocks) & set(rb[0].blocks)  # hash_id_scope local: distinct across traces
    # the shrunken context is a fan-out chain of its own now (the harness's LCP chain detection)
    (cut,) = [r for s in w.sessions if s.parent == "ta" for r in s.requests if r.prompt_len == short["in"]]
    assert len(cut.blocks) == -(-short["in"] // BS) and cut.blocks[:3] == ra[0].blocks[:3]
    assert not set(cut.blocks[3:]) & set(ra[0].blocks + ra[1].blocks)


def test_folder_of_trace_files_and_build_workload_round_trip(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    for i, t in enumerate(sample_traces()[:2]):
        _write(folder, t, f"trace_{i:04d}.json")
    w, digest, stats = build_workload(folder, tmp_path / "w.parquet")
    back = read_workload(tmp_path / "w.parquet")
    assert back.digest == digest == w.digest and back.meta["source"] == "agentx"
    assert [(s.id, s.kind, s.joined, s.fixed_blocks) for s in back.sessions] == [
        (s.id, s.kind, s.joined, s.fixed_blocks) for s in w.sessions
    ]
    assert stats["aux_requests"] == 2 and stats["background_children"] == 2
    names = pq.read_schema(tmp_path / "w.parquet").names
    assert names == SCHEMA.names + ["kind", "joined", "fixed_blocks", "after", "model"]
    assert [(r.after, r.model) for _, r in back.requests()] == [(r.after, r.model) for _, r in w.requests()]
    assert sum(len(r.after) for _, r in back.requests()) == back.meta["agentx"]["dependencies"] > 0


def test_workloads_without_the_optional_fields_keep_schema_bytes_and_digest(tmp_path):
    w = generate(load_spec(REPO / "workloads/agentic-tiny.yaml"))
    assert not w.uses_optional()
    assert to_table(w).schema.names == SCHEMA.names
    before = workload_digest(w)
    write_workload(w, tmp_path / "a.parquet")
    # setting one optional field changes the digest (it is part of the content) ...
    w.sessions[0].kind = "main"
    assert workload_digest(w) != before
    w.sessions[0].kind = None
    write_workload(w, tmp_path / "b.parquet")
    # ... and unsetting it gives the same bytes again
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_the_committed_sample_is_the_real_format_generator_output():
    sample = REPO / "workloads/agentx-sample.json"
    assert json.loads(sample.read_text()) == sample_traces()
    w = read_agentx(sample)
    assert {s.kind for s in w.sessions} == {"main", "subagent", "aux"}


def _sessions(w):
    return {
        s.id: (
            s.parent,
            s.parent_turn,
            s.kind,
            s.joined,
            s.fixed_blocks,
            [(r.turn, r.prompt_len, r.output_len, r.think_s, r.blocks) for r in s.requests],
        )
        for s in w.sessions
    }


def test_the_sample_one_trace_per_file_as_aiperf_reads_it_imports_the_same(tmp_path):
    """AIPerf's weka_trace loader takes one trace *object* per .json file (or a folder of them); the
    committed sample is a JSON list of traces (benchcamp's importer takes both). Written one per file,
    as bench/agentx_side_by_side.py gives it to AIPerf, it is the same workload, session by session."""
    sample = REPO / "workloads/agentx-sample.json"
    traces = json.loads(sample.read_text())
    assert isinstance(traces, list) and len(traces) == 4
    folder = tmp_path / "traces"
    folder.mkdir()
    for t in traces:
        assert isinstance(t, dict)  # what AIPerf's loader needs of each file
        (folder / f"{t['id']}.json").write_text(json.dumps(t))
    a, b = read_agentx(sample), read_agentx(folder)
    assert a.block_size == b.block_size == 64
    assert _sessions(a) == _sessions(b) and len(_sessions(a)) == len(a.sessions)
    assert a.meta["agentx"] == b.meta["agentx"]


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d.update(hash_id_scope="global"), "hash_id_scope"),
        (lambda d: d.update(extra=1), "unknown field"),
        (lambda d: d["requests"][0].update(bogus=1), "unknown field"),
        (lambda d: d["requests"][0].update({"in": 4160.5}), "in must be a whole number"),
        (lambda d: d["requests"][0].update(type="x"), "type must be"),
        (lambda d: d["requests"][0].update(hash_ids=[-1]), "hash_ids"),
        (lambda d: d["requests"][2].update(requests=[{"t": 1}]), r"requests\[2\]\.requests\[0\]: type must be"),
    ],
)
def test_bad_traces_fail_with_a_line_naming_the_field(tmp_path, mutate, words):
    d = make_trace("bad", 3, turns=3)
    mutate(d)
    with pytest.raises(TraceError, match=words):
        read_agentx(_write(tmp_path, d))


def test_cli_import_agentx_and_stats(tmp_path, capsys):
    out = tmp_path / "ax.parquet"
    assert main(["workload", "import-agentx", str(REPO / "workloads/agentx-sample.json"), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and out.with_suffix(".json").exists()
    assert main(["workload", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats == dict(workload_stats(read_workload(out)), digest=read_workload(out).digest)
    assert stats["block_size"] == 64 and stats["aux_requests"] == 3
    assert main(["workload", "import-agentx", str(tmp_path / "none.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "nothing was written" in err


def test_the_dvc_stage_of_the_sample_rebuilds_the_bytes_dvc_lock_pins(tmp_path, capsys):
    import hashlib

    import yaml

    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["workload-agentx-sample"]
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())["stages"]["workload-agentx-sample"]
    argv = stage["cmd"].split()[3:]  # python -m benchcamp.cli <argv>
    out = tmp_path / "agentx-sample.parquet"
    argv[argv.index("--out") + 1] = str(out)
    assert main(argv) == 0
    pinned = {o["path"]: o["md5"] for o in lock["outs"]}
    assert hashlib.md5(out.read_bytes()).hexdigest() == pinned["workloads/data/agentx-sample.parquet"]
    sidecar = json.loads((REPO / "workloads/data/agentx-sample.json").read_text())
    assert sidecar["digest"] == read_workload(out).digest and sidecar["source"] == "agentx"
