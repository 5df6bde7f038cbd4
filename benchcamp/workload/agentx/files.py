"""Where AgentX traces lie on disk, and their documents: one trace object (or benchcamp's JSON list of them) per
``*.json`` file, a folder of such files (the harness's file input, ``WekaTraceLoader``), or a Hugging Face copy of
a corpus repo (what ``huggingface-cli download --repo-type dataset semianalysisai/cc-traces-weka-062126`` writes:
``datasets--<org>--<name>/snapshots/<commit>/``, its files links into ``blobs/``).

The harness reads a corpus repo with ``datasets.load_dataset(repo, split="train")``
(``aiperf/dataset/loader/base_hf_dataset.py`` in agentx-harness 1.0.12): one row per trace, from whatever data
files the repo holds. So does this module, for the formats ``datasets`` infers without a loading script that
can hold such rows: JSON Lines (one trace per line), Parquet (one trace per row) and JSON, anywhere below the
folder outside hidden folders (``.cache``, ``.git``), only the train split's files where file names say which
split (``datasets``' default patterns: ``train``, ``test``, ``validation``, ... as a word of the path).
A Parquet row holds every field of its struct: Arrow fills the fields a trace or request lacks with null, and
the harness's pydantic models read null as absent; so the nulls are dropped here and the trace reads as the JSON
it came from. The digest covers every file's relative path and bytes, in order.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchcamp.errors import TraceError

DATA_SUFFIXES = (".json", ".jsonl", ".parquet")
# a split's name as a word of a data file's path (datasets.data_files' default split patterns, simplified)
_SPLIT = re.compile(
    r"(?:^|[/_.\- ])(train|training|test|testing|eval|evaluation|validation|valid|val|dev)(?=[/_.\-0-9 ]|$)"
)
_TRAIN = ("train", "training")


def trace_files(p: Path) -> list[Path]:
    """The trace files of a path: itself; a folder's ``*.json``; else a dataset copy's data files below it."""
    if not p.is_dir():
        return [p]
    files = sorted(q for q in p.iterdir() if q.suffix == ".json" and q.is_file())
    if files:
        return files
    files = dataset_files(p)
    if not files:
        raise TraceError(
            f"{p}: no *.json trace files in the folder and no dataset files (*.jsonl, *.parquet, *.json) below it"
        )
    return files


def dataset_files(root: Path) -> list[Path]:
    """A dataset copy's data files below ``root``, outside hidden folders; the train split's where names say."""
    found = sorted(
        q
        for q in root.rglob("*")
        if q.suffix in DATA_SUFFIXES
        and not any(part.startswith(".") for part in q.relative_to(root).parts)
        and q.is_file()
    )
    splits = {q: _SPLIT.search(q.relative_to(root).as_posix().lower()) for q in found}
    if any(splits.values()):
        found = [q for q in found if (m := splits[q]) is not None and m.group(1) in _TRAIN]
    return found


def trace_documents(path: Path) -> tuple[list[tuple[str, Any]], str]:
    """Every trace document under ``path`` as (where, document), and the files' digest (``trace_digest``)."""
    h = hashlib.sha256()
    docs: list[tuple[str, Any]] = []
    for f, raw in _read(path, h):
        docs.extend(_documents(f, raw))
    return docs, h.hexdigest()


def trace_digest(path: Path) -> str:
    """The sha256 of the trace files under ``path``: each one's path relative to the folder, then its bytes."""
    h = hashlib.sha256()
    for _ in _read(path, h):
        pass
    return h.hexdigest()


def _read(path: Path, h: Any) -> Iterator[tuple[Path, bytes]]:
    base = path if path.is_dir() else path.parent
    for f in trace_files(path):
        raw = f.read_bytes()
        h.update(f.relative_to(base).as_posix().encode() + b"\x00" + raw)
        yield f, raw


def _documents(f: Path, raw: bytes) -> Iterator[tuple[str, Any]]:
    if f.suffix == ".parquet":
        rows = _parquet_rows(f, raw)
        for i, row in enumerate(rows):
            yield (f.name if len(rows) == 1 else f"{f.name}[{i}]"), _without_nulls(row)
        return
    text = _text(f, raw)
    if f.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield f"{f.name}:{n}", _json(f"{f.name}:{n}", line)
        return
    doc = _json(f.name, text)
    # a JSON list of traces in one file is benchcamp's own container (workloads/agentx-sample.json);
    # the harness takes one trace object per file
    items = doc if isinstance(doc, list) else [doc]
    for i, d in enumerate(items):
        yield (f.name if len(items) == 1 else f"{f.name}[{i}]"), d


def _text(f: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{f.name}: not UTF-8 text (byte {exc.start}); give AgentX trace JSON") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _json(where: str, text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:
        raise TraceError(f"{where}: {exc}") from None
    except RecursionError:
        raise TraceError(f"{where}: JSON nested too deeply") from None


def _parquet_rows(f: Path, raw: bytes) -> list[dict[str, Any]]:
    import pyarrow as pa  # here: DAG parsing imports the workload package, and pyarrow is heavy
    import pyarrow.parquet as pq

    try:
        return pq.read_table(io.BytesIO(raw)).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{f.name}: not a readable Parquet file ({exc}); give AgentX trace rows") from None


def _without_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_without_nulls(x) for x in v]
    return v
