"""Deploy the engine on a node: what runs there, launched, checked and stopped. This face only re-exports.

One job per module: ``lifecycle`` (deploy and stop, by node kind: dispatch), ``argv`` (the engine command line, a
leaf), ``roles`` (a topology's engines and router, node by node), ``remote`` (the boot script a provider that
launches machines runs on each node), ``vllm_install`` (which real vLLM runs locally, its version, models and
environment), ``local`` (the local process: launch, stop, leftovers, orphans), ``ready`` (readiness), ``keys``
(the engine key a later step reads back), ``deployment`` (the handle passed between steps).
"""

from __future__ import annotations

from benchcamp.deploy.argv import simulated_argv, vllm_argv
from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.lifecycle import check_engine, deploy, engine_folder, free_port
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
from benchcamp.deploy.vllm_install import VllmInstall, find_vllm
from benchcamp.errors import EngineError

__all__ = [
    "EXECUTION_ENV",
    "LOG_TAIL_LINES",
    "OWNER_ENV",
    "RESULTS_ENV",
    "Deployment",
    "EngineError",
    "VllmInstall",
    "check_engine",
    "deploy",
    "engine_folder",
    "execution_engines",
    "find_vllm",
    "free_port",
    "is_running",
    "kill_execution_engines",
    "log_tail",
    "orphaned_engines",
    "reap_orphans",
    "simulated_argv",
    "stop",
    "vllm_argv",
    "wait_ready",
]
