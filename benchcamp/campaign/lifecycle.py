"""The node and engine lifecycle of an execution: provision (or poll a queued job), deploy the engine and wait
until it serves, stop it keeping its log, release the node."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO

from benchcamp.campaign.execution import (
    clear_error,
    record_error,
    recorded,
    startup_timeout,
    virtual,
)
from benchcamp.campaign.handoff import Deployment, EngineHandle, Node
from benchcamp.campaign.kinds import Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.config import Config
from benchcamp.results.store import ResultsStore
from benchcamp.secrets import redaction

log = logging.getLogger(__name__)


def provision(cfg: Config, execution_id: str) -> Node:
    """Idempotent per execution id: a retry finds the node it already made. A provider that launches machines
    boots them with what deploy says runs there (``benchcamp.deploy.remote``)."""
    from benchcamp.deploy.remote import node_boot
    from benchcamp.provision import get_provider

    return Node.of_provider(get_provider(cfg, boot=node_boot(cfg)).provision(execution_id))


def poll_node(cfg: Config, execution_id: str) -> Node | None:
    """One look at the node, for a wait that holds no worker (the DAG's sensor in reschedule mode): a provider
    that queues (slurm) answers None while its job waits; the others provision at once, as :func:`provision`."""
    from benchcamp.deploy.remote import node_boot
    from benchcamp.provision import get_provider

    if cfg.provider.kind != "slurm":
        return provision(cfg, execution_id)
    node = get_provider(cfg, boot=node_boot(cfg)).poll(execution_id)  # type: ignore[attr-defined]
    return Node.of_provider(node) if node is not None else None


def release_queued(cfg: Config, execution_id: str) -> None:
    """Cancel what a provision that failed for good left queued (a failed setup gets no teardown)."""
    if cfg.provider.kind == "slurm":
        from benchcamp.deploy.slurm_job import SlurmEngineJob
        from benchcamp.provision.slurm import SlurmProvider

        SlurmProvider(cfg, boot=SlurmEngineJob(cfg)).release(execution_id)


def deploy_engine(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    node: Node,
    api_key: str | None = None,
    die_with_parent: bool = False,
    log_dir: str | Path | None = None,
    api_key_ref: str | None = None,
) -> Deployment:
    """Start the engine and wait until it serves the model; on failure it records why, keeps the
    engine log and stops the engine (a teardown does not run after a failed setup)."""
    from benchcamp.deploy import deploy, engine_folder, stop, wait_ready

    if virtual(cfg):  # the sweep drives the simulator in-process: nothing to start
        return Deployment(
            endpoint="",
            api_key_ref=None,
            log_path=None,
            model=cfg.served_model_name,
            handle=EngineHandle(kind="virtual", engine="simulated"),
        )
    log_dir = engine_folder(log_dir, layout.execution_id)
    dep = deploy(
        node.provider_node(),
        cfg,
        log_dir=log_dir,
        api_key=api_key,
        api_key_ref=api_key_ref,
        die_with_parent=die_with_parent,
        results_root=store.local_path(""),
    )
    try:
        wait_ready(dep, startup_timeout(cfg))  # also checks the key and the served model
    except BaseException as exc:
        record_error(store, layout, Step.DEPLOY, exc)
        _upload_engine_log(store, layout, Deployment.of_engine(dep), key=dep.api_key)
        stop(dep)
        raise
    clear_error(store, layout, Step.DEPLOY)
    return Deployment.of_engine(dep)  # the key's reference (api_key_ref), never the key: this may become an XCom


def _open_engine_log(deployment: Deployment) -> IO[str] | None:
    """The engine's log, opened before the engine stops (an open file stays readable after).

    Its path is on the machine of the worker that deployed it, under that worker's TMPDIR;
    a teardown on another worker of the same machine reads the same file through the
    engine's stdout instead (Linux /proc), rather than silently losing the log."""
    from benchcamp.deploy import is_running

    path = deployment.log_path
    if path and Path(path).exists():
        return open(path, errors="replace")
    handle = deployment.handle
    if path and handle.kind == "local" and is_running(deployment.engine_deployment()):
        try:
            return open(f"/proc/{handle.pid}/fd/1", errors="replace")
        except OSError:
            log.warning("engine log %s is not on this machine: not kept", path)
    return None


def _upload_engine_log(
    store: ResultsStore,
    layout: StoreLayout,
    deployment: Deployment,
    log_file: IO[str] | None = None,
    key: str | None = None,
) -> None:
    log_file = log_file or _open_engine_log(deployment)
    if log_file is None:
        return
    with log_file:
        text = log_file.read()
    handle = deployment.handle
    if handle.topology:  # every process of a topology, one after the other, each under its name
        text = f"==> {handle.name or 'front'} ({handle.role or ''}) <==\n{text}"
        for peer in handle.peers or ():
            path = peer.log_path
            if path and Path(path).exists():
                text += f"\n==> {peer.name} ({peer.role}) <==\n" + Path(path).read_text(errors="replace")
    # a Deployment that left its process carries no key: only ``key``, when the caller still has it
    store.put_text(layout.engine_log, redaction.redact(text, [key]))


def _key_for_redaction(cfg: Config | None, deployment: Deployment) -> str | None:
    """The deployment's key while its engine still runs, to redact it from the log (best effort:
    a key that cannot be found here was never in this process, nor in its log records)."""
    from benchcamp.deploy.keys import deployment_api_key

    if deployment.handle.kind != "local":
        return None  # remote engines' logs stay on their node; an endpoint's key is not ours to fetch again
    try:
        return deployment_api_key(cfg, deployment.to_dict())
    except Exception as exc:  # noqa: BLE001  (the engine is stopped anyway)
        log.info("engine key not readable for redaction: %s", redaction.redact(str(exc)))
        return None


def stop_engine(cfg: Config | None, store: ResultsStore, layout: StoreLayout, deployment: Deployment) -> None:
    """Stop the engine (idempotent) and keep its log, secrets redacted."""
    from benchcamp.deploy import stop

    with recorded(store, layout, Step.STOP_ENGINE):
        log_file = _open_engine_log(deployment)
        key = _key_for_redaction(cfg, deployment)
        stop(deployment.engine_deployment())
        _upload_engine_log(store, layout, deployment, log_file, key)


def deprovision(cfg: Config, store: ResultsStore, layout: StoreLayout, node: Node) -> None:
    """Release the node; on this machine first kill any engine process still running for the execution (the
    safety net behind ``stop_engine``, e.g. when the stop task failed or the deployment's handle was lost)."""
    from benchcamp.deploy import kill_execution_engines
    from benchcamp.provision import get_provider

    with recorded(store, layout, Step.DEPROVISION):
        n = node.provider_node()
        if node.kind == "local" and node.execution_id:
            kill_execution_engines(node.execution_id)
        if n.kind == "slurm":  # scancel, then the engine processes that left the job (the job boot finds them)
            from benchcamp.deploy.slurm_job import SlurmEngineJob

            get_provider(cfg, boot=SlurmEngineJob(cfg)).deprovision(n)
            return
        get_provider(cfg).deprovision(n)
