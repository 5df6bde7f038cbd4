"""Readiness of a deployed engine: ``benchcamp.readiness.check``, the one readiness and
capability check that the load generator's preflight uses too, with this deployment's
process liveness and log tail."""

from __future__ import annotations

from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.local import is_running
from benchcamp.deploy.local import tail_text as _tail_text


def wait_ready(dep: Deployment, timeout: float = 120.0, poll_s: float = 0.25) -> None:
    """Block until the engine serves (``/health``, or ``/v1/models`` on a server without
    one), lists the model and answers requests a benchmark can measure. What the server
    supports is kept in ``dep.handle["capabilities"]`` (JSON).

    Raises :class:`EngineError` with the engine's last log lines when the process exits or
    ``timeout`` passes, EndpointError with the setting to change when the key, the model or
    the API does not work.
    """
    from benchcamp.readiness import check

    local = dep.handle.get("kind") == "local"
    caps = check(
        dep.endpoint,
        dep.api_key,
        dep.model,
        timeout_s=timeout,
        poll_s=poll_s,
        alive=(lambda: is_running(dep)) if local else None,
        log_tail=lambda: _tail_text(dep),
    )
    caps.require_measurable()
    dep.handle["capabilities"] = caps.to_dict()
