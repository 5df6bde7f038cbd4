"""Workloads: the session model, generators, trace importers, token synthesis, stats.

``ensure_workload(cfg.workload)`` is what a campaign calls: it returns the workload named
by the config's ``workload`` section (``spec``: a generator spec YAML, a Mooncake ``.jsonl``
trace, or an AgentX trace ``.json`` / folder of them; ``data``: the Parquet file), building the file when it is missing or was
built from a different spec/trace, and reading it otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from benchcamp.workload.model import Request, Session, Workload, read_workload, write_workload

# The session model (pyarrow underneath) loads on first use: config reads this package's pure tables
# (agentx_scenarios) at import, and parsing the DAGs must not pull pyarrow in (tests/airflow/test_dag_integrity).
_MODEL = frozenset({"Request", "Session", "Workload", "atomic_write_bytes", "read_workload", "write_workload"})


def __getattr__(name: str) -> Any:
    if name in _MODEL:
        from benchcamp.workload import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Request",
    "Session",
    "Workload",
    "read_workload",
    "write_workload",
    "build_workload",
    "ensure_workload",
    "sidecar_path",
    "source_identity",
]


def sidecar_path(data: str | Path) -> Path:
    """``workloads/data/x.parquet`` -> ``workloads/data/x.json`` (digest + stats)."""
    return Path(data).with_suffix(".json")


def _is_trace(spec: Path) -> bool:
    return spec.suffix == ".jsonl" or _is_agentx(spec)


def _is_agentx(spec: Path) -> bool:
    """An AgentX (Weka) trace: a ``.json`` file, a folder of them, or a dataset copy of a corpus (a folder)."""
    return spec.suffix == ".json" or spec.is_dir()


def _trace_sha(p: Path) -> str:
    import hashlib

    if _is_agentx(p):
        from benchcamp.workload.agentx.files import trace_digest

        return trace_digest(p)
    return hashlib.sha256(p.read_bytes()).hexdigest()


def source_identity(spec: str | Path) -> tuple[str, str]:
    """(meta key, value) that a workload built from ``spec`` carries, to detect stale files."""
    p = Path(spec)
    if _is_trace(p):
        if not p.exists():
            raise FileNotFoundError(f"trace {p} not found; set workload.spec to an existing file")
        return "trace_sha256", _trace_sha(p)
    from benchcamp.workload.generator import load_spec, spec_sha

    return "spec_sha", spec_sha(load_spec(p))


def build_workload(spec: str | Path, out: str | Path, seed: int | None = None) -> tuple[Workload, str, dict[str, Any]]:
    """Generate (spec YAML) or import (Mooncake .jsonl, AgentX .json) and write ``out`` + its sidecar JSON."""
    from benchcamp.workload.model import write_workload
    from benchcamp.workload.stats import workload_stats

    p = Path(spec)
    if _is_trace(p):
        from benchcamp.workload.agentx.traces import read_agentx
        from benchcamp.workload.mooncake import read_mooncake

        if seed is not None:
            raise ValueError("--seed applies to generator specs, not to traces")
        w = read_agentx(p) if _is_agentx(p) else read_mooncake(p)
    else:
        from benchcamp.workload.generator import generate, load_spec

        w = generate(load_spec(p), seed)
    digest = write_workload(w, out)
    stats = workload_stats(w)
    write_sidecar(out, w, digest, stats, spec=str(spec))
    return w, digest, stats


def write_sidecar(data: str | Path, w: Workload, digest: str, stats: dict[str, Any], spec: str = "") -> Path:
    # Deterministic content (no timestamps, no absolute paths): it is a DVC metrics file.
    from benchcamp.workload.model import atomic_write_bytes

    body = {
        "name": w.name,
        "digest": digest,
        "source": w.meta.get("source", ""),
        "spec": spec,
        "seed": w.meta.get("seed"),
        "stats": stats,
    }
    path = sidecar_path(data)
    atomic_write_bytes(path, (json.dumps(body, indent=2, sort_keys=False) + "\n").encode())
    return path


class WorkloadFiles(Protocol):
    """What ensure_workload reads: the config's ``workload`` section (benchcamp.config.Workload, a layer above)."""

    @property
    def spec(self) -> str: ...
    @property
    def data(self) -> str: ...


def ensure_workload(files: WorkloadFiles) -> tuple[Workload, Path, str]:
    """The campaign's workload: (workload, data path, content digest); builds it if missing or stale.

    When the spec file is absent but the data is present (e.g. fetched with
    ``dvc pull`` alone), the data is used as is.
    """
    from benchcamp.workload.model import read_workload

    spec, data = Path(files.spec), Path(files.data)
    if data.exists():
        w = read_workload(data)
        if not spec.exists():
            return w, data, w.digest
        key, value = source_identity(spec)
        if w.meta.get(key) == value:
            return w, data, w.digest
    elif not spec.exists():
        raise FileNotFoundError(
            f"workload.spec={spec} not found and workload.data={data} does not exist; "
            "point workload.spec at a spec YAML or a Mooncake .jsonl trace"
        )
    w, digest, _ = build_workload(spec, data)
    return w, data, digest
