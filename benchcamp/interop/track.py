"""An imported file as a campaign run in MLflow, beside benchcamp's own: a parent run (role ``campaign``) per file,
a child run (role ``point``) per benchmark in it, so `benchcamp compare RUN_A RUN_B`, the history and the UI read it
as any run.

What makes it an import: the tags ``benchcamp.imported`` (true), ``imported_format`` / ``imported_tool`` /
``imported_tool_version`` / ``imported_file`` / ``imported_sha256``; ``comparable`` (true/false) and
``not_comparable_reason``; ``stated_by.<field>`` (file or user) for each comparability field. Only the key fields
something stated are tagged, so a run that states too little never matches another's key (the history and the
verdicts leave it out). Each headline metric's definition, as the tool computed it, is a param
``definition.<metric>``. Artifacts: the file itself (secrets scrubbed) under ``imported/``, each point's Benchmark
Report under ``benchmark_report/``, ``summary.json``. The execution id is ``import-<tool>-<sha256 of the file>``:
importing the same file again updates the same runs.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchcamp.interop.br_import import Imported, to_json
from benchcamp.metrics import pick_headline
from benchcamp.tracking.log import headline_metrics, numeric_metrics
from benchcamp.tracking.store import ROLE_CAMPAIGN, ROLE_POINT, TAG, client, experiment_id


def execution_id(imp: Imported) -> str:
    return f"import-{imp.tool}-{imp.sha256[:16]}"


def _find_or_create(c, exp: str, flt: str, tags: dict[str, str]) -> str:
    runs = c.search_runs([exp], filter_string=flt, max_results=1)
    return str(runs[0].info.run_id if runs else c.create_run(exp, tags=tags).info.run_id)


def _log(c, run_id: str, tags: dict[str, str], params: dict[str, str], metrics: dict[str, float]) -> None:
    from mlflow.entities import Metric as MlMetric
    from mlflow.entities import Param, RunTag

    logged = c.get_run(run_id).data.params
    now = int(time.time() * 1000)
    c.log_batch(
        run_id,
        metrics=[MlMetric(k, v, now, 0) for k, v in sorted(metrics.items())],
        params=[Param(k, v[:6000]) for k, v in sorted(params.items()) if k not in logged],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )


def log_imported(imp: Imported, uri: str, experiment: str) -> str:
    """Log ``imp`` to the MLflow store at ``uri``, experiment ``experiment``; returns the parent run id."""
    from benchcamp.secrets.redaction import scrub

    c = client(uri)
    exp = experiment_id(c, experiment, uri)
    ex = execution_id(imp)
    summaries: list[Mapping[str, Any]] = [
        dict(p.summary, point=p.label, valid=bool(p.summary.get("requests"))) for p in imp.points
    ]
    head = dict(pick_headline(summaries) or summaries[0])
    head_label = str(head.get("point"))
    tags = {
        "role": ROLE_CAMPAIGN, "execution_id": ex, "campaign": f"import-{imp.tool}", "imported": "true",
        "imported_format": imp.source_format, "imported_tool": imp.tool, "imported_tool_version": imp.tool_version,
        "imported_file": imp.path.name, "imported_sha256": imp.sha256, "comparable": str(imp.comparable).lower(),
        "not_comparable_reason": imp.reason or "-", "valid": str(any(s["valid"] for s in summaries)).lower(),
        "headline_point": head_label, "throughput_headline": imp.throughput_definition,
        "engine_version": imp.engine_version,
        "started_at": imp.ended_at, "finished_at": imp.ended_at,
        **{k: str(v) for k, v in imp.key.items() if v is not None},
        **{f"stated_by.{k}": v for k, v in imp.stated_by.items()},
    }  # fmt: skip
    full = {TAG + k: str(v)[:4000] for k, v in tags.items()}
    full["mlflow.runName"] = f"import/{imp.tool}/{imp.path.name}"
    flt = f"tags.`{TAG}role` = '{ROLE_CAMPAIGN}' AND tags.`{TAG}execution_id` = '{ex}'"
    parent = _find_or_create(c, exp, flt, full)
    params = {f"definition.{k}": v for k, v in imp.definitions.items() if v}
    params.update({"imported.file": imp.path.name, "imported.format": imp.source_format})
    metrics = numeric_metrics({k: v for k, v in head.items() if k != "valid"})
    _log(c, parent, full, params, metrics | headline_metrics(head))
    with tempfile.TemporaryDirectory(prefix="benchcamp-import-") as d:
        tmp = Path(d)
        original = tmp / "imported" / imp.path.name
        original.parent.mkdir()
        original.write_text(to_json(scrub(imp.native)))  # a key in a tool's config stays out of MLflow
        brs = tmp / "benchmark_report"
        brs.mkdir()
        for p in imp.points:
            (brs / f"{p.label}.br.json").write_text(to_json(scrub(p.report)))
        (tmp / "summary.json").write_text(
            to_json(
                {
                    "headline": head,
                    "points": {p.label: p.summary for p in imp.points},
                    "key": imp.key,
                    "comparable": imp.comparable,
                    "not_comparable_reason": imp.reason,
                }
            )  # fmt: skip
        )
        c.log_artifacts(parent, str(original.parent), "imported")
        c.log_artifacts(parent, str(brs), "benchmark_report")
        c.log_artifact(parent, str(tmp / "summary.json"))
    for p in imp.points:
        ptags = {
            "mlflow.parentRunId": parent, "mlflow.runName": p.label, f"{TAG}role": ROLE_POINT,
            f"{TAG}execution_id": ex, f"{TAG}point": p.label, f"{TAG}level": str(p.level),
            f"{TAG}valid": str(bool(p.summary.get("requests"))).lower(), f"{TAG}imported": "true",
        }  # fmt: skip
        pflt = f"tags.mlflow.parentRunId = '{parent}' AND tags.`{TAG}point` = '{p.label}'"
        child = _find_or_create(c, exp, pflt, ptags)
        _log(c, child, ptags, {"point": p.label, "level": str(p.level)}, numeric_metrics(p.summary))
        c.set_terminated(child, status="FINISHED")
    c.set_terminated(parent, status="FINISHED")
    return parent


def summary_line(imp: Imported) -> dict[str, Any]:
    """What `benchcamp import` prints per file (and its --json)."""
    return json.loads(to_json({
        "file": str(imp.path), "format": imp.source_format, "tool": imp.tool, "tool_version": imp.tool_version,
        "points": [p.label for p in imp.points], "key": imp.key, "comparable": imp.comparable,
        "not_comparable_reason": imp.reason,
    }))  # fmt: skip
