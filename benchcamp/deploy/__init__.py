"""Deploy the engine on a node: dispatch by node kind, and what really runs.

One job per module: ``argv`` (the engine command line, a leaf), ``local`` (the
local process: launch, stop, leftovers, orphans), ``ready`` (readiness),
``deployment`` (the handle passed between steps). The API key is a fresh
random value per local deployment, handed to the engine through
``VLLM_API_KEY`` and never through argv; the handle that leaves the process
carries only where to find it (``api_key_ref``, benchcamp.secret_refs).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from benchcamp import secret_refs, secrets
from benchcamp.config import Config
from benchcamp.deploy.argv import simulated_argv, vllm_argv
from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.local import (
    EXECUTION_ENV,
    LOG_TAIL_LINES,
    OWNER_ENV,
    RESULTS_ENV,
    execution_engines,
    is_running,
    kill_execution_engines,
    log_tail,
    orphaned_engines,
    reap_orphans,
    stop,
)
from benchcamp.deploy.ready import wait_ready
from benchcamp.errors import EngineError
from benchcamp.provision.base import Node, safe_name

__all__ = [
    "EXECUTION_ENV",
    "LOG_TAIL_LINES",
    "OWNER_ENV",
    "RESULTS_ENV",
    "Deployment",
    "EngineError",
    "deploy",
    "effective_config",
    "engine_kind",
    "execution_engines",
    "free_port",
    "is_running",
    "kill_execution_engines",
    "log_tail",
    "orphaned_engines",
    "real_vllm_available",
    "reap_orphans",
    "simulated_argv",
    "stop",
    "vllm_argv",
    "wait_ready",
]

log = logging.getLogger(__name__)


def real_vllm_available() -> bool:
    """vLLM importable here and a working NVIDIA GPU."""
    if importlib.util.find_spec("vllm") is None or not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def engine_kind(cfg: Config) -> str:
    """What actually runs locally: 'vllm' only when asked for and possible."""
    if cfg.engine.kind == "vllm" and real_vllm_available():
        return "vllm"
    return "simulated"


def effective_config(cfg: Config) -> Config:
    """``cfg`` with engine.kind set to what will really run.

    The local provider runs the simulated engine when vLLM or a GPU is missing;
    the results must then say so (tags, comparability, report, fingerprint),
    or simulated figures would be compared with real-hardware baselines.
    """
    if cfg.provider.kind != "local" or cfg.engine.kind != "vllm" or engine_kind(cfg) == "vllm":
        return cfg
    log.warning(
        "engine.kind=vllm but vLLM or a GPU is missing here; running the simulated engine "
        "with the same flags, and its results are tagged engine=simulated"
    )
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kind": "simulated"})})


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def deploy(
    node: Node,
    cfg: Config,
    log_dir: str | Path | None = None,
    api_key: str | None = None,
    die_with_parent: bool = False,
    results_root: str | Path | None = None,
    api_key_ref: str | None = None,
) -> Deployment:
    """Start (or attach to) the engine on ``node``; returns before it is ready.

    local: launches the engine subprocess with a fresh key (``die_with_parent``: it must
    not outlive this process; ``results_root`` goes in its environment for the orphan
    reaper). ec2: the engine was started by user data; the key comes from the node.
    endpoint: ``api_key_ref`` (tasks/: ``airflow-conn:<provider.endpoint.airflow_conn_id>``), else
    ``api_key`` (this process only), else the env var named in the config.
    """
    fp = cfg.fingerprint()
    if node.kind == "local":
        return _deploy_local(node, cfg, log_dir, fp, die_with_parent, results_root)
    if node.kind == "ec2":
        from benchcamp.provision.ec2 import Ec2Provider

        key = Ec2Provider(cfg).api_key_for(node)
        secrets.register(key)
        return Deployment(
            endpoint=f"http://{node.host}:{cfg.provider.ec2.engine_port}",
            api_key=key,
            api_key_ref=f"ec2:{node.meta.get('execution_id', '')}",
            log_path=None,
            model=cfg.served_model_name,
            handle={
                "kind": "ec2",
                "node_id": node.node_id,
                "engine": cfg.engine.kind,
                "fingerprint": fp,
                "version": cfg.engine.version,
            },
        )
    if node.kind == "endpoint":
        env_name = cfg.provider.endpoint.api_key_env
        if api_key_ref:
            endpoint_key = secret_refs.resolve(api_key_ref, "the endpoint's API key")
        elif api_key:
            endpoint_key, api_key_ref = api_key, secret_refs.keep_in_process(api_key)
        else:
            endpoint_key = os.environ.get(env_name) or None
            api_key_ref = f"env:{env_name}" if endpoint_key else None
        secrets.register(endpoint_key)
        return Deployment(
            endpoint=node.host.rstrip("/"),
            api_key=endpoint_key,
            api_key_ref=api_key_ref,
            log_path=None,
            model=cfg.served_model_name,
            handle={"kind": "endpoint", "engine": "external", "fingerprint": fp},
        )
    raise ValueError(f"node.kind={node.kind!r}: unknown; expected local, ec2 or endpoint")


def _deploy_local(
    node: Node, cfg: Config, log_dir: str | Path | None, fp: str, die_with_parent: bool, results_root: str | Path | None
) -> Deployment:
    from benchcamp.deploy.local import launch

    execution_id = node.meta.get("execution_id", "")
    if execution_id:
        # An Airflow retry of deploy: the previous attempt's engine may still run.
        kill_execution_engines(execution_id)
    host = node.host
    port = cfg.provider.local.port or free_port(host)
    kind = engine_kind(cfg)
    argv = vllm_argv(cfg, host, port) if kind == "vllm" else simulated_argv(cfg, host, port)
    # Secrets (--hf-token, --api-key in engine.extra_args) travel in the engine's env, not argv (ps shows argv).
    argv, secret_env = secrets.split_engine_secrets(argv)
    secret_env.update(secret_refs.engine_secret_env(cfg))  # engine.hf_token_ref -> HF_TOKEN
    key = secret_env.pop("VLLM_API_KEY", None) or secrets.new_api_key()
    log_dir = (
        Path(log_dir)
        if log_dir
        else Path(tempfile.gettempdir()) / "benchcamp-engines" / safe_name(execution_id or "adhoc")
    )
    pid, created, log_path = launch(
        argv,
        log_dir,
        api_key=key,
        secret_env=secret_env,
        execution_id=execution_id,
        results_root=results_root,
        die_with_parent=die_with_parent,
        meta={"engine": kind, "version": cfg.engine.version, "fingerprint": fp},
    )
    log.info("engine %s started: pid %d on %s:%d (fingerprint %s), log %s", kind, pid, host, port, fp, log_path)
    return Deployment(
        endpoint=f"http://{host}:{port}",
        api_key=key,
        # the key lives in the engine's environment only: later steps read it there
        api_key_ref=secret_refs.deployment_key_ref("local", {"pid": pid, "create_time": created}),
        log_path=str(log_path),
        model=cfg.served_model_name,
        handle={
            "kind": "local",
            "pid": pid,
            "create_time": created,
            "argv": argv,
            "engine": kind,
            "fingerprint": fp,
            "version": cfg.engine.version,
            "execution_id": execution_id,
        },
    )
