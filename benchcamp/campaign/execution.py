"""What every step of an execution shares: its recorded step errors, its points and measurements, its
work folders and the files it reads back from the results store."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from benchcamp.campaign.kinds import Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.result import (
    utcnow,
)
from benchcamp.config import Config
from benchcamp.results.store import ResultsStore
from benchcamp.secrets import redaction

if TYPE_CHECKING:
    from benchcamp.loadgen.spec import PointSpec

log = logging.getLogger(__name__)


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"benchcamp-{prefix}-") as tmp:
        yield Path(tmp)


def record_error(store: ResultsStore, layout: StoreLayout, step: Step, exc: BaseException) -> None:
    """Keep a failed step's reason in the store (redacted), for summarize and the verdict.

    A store that cannot take the record (full, read-only) most likely caused the failure: the
    caller raises the step's own error, which names the file that could not be written, instead
    of this one about ``errors/<step>.json``."""
    doc = {"step": step.value, "kind": type(exc).__name__, "message": redaction.redact(str(exc)), "at": utcnow()}
    try:
        store.put_text(layout.error(step), json.dumps(doc, indent=2))
    except Exception as unrecorded:  # noqa: BLE001  (any store failure: the step's error goes on)
        log.info("the %s failure could not be recorded in the store: %s", step.value, unrecorded)


def clear_error(store: ResultsStore, layout: StoreLayout, step: Step) -> None:
    """A retried step that succeeded: an earlier attempt's failure is not this execution's."""
    if store.exists(layout.error(step)):
        store.delete(layout.error(step))


BEFORE_SUMMARY = tuple(Step)[: tuple(Step).index(Step.SUMMARIZE)]  # the errors a summary reports


@contextmanager
def recorded(store: ResultsStore, layout: StoreLayout, step: Step) -> Iterator[None]:
    """Record the step's failure in the store (and raise it); clear an earlier attempt's on success.
    A teardown that failed (a node left running) then fails the execution's summary and verdict."""
    try:
        yield
    except BaseException as exc:
        record_error(store, layout, step, exc)
        raise
    clear_error(store, layout, step)


def recorded_errors(store: ResultsStore, layout: StoreLayout, only: tuple[Step, ...] = tuple(Step)) -> list[str]:
    """'<step>: <message>' for every recorded step error (of the steps ``only``), in step order."""
    out = []
    for step in only:
        if store.exists(layout.error(step)):
            doc = json.loads(store.get_text(layout.error(step)))
            out.append(f"{step.value}: {doc['message']}")
    return out


def startup_timeout(cfg: Config) -> float:
    p = cfg.provider
    return {"local": p.local.startup_timeout_s, "ec2": p.ec2.startup_timeout_s, "slurm": p.slurm.startup_timeout_s}.get(
        p.kind, 60.0
    )


def point_labels(cfg: Config, store: ResultsStore | None = None, layout: StoreLayout | None = None) -> list[str]:
    """The execution's points: the sweep's levels, or (load.mode=capacity) the probes the search ran."""
    if cfg.load.mode == "capacity":
        if store is None or layout is None or not store.exists(layout.capacity):
            return []
        return [p["label"] for p in json.loads(store.get_text(layout.capacity))["probes"]]
    from benchcamp.loadgen import point_label

    return [point_label(cfg.load.mode, level) for level in cfg.load.levels]


def virtual(cfg: Config) -> bool:
    """load.clock=virtual: every point runs in the simulator in this process, no engine to deploy."""
    return cfg.load.clock == "virtual"


def measurements(cfg: Config) -> list[tuple[int, float]]:
    """(trial, level) in the order the sweep measures them: every level once per trial, trial after trial
    (c4 c8 c4 c8 ... for load.trials=2), so a drift of the machine over the sweep spreads over every point's
    trials instead of moving one point against another."""
    return [(k, level) for k in range(1, cfg.load.trials + 1) for level in cfg.load.levels]


def measurement_name(cfg: Config, label: str, trial: int) -> str:
    """``c8`` (load.trials=1), or ``c8/trial-2``: the measurement's folder under the execution."""
    from benchcamp.results.trials import trial_name

    return f"{label}/{trial_name(trial)}" if cfg.load.trials > 1 else label


def trial_spec(spec: PointSpec, trial: int) -> PointSpec:
    """Trial ``trial`` of a point's PointSpec: the same requests (seed, plan) with a prompt salt of its own from
    trial 2 on, so that on an engine shared by the trials (the wall clock) no trial finds another's prompts in
    the prefix cache; trial 1 keeps the point's salt (a one-trial sweep sends what it always sent)."""
    from dataclasses import replace

    from benchcamp.loadgen.spec import point_salt
    from benchcamp.results.trials import trial_name

    if trial <= 1:
        return spec
    salt = point_salt(f"{spec.label}/{trial_name(trial)}", f"{spec.salt:016x}")
    agentx = None if spec.agentx is None else {**spec.agentx, "benchmark_id": f"{salt:016x}"}
    return replace(spec, salt=salt, agentx=agentx)


def trials_measured(cfg: Config, store: ResultsStore, layout: StoreLayout, label: str) -> list[int]:
    """The trials of point ``label`` in the store (load.trials > 1), each with its point.json or its records."""
    if cfg.load.trials <= 1:
        return []
    keys = [(k, layout.measurement(label, k, cfg.load.trials)) for k in range(1, cfg.load.trials + 1)]
    return [k for k, key in keys if store.exists(f"{key}/point.json") or store.exists(f"{key}/records.parquet")]


def workload_file(store: ResultsStore, key: str | None, path: str, tmp: Path) -> Path:
    """The workload file on this machine: its store copy (``key``) when published, else ``path``."""
    if not key:
        return Path(path)
    return store.local_path(key) or store.get_file(key, tmp / "workload.parquet")


def fetch_execution(cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path, with_points: bool = True) -> Path:
    """The execution's folder on this machine: the store's own, or a copy under ``tmp``."""
    local = store.local_path(layout.execution)
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
        return local
    here = tmp / "execution"
    here.mkdir(parents=True, exist_ok=True)
    for key, name in (
        (layout.campaign_json, "campaign.json"),
        (layout.summary_json, "summary.json"),
        (layout.engine_log, "engine.log"),
    ):
        if store.exists(key):
            store.get_file(key, here / name)
    if store.exists(layout.capacity):
        store.get_file(layout.capacity, here / "capacity.json")
    for label in point_labels(cfg, store, layout) if with_points else []:
        if store.exists(layout.point_json(label)) or trials_measured(cfg, store, layout, label):
            store.get_dir(layout.point(label), here / label)
    return here
