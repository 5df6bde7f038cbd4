"""AgentX's model map: a trace's models onto the served ones (agentx-harness 1.0.12, ``_build_model_map`` in
``aiperf/dataset/loader/weka_trace.py``): the main model onto the first served model, the others in order of
first appearance onto the next ones, wrapping around; every turn is sent to its mapped model.

benchcamp serves one model per deployment (``engine.served_model_name``, else ``engine.model``; a topology's
roles serve that same model), so every model of every trace maps onto it and every request already carries
it. What the map changes is recorded: a point's summary gets ``agentx_model_map`` (trace model -> served
model) and ``agentx_model_requests`` (the window's requests per trace model), from the workload's ``model``
column and ``agentx_models`` metadata (``benchcamp.workload.agentx.traces``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchcamp.workload.agentx.plan import model_map
from benchcamp.workload.model import Workload


def served_models(workload: Workload, served: list[str]) -> dict[str, dict[str, str]]:
    """Per trace (its top-level session id): its models onto ``served``."""
    models = workload.meta.get("agentx_models") or {}
    return {tid: model_map(list(ms), served) for tid, ms in models.items()}


def model_summary(records: Any, window: tuple[float, float], workload_path: str | Path, served: list[str]) -> dict:
    """The summary keys of the model map for a point's records (none when the workload records no models)."""
    import pyarrow.parquet as pq

    from benchcamp.workload.model import MODEL_COLUMN, read_meta

    meta = read_meta(workload_path) or {}
    per_trace = meta.get("agentx_models")
    if not per_trace or MODEL_COLUMN.name not in pq.read_schema(workload_path).names:
        return {}
    maps = {tid: model_map(list(ms), served) for tid, ms in per_trace.items()}
    union: dict[str, list[str]] = {}
    for one in maps.values():
        for theirs, ours in one.items():
            union.setdefault(theirs, [])
            if ours not in union[theirs]:
                union[theirs].append(ours)
    t = pq.read_table(workload_path, columns=["session_id", "turn", MODEL_COLUMN.name]).to_pydict()
    model_of = dict(zip(zip(t["session_id"], t["turn"]), t[MODEL_COLUMN.name]))
    counts: dict[str, int] = {}
    w0, w1 = window
    for sid, turn, sent in zip(records["session_id"], records["turn"], records["sent_s"]):
        if w0 <= float(sent) < w1:
            m = model_of.get((str(sid).partition("~")[0], int(turn)))
            if m is not None:
                counts[m] = counts.get(m, 0) + 1
    return {
        "agentx_model_map": json.dumps({k: v[0] if len(v) == 1 else v for k, v in union.items()}, sort_keys=True),
        "agentx_model_requests": json.dumps(dict(sorted(counts.items()))),
    }
