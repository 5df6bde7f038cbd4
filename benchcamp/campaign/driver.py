"""`benchcamp run`'s driver: every step of one execution, in this process.

The same steps as the Airflow DAG (benchcamp.campaign.steps), against the
results store of ``results.store`` (a folder by default, or s3://). The engine
dies with this process; SIGTERM behaves like Ctrl-C: the point in progress
stops and keeps its records, the engine is stopped, the node released, and the
campaign is summarized with what was measured and marked ``interrupted``.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from benchcamp.campaign import steps
from benchcamp.campaign.interrupt import sigterm_as_interrupt
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.result import CampaignResult, new_execution_id, utcnow
from benchcamp.config import Config
from benchcamp.errors import BenchcampError, ExitCode
from benchcamp.results.store import LocalStore, ResultsStore, open_store
from benchcamp.secrets import redaction

log = logging.getLogger(__name__)


def target(cfg: Config, execution_id: str, results_dir: str | Path | None = None) -> tuple[ResultsStore, StoreLayout]:
    """Where this execution's results go: ``results_dir`` itself (bench run --out), else
    ``<results.store>/<campaign>/<execution_id>/``."""
    if results_dir is not None:
        return LocalStore(results_dir), StoreLayout(cfg.campaign.name, execution_id)
    return open_store(cfg.results.store), StoreLayout.for_execution(cfg.campaign.name, execution_id)


def run_campaign(
    cfg: Config,
    execution_id: str | None = None,
    progress: bool = True,
    results_dir: str | Path | None = None,
    store: ResultsStore | None = None,
    workdir: str | Path | None = None,
) -> CampaignResult:
    """Measure and summarize one execution; teardown always runs.

    An engine that never becomes ready raises ``EngineError`` (nothing was measured). A
    failure during the sweep (an aborted point included) is kept on ``result.error`` with the
    points measured so far, ``result.status`` says how it ended. ``workdir``: where the
    campaign files are fetched when the store is remote (default: a folder that lives as long
    as this process)."""
    from benchcamp.campaign.feasible import check_layout
    from benchcamp.deploy import check_engine, reap_orphans

    check_engine(cfg)  # no engine of that kind and version here: one line, before anything runs
    check_layout(cfg)  # weights that the GPUs cannot hold at this layout: one line with one that can
    execution_id = execution_id or new_execution_id(cfg.campaign.name)
    default_store, layout = target(cfg, execution_id, results_dir)
    store = store or default_store
    _say(
        progress,
        f"execution {execution_id}: results at {store.url(layout.execution) if layout.execution else store.url('summary.json').rsplit('/', 1)[0]}",
    )
    root = store.local_path("")
    if root is not None:
        reaped = reap_orphans(root)
        if reaped:
            _say(progress, f"stopped {len(reaped)} orphaned engine(s) of earlier runs in {root}: {', '.join(reaped)}")
    started = utcnow()
    workload = steps.prepare_workload(cfg, store, layout, publish=root is None, check=True)
    theoretical = workload.theoretical_hit_rate
    hit = f", theoretical prefix-cache hit rate {theoretical:.1%}" if theoretical is not None else ""
    _say(progress, f"workload {workload.name}: {workload.sessions} sessions, digest {workload.digest[:12]}{hit}")

    interrupted = False
    endpoint = ""
    with sigterm_as_interrupt():
        node = steps.provision(cfg, execution_id)
        try:
            deployment = steps.deploy_engine(cfg, store, layout, node, die_with_parent=True)
            endpoint = deployment.endpoint
            try:
                from benchcamp.results.table import engine_label  # pandas: not at DAG parse

                _say(
                    progress,
                    (
                        f"engine ready at {endpoint} ({engine_label(cfg.engine.kind, cfg.provider.kind)}); "
                        if endpoint
                        else "engine in-process (simulated, virtual clock: no server to start); "
                    )
                    + (
                        f"capacity search over {len(cfg.load.tiers)} tier(s), {cfg.load.clock} clock"
                        if cfg.load.mode == "capacity"
                        else f"sweep {cfg.load.mode} levels {cfg.load.levels}, {cfg.load.clock} clock"
                        + (f", {cfg.load.trials} trials per point, interleaved" if cfg.load.trials > 1 else "")
                    ),
                )
                steps.sweep(cfg, store, layout, deployment, workload, progress=True if progress else None)
            except KeyboardInterrupt:
                interrupted = True
                _say(True, "interrupted: stopping the engine and keeping what was measured")
            except BenchcampError as exc:  # recorded in the store by the step; summarize reports it
                if exc.exit_code == ExitCode.BAD_INPUT and not steps.measured_any(cfg, store, layout):
                    raise  # e.g. the endpoint rejects the key: nothing to summarize, one line to the user
            except Exception as exc:  # noqa: BLE001  (recorded in the store by the step; summarize reports it)
                log.info("sweep failed: %s", exc)
            finally:
                _teardown(steps.stop_engine, cfg, store, layout, deployment)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            _teardown(steps.deprovision, cfg, store, layout, node)
    if interrupted and not steps.measured_any(cfg, store, layout):
        raise KeyboardInterrupt
    steps.summarize(cfg, store, layout, workload, started, interrupted=interrupted, endpoint=endpoint)
    here = store.local_path(layout.execution) if root is not None else None
    if here is None:
        here = Path(workdir or tempfile.mkdtemp(prefix="benchcamp-run-"))
        return steps.load_campaign(cfg, store, layout, here)
    return CampaignResult.load(here)


def _teardown(step: Any, *args: Any) -> None:
    """Run a teardown step; its failure is recorded in the store by the step, so the summary
    still gets written and reports it (status failed: a node may be left running)."""
    try:
        step(*args)
    except Exception as exc:  # noqa: BLE001
        _say(True, f"{step.__name__} failed: {redaction.redact(str(exc))}")


def _say(progress: Any, text: str) -> None:
    if progress:
        print(f"[benchcamp] {text}", flush=True)
