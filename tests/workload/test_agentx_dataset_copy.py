"""A Hugging Face copy of an AgentX corpus (``benchcamp.workload.agentx.files``) reads as the JSON it holds.

The corpus itself cannot be downloaded here, so the copies are built from workloads/agentx-sample.json the way
the Hub stores a dataset repo: ``datasets--<org>--<name>/snapshots/<commit>/`` with the data files as links into
``blobs/``, a README and a ``.gitattributes`` beside them; the rows as JSON Lines or as Parquet (Arrow fills the
fields a trace or request lacks with null). What the sample's JSON reads as is checked against the harness's own
loader in test_agentx_conformance.py; here every copy must read as that JSON does.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchcamp.errors import TraceError
from benchcamp.workload import build_workload
from benchcamp.workload.agentx.files import dataset_files
from benchcamp.workload.agentx.scenarios import PINNED_TRACES, corpus_verdict
from benchcamp.workload.agentx.traces import read_agentx

SAMPLE = Path(__file__).resolve().parents[2] / "workloads" / "agentx-sample.json"
REPO = "datasets--semianalysisai--cc-traces-weka-062126"
COMMIT = "5" * 40


def _traces(n: int | None = None) -> list[dict]:
    traces = json.loads(SAMPLE.read_text())
    if n is None:
        return traces
    return [{**traces[i % len(traces)], "id": f"t{i:03d}"} for i in range(n)]


def _snapshot(hub: Path, files: dict[str, bytes]) -> Path:
    """The Hub's layout: each file's bytes in blobs/<sha256>, linked from snapshots/<commit>/<name>."""
    repo = hub / REPO
    snap = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    for name, data in {"README.md": b"# cc-traces\n", ".gitattributes": b"*.parquet filter=lfs\n", **files}.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    return snap


def _parquet(traces: list[dict]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(traces), sink)
    return sink.getvalue().to_pybytes()


def _jsonl(traces: list[dict]) -> bytes:
    return "".join(json.dumps(t) + "\n" for t in traces).encode()


def _same(a, b) -> None:
    assert [s.id for s in a.sessions] == [s.id for s in b.sessions]
    assert a.sessions == b.sessions
    assert a.meta["agentx"] == b.meta["agentx"] and a.meta["agentx_models"] == b.meta["agentx_models"]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_hub_copy_reads_as_the_json_it_holds(tmp_path, fmt):
    traces = _traces()
    data = _parquet(traces) if fmt == "parquet" else _jsonl(traces)
    snap = _snapshot(tmp_path / "hub", {f"data/train-00000-of-00001.{fmt}": data})
    if fmt == "parquet":  # the case the nulls are dropped for: a subagent entry's fields on every request
        row = pq.read_table(next(snap.rglob("*.parquet"))).to_pylist()[0]
        assert any(v is None for r in row["requests"] for v in r.values())
    _same(read_agentx(snap), read_agentx(SAMPLE))


def test_only_the_train_split_and_nothing_hidden_is_read(tmp_path):
    traces = _traces()
    snap = _snapshot(
        tmp_path / "hub",
        {
            "data/train-00000-of-00002.jsonl": _jsonl(traces[:2]),
            "data/train-00001-of-00002.jsonl": _jsonl(traces[2:]),
            "data/test-00000-of-00001.jsonl": _jsonl([{**traces[0], "id": "held-out"}]),
            ".cache/huggingface/download/data/train-00000-of-00002.jsonl": b"not json\n",
        },
    )
    assert [f.name for f in dataset_files(snap)] == ["train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl"]
    _same(read_agentx(snap), read_agentx(SAMPLE))


def test_a_bad_row_or_an_empty_copy_gets_one_line(tmp_path):
    snap = _snapshot(tmp_path / "a", {"train.jsonl": _jsonl(_traces()[:1]) + b"{oops\n"})
    with pytest.raises(TraceError, match=r"^train\.jsonl:2: not valid JSON"):
        read_agentx(snap)
    bad = _snapshot(tmp_path / "b", {"data/train.parquet": b"PAR1 not really"})
    with pytest.raises(TraceError, match=r"^train\.parquet: not a readable Parquet file"):
        read_agentx(bad)
    empty = _snapshot(tmp_path / "c", {})
    with pytest.raises(TraceError, match="no dataset files"):
        read_agentx(empty)


def test_a_hub_copy_of_the_pinned_corpus_is_a_valid_submission_and_a_short_one_is_not(tmp_path):
    """The verdict a run states (summary, report, MLflow) for a copy of the pinned repo with its 393 traces, and for
    one with a trace missing; the digest of the copy is what benchcamp knows it by (``PINNED_SHA256`` is empty)."""
    full = _snapshot(tmp_path / "full", {"data/train-00000-of-00001.parquet": _parquet(_traces(PINNED_TRACES))})
    wl, _, _ = build_workload(full, tmp_path / "full.parquet")
    assert wl.meta["agentx"]["traces"] == PINNED_TRACES
    assert corpus_verdict("agentx", str(full), wl.meta) is None
    short = _snapshot(tmp_path / "short", {"data/train-00000-of-00001.parquet": _parquet(_traces(PINNED_TRACES - 1))})
    wl, _, _ = build_workload(short, tmp_path / "short.parquet")
    why = corpus_verdict("agentx", str(short), wl.meta)
    assert why is not None and "is not the pinned corpus" in why and str(PINNED_TRACES) in why
