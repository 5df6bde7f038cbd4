"""Readiness of a deployed engine: ``/health`` then ``/v1/models`` with the key.

(The one readiness + capability check shared with the load generator's
preflight is being written as ``benchcamp.readiness``; until it lands this is
``wait_ready`` as it was.)
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.local import is_running
from benchcamp.deploy.local import tail_text as _tail_text
from benchcamp.errors import EngineError


def _get(url: str, api_key: str | None, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(dep: Deployment, timeout: float = 120.0, poll_s: float = 0.25) -> None:
    """Block until ``/health`` answers 200 and ``/v1/models`` lists the model.

    Raises :class:`EngineError` with the engine's last log lines when the
    process exits or ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not is_running(dep) and dep.handle.get("kind") == "local":
            raise EngineError(f"engine exited before it was ready ({last})\n{_tail_text(dep)}")
        try:
            status, _ = _get(dep.endpoint + "/health", None)
            if status == 200:
                status, body = _get(dep.endpoint + "/v1/models", dep.api_key)
                if status == 200:
                    try:
                        ids = [m.get("id") for m in json.loads(body).get("data", [])]
                    except (ValueError, AttributeError):
                        raise EngineError(f"engine at {dep.endpoint}: /v1/models did not answer OpenAI-style "
                                          "JSON; is this the engine's base URL?\n" + _tail_text(dep)) from None
                    if dep.model and dep.model not in ids:
                        raise EngineError(f"engine at {dep.endpoint} serves {ids}, not {dep.model!r}; "
                                          "check engine.served_model_name\n" + _tail_text(dep))
                    return
                last = f"/v1/models answered {status}"
                if status in (401, 403):
                    raise EngineError(f"engine at {dep.endpoint} rejected the API key ({status}); "
                                      "check the key source (provider.endpoint.api_key_env / airflow_conn_id)")
            else:
                last = f"/health answered {status}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        time.sleep(poll_s)
    raise EngineError(f"engine at {dep.endpoint} not ready after {timeout:.0f}s ({last})\n{_tail_text(dep)}")
