"""Readiness of a deployed engine: ``benchcamp.loadgen.readiness.check``, the one readiness and
capability check that the load generator's preflight uses too, with this deployment's
process liveness and log tail.

A topology (benchcamp.deploy.roles) is ready when every engine is, then its router: each
instance's head (its API server, which answers only once every DP rank of the instance, its
headless peers' included, has joined) must serve the model, while every process of the
deployment stays alive; then the router, probed as a single engine would be.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.local import alive as _alive
from benchcamp.deploy.local import is_running
from benchcamp.deploy.local import tail_text as _tail_text


def _processes(dep: Deployment) -> list[dict[str, Any]]:
    return [dep.handle, *(dep.handle.get("peers") or [])]


def _all_alive(dep: Deployment) -> bool:
    return all(_alive(p) is not None for p in _processes(dep))


def _tail_of(dep: Deployment) -> str:
    """The log tail of the first process that died (else the front process's)."""
    dead = next((p for p in _processes(dep) if _alive(p) is None), None)
    if dead is None or dead is dep.handle:
        return _tail_text(dep)
    name = dead.get("name") or f"pid {dead.get('pid')}"
    return f"{name} exited; " + _tail_text(Deployment(endpoint="", api_key=dep.api_key, log_path=dead.get("log_path")))


def wait_ready(dep: Deployment, timeout: float = 120.0, poll_s: float = 0.25) -> None:
    """Block until the engine serves (``/health``, or ``/v1/models`` on a server without
    one), lists the model and answers requests a benchmark can measure. What the server
    supports is kept in ``dep.handle["capabilities"]`` (JSON).

    Raises :class:`EngineError` with the engine's last log lines when the process exits or
    ``timeout`` passes, EndpointError with the setting to change when the key, the model or
    the API does not work.
    """
    from benchcamp.loadgen.readiness import check

    local = dep.handle.get("kind") == "local"
    alive: Any = (lambda: _all_alive(dep)) if local else None
    if dep.handle.get("kind") == "slurm":  # the job still queued or running (its engine is the job's step)
        from benchcamp.provision.slurm import job_live

        alive = functools.partial(job_live, str(dep.handle.get("job_id")))
    deadline = time.monotonic() + timeout
    if local and dep.handle.get("topology"):
        for p in dep.handle.get("peers") or []:  # every engine's head first
            if p.get("endpoint") and p.get("role") != "router":
                check(
                    p["endpoint"],
                    dep.api_key,
                    dep.model,
                    timeout_s=max(deadline - time.monotonic(), 0.0),
                    poll_s=poll_s,
                    alive=lambda: _all_alive(dep),
                    log_tail=lambda: _tail_of(dep),
                    probe=False,
                )
    caps = check(
        dep.endpoint,
        dep.api_key,
        dep.model,
        timeout_s=max(deadline - time.monotonic(), 0.0) if local else timeout,
        poll_s=poll_s,
        alive=alive,
        log_tail=lambda: _tail_of(dep) if local else _tail_text(dep),
    )
    caps.require_measurable()
    dep.handle["capabilities"] = caps.to_dict()


__all__ = ["is_running", "wait_ready"]
